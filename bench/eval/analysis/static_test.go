package analysis

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/slacker-dev/slacker/bench/eval"
)

// TestStaticOnATinyCorpus runs the static analysis end to end on two images built
// here: sizes, counts by depth, and deduplication inside and across images.
func TestStaticOnATinyCorpus(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	block := bytes.Repeat([]byte{'x'}, BlockSize)
	base := func(d string) error {
		os.MkdirAll(filepath.Join(d, "usr", "lib"), 0o755)
		os.WriteFile(filepath.Join(d, "usr", "lib", "libc"), append(append([]byte{}, block...), block...), 0o644) // 2 equal blocks
		return os.WriteFile(filepath.Join(d, "etc-passwd"), []byte("root\n"), 0o644)
	}
	app := func(d string) error {
		os.MkdirAll(filepath.Join(d, "app"), 0o755)
		return os.WriteFile(filepath.Join(d, "app", "copy-of-libc"), append(append([]byte{}, block...), block...), 0o644)
	}
	if _, err := eval.BuildImage(ctx, filepath.Join(dir, "oci"), "tiny-app", []eval.LayerFunc{base, app}); err != nil {
		t.Fatal(err)
	}
	if _, err := eval.BuildImage(ctx, filepath.Join(dir, "oci"), "tiny-base", []eval.LayerFunc{base}); err != nil {
		t.Fatal(err)
	}
	wl := filepath.Join(dir, "w.toml")
	os.WriteFile(wl, []byte(`
[[workload]]
name = "tiny-base"
category = "distro"
base = "minbase"
layers = []
cmd = ["true"]
ready = { exit = 0 }
timeout_s = 10

[[workload]]
name = "tiny-app"
category = "language"
base = "minbase"
layers = [["app"]]
cmd = ["true"]
ready = { exit = 0 }
timeout_s = 10
`), 0o644)
	res, err := Run(ctx, Options{CorpusDir: dir, Workloads: wl, Static: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Images) != 2 || res.Images[0].Name != "tiny-base" || res.Images[1].Name != "tiny-app" {
		t.Fatalf("images %+v", res.Images)
	}
	a := res.Images[1]
	if a.Layers != 2 || a.FileBytes != 4*BlockSize+5 || a.Files != 3 || a.Dirs < 3 {
		t.Fatalf("tiny-app: %+v", a)
	}
	// Top layer first: the app layer holds 2 blocks, the base 2 blocks + 5 bytes.
	if a.DepthBytes[0] != 2*BlockSize || a.DepthBytes[1] != 2*BlockSize+5 || a.DepthFiles[0] != 1 {
		t.Fatalf("depth: %+v", a)
	}
	// Inside the image the app's file equals libc: 2 distinct files of 2 blocks and 5 bytes
	// collapse to one file (and one distinct block).
	if a.UniqueFileBytes != 2*BlockSize+5 || a.UniqueBlockBytes != BlockSize+5 {
		t.Fatalf("dedup inside tiny-app: files %d blocks %d", a.UniqueFileBytes, a.UniqueBlockBytes)
	}
	c := res.Corpus
	if c.DistinctLayers != 2 || c.RawBytes != (4*BlockSize+5)+(2*BlockSize+5) || c.DistinctLayerBytes != 4*BlockSize+5 || c.UniqueBlockBytes != BlockSize+5 {
		t.Fatalf("corpus: %+v", c)
	}
	if a.TopShare() != float64(2*BlockSize)/float64(4*BlockSize+5) {
		t.Fatalf("top share %v", a.TopShare())
	}
	sec := res.Section()
	if len(sec.Figures) != 5 { // no start-up runs: no repeat figure
		t.Fatalf("%d figures", len(sec.Figures))
	}
}
