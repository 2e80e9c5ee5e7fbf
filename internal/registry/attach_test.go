package registry

import (
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
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/image"
)

// TestAttachedChoice: two descriptors attached to one image (two conversions,
// two stores) come back newest first, and ChooseAttached takes the newest the node
// can use, saying why it passed over the others; a descriptor made from another
// image cannot be attached to this one; an image with nothing attached has none.
// Both kinds of registry: Debian's (the referrers tag) and one that serves the
// referrers API.
func TestAttachedChoice(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start func(t *testing.T) string
	}{
		{"distribution-2.8", func(t *testing.T) string { return startRegistry(t).Addr }},
		{"referrers-api", func(t *testing.T) string {
			srv := httptest.NewServer(ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0)),
				ggcrregistry.WithReferrersSupport(true)))
			t.Cleanup(srv.Close)
			return srv.Listener.Addr().String()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			ref := tc.start(t) + "/app/x:v1"
			img, err := random.Image(1024, 1)
			if err != nil {
				t.Fatal(err)
			}
			r, err := name.ParseReference(ref, name.Insecure)
			if err != nil {
				t.Fatal(err)
			}
			if err := remote.Write(r, img); err != nil {
				t.Fatal(err)
			}
			h, err := img.Digest()
			if err != nil {
				t.Fatal(err)
			}
			src := digest.Digest(h.String())
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
