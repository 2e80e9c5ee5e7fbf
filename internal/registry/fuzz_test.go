package registry

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/slacker-dev/slacker/internal/errdefs"
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
	// A layer embedded in the manifest, carrying a map.
	mapBytes := []byte("SLKBMAP\x00 stand-in")
	dm := *d
	dm.Snapshot = digest.FromBytes(mapBytes)
	mlayer, err := image.EncodeLayerMap(&dm, mapBytes)
	if err != nil {
		f.Fatal(err)
	}
	m3 := m2
	m3.Layers = []ocispec.Descriptor{{MediaType: ocispec.MediaTypeImageLayer, Digest: digest.FromBytes(mlayer), Size: int64(len(mlayer)),
		Annotations: map[string]string{labels.LayerSnapshot: dm.Snapshot.String()}, Data: mlayer}}
	b3, _ := json.Marshal(m3)
	f.Add(b3, mlayer)
	f.Add([]byte(`{"schemaVersion":2,"config":{"mediaType":"application/vnd.slacker.image.v1+json","size":-1}}`), []byte("{}"))
	f.Add([]byte(`{"manifests":[]}`), []byte{})
	f.Fuzz(func(t *testing.T, manifest, blob []byte) {
		desc, _, err := slackerBlob("ref", manifest, types.OCIManifestSchema1)
		if err != nil {
			if !errors.Is(err, ErrNotSlacker) && !errors.Is(err, image.ErrMalformed) && !errors.Is(err, errdefs.ErrCorrupt) {
				t.Fatalf("manifest refused without a known error: %v", err)
			}
			return
		}
		if desc.Size < 0 || desc.Size > image.MaxLayerSize {
			t.Fatalf("accepted a blob of %d bytes", desc.Size)
		}
		if real := digest.FromBytes(blob); real != desc.Digest {
			if _, _, err := decodeBlob("ref", desc, blob); err == nil {
				t.Fatal("a blob that does not match its digest was decoded")
			}
			desc.Digest = real // decode it anyway, to reach the decoders
		}
		got, blockMap, err := decodeBlob("ref", desc, blob)
		if err != nil {
			return
		}
		if blockMap != nil && digest.FromBytes(blockMap) != got.Snapshot {
			t.Fatal("returned a carried map that is not the snapshot's")
		}
		if _, err := got.Encode(); err != nil {
			t.Fatalf("accepted a descriptor that does not encode: %v", err)
		}
	})
}
