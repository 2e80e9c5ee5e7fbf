package registry

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/slacker-dev/slacker/internal/image"
	"github.com/slacker-dev/slacker/internal/labels"
)

// FuzzPullManifest feeds Pull's decoders a manifest and a blob as a registry could
// serve them: anything is refused with ErrNotSlacker or ErrMalformed (or a digest
// mismatch), never a panic, and what is accepted is a valid descriptor.
func FuzzPullManifest(f *testing.F) {
	d := &image.Descriptor{Snapshot: digest.FromString("snap"), Size: 1 << 30, DataSize: 1 << 20,
		Created: time.Unix(1700000000, 0).UTC()}
	cfg, err := d.Encode()
	if err != nil {
		f.Fatal(err)
	}
	layer, err := image.EncodeLayer(d)
	if err != nil {
		f.Fatal(err)
	}
	m1 := ocispec.Manifest{MediaType: ocispec.MediaTypeImageManifest, ArtifactType: image.MediaType,
		Config: ocispec.Descriptor{MediaType: image.MediaType, Digest: digest.FromBytes(cfg), Size: int64(len(cfg))}}
	m1.SchemaVersion = 2
	m2 := ocispec.Manifest{MediaType: ocispec.MediaTypeImageManifest,
		Config: ocispec.Descriptor{MediaType: ocispec.MediaTypeImageConfig, Digest: digest.FromString("{}"), Size: 2},
		Layers: []ocispec.Descriptor{{MediaType: ocispec.MediaTypeImageLayer, Digest: digest.FromBytes(layer), Size: int64(len(layer)),
			Annotations: map[string]string{labels.LayerSnapshot: d.Snapshot.String()}}}}
	m2.SchemaVersion = 2
	b1, _ := json.Marshal(m1)
	b2, _ := json.Marshal(m2)
	f.Add(b1, cfg)
	f.Add(b2, layer)
	f.Add([]byte(`{"schemaVersion":2,"config":{"mediaType":"application/vnd.slacker.image.v1+json","size":-1}}`), []byte("{}"))
	f.Add([]byte(`{"manifests":[]}`), []byte{})
	f.Fuzz(func(t *testing.T, manifest, blob []byte) {
		desc, err := slackerBlob("ref", manifest, types.OCIManifestSchema1)
		if err != nil {
			if !errors.Is(err, ErrNotSlacker) && !errors.Is(err, image.ErrMalformed) {
				t.Fatalf("manifest refused without a known error: %v", err)
			}
			return
		}
		if desc.Size < 0 || desc.Size > image.MaxLayerSize {
			t.Fatalf("accepted a blob of %d bytes", desc.Size)
		}
		if real := digest.FromBytes(blob); real != desc.Digest {
			if _, err := decodeBlob("ref", desc, blob); err == nil {
				t.Fatal("a blob that does not match its digest was decoded")
			}
			desc.Digest = real // decode it anyway, to reach the decoders
		}
		got, err := decodeBlob("ref", desc, blob)
		if err != nil {
			return
		}
		if _, err := got.Encode(); err != nil {
			t.Fatalf("accepted a descriptor that does not encode: %v", err)
		}
	})
}
