package registry

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/image"
	"github.com/slacker-dev/slacker/internal/testenv/services"
)

// attachRegistries are the two kinds of registry: Debian's (no referrers API: the
// referrers tag) and go-containerregistry's, which serves the referrers API.
var attachRegistries = []struct {
	name  string
	start func(t *testing.T) string // the registry's address
}{
	{"distribution-2.8", func(t *testing.T) string { return startRegistry(t).Addr }},
	{"referrers-api", func(t *testing.T) string {
		srv := httptest.NewServer(ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0)),
			ggcrregistry.WithReferrersSupport(true)))
		t.Cleanup(srv.Close)
		return srv.Listener.Addr().String()
	}},
}

// TestAttachedChoice: two descriptors attached to one image (two conversions,
// two stores) come back newest first, and ChooseAttached takes the newest the node
// can use, saying why it passed over the others; a descriptor made from another
// image cannot be attached to this one; an image with nothing attached has none.
// Both kinds of registry: Debian's (the referrers tag) and one that serves the
// referrers API.
func TestAttachedChoice(t *testing.T) {
	for _, tc := range attachRegistries {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			ref := tc.start(t) + "/app/x:v1"
			src := services.PushRandomImage(t, ref)
			if found, _, _, err := Attached(ctx, ref, Options{}); err != nil || len(found) != 0 {
				t.Fatalf("nothing attached yet: %v, %v", found, err)
			}
			desc := func(snap string, created time.Time, from digest.Digest) *image.Descriptor {
				return &image.Descriptor{Snapshot: digest.FromString(snap), Size: 1 << 30, DataSize: 1 << 20,
					Created: created.UTC().Truncate(time.Second), Source: &image.Source{Reference: ref, ManifestDigest: from}}
			}
			now := time.Now()
			older, newer := desc("older", now.Add(-time.Hour), src), desc("newer", now, src)
			for _, d := range []*image.Descriptor{older, newer} {
				if _, err := Attach(ctx, ref, d, Options{}); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := Attach(ctx, ref, desc("foreign", now, digest.FromString("another image")), Options{}); !errors.Is(err, errdefs.ErrInvalid) ||
				!strings.Contains(err.Error(), "convert") {
				t.Fatalf("attaching a descriptor made from another image: %v", err)
			}
			found, subject, rejected, err := Attached(ctx, ref, Options{})
			if err != nil || subject != src || len(rejected) != 0 {
				t.Fatalf("Attached: subject %s (want %s), rejected %v, err %v", subject, src, rejected, err)
			}
			if len(found) != 2 || found[0].Descriptor.Snapshot != newer.Snapshot || found[1].Descriptor.Snapshot != older.Snapshot {
				t.Fatalf("found %d, want the newer then the older", len(found))
			}
			// The node's store has only the older one's snapshot.
			a, passed := ChooseAttached(found, func(d *image.Descriptor) error {
				if d.Snapshot != older.Snapshot {
					return fmt.Errorf("snapshot %s: %w", d.Snapshot, errdefs.ErrNotFound)
				}
				return nil
			})
			if a == nil || a.Descriptor.Snapshot != older.Snapshot || len(passed) != 1 || !errors.Is(passed[0].Err, errdefs.ErrNotFound) {
				t.Fatalf("chose %+v, passed %+v", a, passed)
			}
			if a, _ := ChooseAttached(found, func(*image.Descriptor) error { return errors.New("no") }); a != nil {
				t.Fatal("chose a descriptor no one can use")
			}
		})
	}
}

// TestAttachedTooLarge: an artifact attached to the image whose descriptor is
// larger than a descriptor can be is passed over, with its reason, and never read;
// the good descriptor attached beside it is still found.
func TestAttachedTooLarge(t *testing.T) {
	for _, tc := range attachRegistries {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			ref := tc.start(t) + "/app/x:v1"
			src := services.PushRandomImage(t, ref)
			good := &image.Descriptor{Snapshot: digest.FromString("good"), Size: 1 << 30, DataSize: 1 << 20,
				Created: time.Now().UTC().Truncate(time.Second), Source: &image.Source{Reference: ref, ManifestDigest: src}}
			if _, err := Attach(ctx, ref, good, Options{}); err != nil {
				t.Fatal(err)
			}
			big := pushArtifact(t, ref, src, make([]byte, image.MaxSize+1))
			found, _, rejected, err := Attached(ctx, ref, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if len(found) != 1 || found[0].Descriptor.Snapshot != good.Snapshot {
				t.Fatalf("found %+v, want the good descriptor alone", found)
			}
			if len(rejected) != 1 || rejected[0].Artifact != big || !errors.Is(rejected[0].Err, image.ErrMalformed) ||
				!strings.Contains(rejected[0].Err.Error(), "larger than") {
				t.Fatalf("rejected %+v, want artifact %s, too large", rejected, big)
			}
		})
	}
}

// pushArtifact attaches blob to the image subject at ref as a Slacker descriptor
// artifact, as Attach would but whatever blob holds, and returns the artifact's
// manifest digest.
func pushArtifact(t *testing.T, ref string, subject digest.Digest, blob []byte) digest.Digest {
	t.Helper()
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	desc, err := remote.Get(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []v1.Layer{
		static.NewLayer(emptyJSON, types.MediaType(ArtifactType)),
		static.NewLayer(blob, types.MediaType(image.MediaType)),
	} {
		if err := remote.WriteLayer(r.Context(), l); err != nil {
			t.Fatal(err)
		}
	}
	m := ocispec.Manifest{
		MediaType:    ocispec.MediaTypeImageManifest,
		ArtifactType: ArtifactType,
		Config:       ocispec.Descriptor{MediaType: ArtifactType, Digest: digest.FromBytes(emptyJSON), Size: int64(len(emptyJSON))},
		Layers:       []ocispec.Descriptor{{MediaType: image.MediaType, Digest: digest.FromBytes(blob), Size: int64(len(blob))}},
		Subject:      &ocispec.Descriptor{MediaType: string(desc.MediaType), Digest: subject, Size: desc.Size},
	}
	m.SchemaVersion = 2
	mb, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	md := digest.FromBytes(mb)
	if err := remote.Put(r.Context().Digest(md.String()), rawManifest{mb, types.OCIManifestSchema1}); err != nil {
		t.Fatal(err)
	}
	return md
}
