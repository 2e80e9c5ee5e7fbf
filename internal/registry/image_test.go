package registry

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/slacker-dev/slacker/internal/image"
	"github.com/slacker-dev/slacker/internal/labels"
)

// TestPushedImageIsAnOCIImage: what Push writes is an ordinary OCI image a stock
// client reads (config with the image's command and platform, one layer whose diff
// ID is in the config), and its layer carries the snapshot annotation containerd's
// unpacker passes to the Slacker snapshotter.
func TestPushedImageIsAnOCIImage(t *testing.T) {
	ctx := context.Background()
	reg := startRegistry(t)
	d := &image.Descriptor{
		Snapshot: digest.FromString("snap"), Size: 1 << 30, DataSize: 1 << 20,
		Config:   ocispec.ImageConfig{Cmd: []string{"bash"}, Env: []string{"PATH=/usr/bin:/bin"}},
		Platform: ocispec.Platform{OS: "linux", Architecture: "amd64"},
		Created:  time.Now().UTC().Truncate(time.Second),
	}
	ref := reg.Addr + "/slacker/oci:v1"
	if _, err := Push(ctx, ref, d, Options{}); err != nil {
		t.Fatal(err)
	}
	r, _ := name.ParseReference(ref)
	img, err := remote.Image(r)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.OS != "linux" || cfg.Architecture != "amd64" || len(cfg.Config.Cmd) != 1 || cfg.Config.Cmd[0] != "bash" {
		t.Fatalf("config %+v", cfg)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 || len(cfg.RootFS.DiffIDs) != 1 {
		t.Fatalf("layers %v %v, diff IDs %v", layers, err, cfg.RootFS.DiffIDs)
	}
	if diff, _ := layers[0].DiffID(); diff != cfg.RootFS.DiffIDs[0] {
		t.Fatalf("layer diff ID %s, config says %s", diff, cfg.RootFS.DiffIDs[0])
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Layers[0].Annotations[labels.LayerSnapshot]; got != d.Snapshot.String() {
		t.Fatalf("layer annotation %q, want %s", got, d.Snapshot)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got, err := image.DecodeLayer(rc)
	if err != nil || got.Snapshot != d.Snapshot {
		t.Fatalf("layer: %v %+v", err, got)
	}
}
