package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/stargz-snapshotter/estargz"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// gzipLayer is a gzip tar of files (name -> content), directories implied.
func gzipLayer(t *testing.T, files map[string]string) (blob []byte, diffID digest.Digest) {
	t.Helper()
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	dirs := map[string]bool{}
	for _, n := range names {
		// Parent directories first, as real layers have them (and estargz needs
		// them to move a prioritized file).
		for d := path.Dir(n); d != "."; d = path.Dir(d) {
			if !dirs[d] {
				dirs[d] = true
				tw.WriteHeader(&tar.Header{Name: d + "/", Mode: 0o755, Typeflag: tar.TypeDir})
			}
		}
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: int64(len(files[n])), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(files[n]))
	}
	tw.Close()
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(raw.Bytes())
	zw.Close()
	return gz.Bytes(), digest.FromBytes(raw.Bytes())
}

// writeLayout writes an OCI layout holding one image, tagged tag, of layers.
func writeLayout(t *testing.T, dir, tag string, layers ...map[string]string) {
	t.Helper()
	o := ociLayout(dir)
	if err := o.init(); err != nil {
		t.Fatal(err)
	}
	var m ocispec.Manifest
	m.SchemaVersion = 2
	var cfg ocispec.Image
	cfg.RootFS.Type = "layers"
	cfg.Config.Env = []string{"PATH=/bin"}
	for _, files := range layers {
		blob, diffID := gzipLayer(t, files)
		d, err := o.writeBlob(ocispec.MediaTypeImageLayerGzip, blob)
		if err != nil {
			t.Fatal(err)
		}
		m.Layers = append(m.Layers, d)
		cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, diffID)
	}
	cb, _ := json.Marshal(cfg)
	var err error
	if m.Config, err = o.writeBlob(ocispec.MediaTypeImageConfig, cb); err != nil {
		t.Fatal(err)
	}
	mb, _ := json.Marshal(m)
	md, err := o.writeBlob(ocispec.MediaTypeImageManifest, mb)
	if err != nil {
		t.Fatal(err)
	}
	md.Annotations = map[string]string{ocispec.AnnotationRefName: tag}
	if err := o.writeIndex(md); err != nil {
		t.Fatal(err)
	}
}

func TestConvertPrioritizesFilesInTheirTopmostLayer(t *testing.T) {
	dir := t.TempDir()
	src, out := filepath.Join(dir, "src"), filepath.Join(dir, "out")
	big := strings.Repeat("x", 100<<10)
	writeLayout(t, src, "img",
		map[string]string{"bin/tool": "old tool", "lib/libx.so": big, "lib/unused": big, "etc/conf": "a"},
		map[string]string{"bin/tool": "new tool", "share/doc": big})
	list := filepath.Join(dir, "files")
	// In the order a run read them, as the recorder writes them; a path that is in
	// no layer (made at run time) is dropped.
	os.WriteFile(list, []byte("/bin/tool\n/lib/libx.so\n/tmp/made-at-run-time\n/bin/tool\n"), 0o644)
	if err := convert(context.Background(), []string{"--layout", src, "--tag", "img", "--out", out, "--prioritized", list}); err != nil {
		t.Fatal(err)
	}

	o := ociLayout(out)
	m, cfg, err := o.image("img")
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Layers) != 2 || len(cfg.RootFS.DiffIDs) != 2 {
		t.Fatalf("layers %d, diff IDs %d; want 2 and 2", len(m.Layers), len(cfg.RootFS.DiffIDs))
	}
	if !slices.Equal(cfg.Config.Env, []string{"PATH=/bin"}) {
		t.Errorf("config lost its environment: %v", cfg.Config.Env)
	}
	open := func(i int) *estargz.Reader {
		t.Helper()
		d := m.Layers[i]
		b, err := os.ReadFile(o.blob(d.Digest))
		if err != nil {
			t.Fatal(err)
		}
		if digest.FromBytes(b) != d.Digest || int64(len(b)) != d.Size {
			t.Fatalf("layer %d: blob does not match its descriptor", i)
		}
		// The diff ID is the digest of the uncompressed blob, as containerd checks.
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		plain, err := io.ReadAll(zr)
		if err != nil {
			t.Fatal(err)
		}
		if got := digest.FromBytes(plain); got != cfg.RootFS.DiffIDs[i] {
			t.Errorf("layer %d: diff ID %s, uncompressed blob %s", i, cfg.RootFS.DiffIDs[i], got)
		}
		r, err := estargz.Open(io.NewSectionReader(bytes.NewReader(b), 0, int64(len(b))))
		if err != nil {
			t.Fatalf("layer %d is not eStargz: %v", i, err)
		}
		if d.Annotations[estargz.TOCJSONDigestAnnotation] != r.TOCDigest().String() {
			t.Errorf("layer %d: TOC digest annotation %q, TOC %s", i, d.Annotations[estargz.TOCJSONDigestAnnotation], r.TOCDigest())
		}
		if d.Annotations[estargz.StoreUncompressedSizeAnnotation] == "" {
			t.Errorf("layer %d: no uncompressed size annotation", i)
		}
		return r
	}
	offset := func(r *estargz.Reader, name string) int64 {
		t.Helper()
		e, ok := r.Lookup(name)
		if !ok {
			t.Fatalf("no %s in the layer", name)
		}
		return e.Offset
	}
	// Layer 0: lib/libx.so before the landmark, the unread files after it;
	// bin/tool is not prioritized there (layer 1's shadows it).
	l0 := open(0)
	mark := offset(l0, estargz.PrefetchLandmark)
	if offset(l0, "lib/libx.so") > mark {
		t.Error("layer 0: the prioritized lib/libx.so comes after the prefetch landmark")
	}
	for _, n := range []string{"lib/unused", "bin/tool", "etc/conf"} {
		if offset(l0, n) < mark {
			t.Errorf("layer 0: %s, which the run did not read there, comes before the prefetch landmark", n)
		}
	}
	// Layer 1: bin/tool first, share/doc after.
	l1 := open(1)
	mark = offset(l1, estargz.PrefetchLandmark)
	if offset(l1, "bin/tool") > mark || offset(l1, "share/doc") < mark {
		t.Error("layer 1: want bin/tool before the prefetch landmark and share/doc after it")
	}
}

func TestConvertWithoutRecordMarksNoPrefetch(t *testing.T) {
	dir := t.TempDir()
	src, out := filepath.Join(dir, "src"), filepath.Join(dir, "out")
	writeLayout(t, src, "img", map[string]string{"bin/tool": "tool"})
	if err := convert(context.Background(), []string{"--layout", src, "--tag", "img", "--out", out}); err != nil {
		t.Fatal(err)
	}
	o := ociLayout(out)
	m, _, err := o.image("img")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(o.blob(m.Layers[0].Digest))
	r, err := estargz.Open(io.NewSectionReader(bytes.NewReader(b), 0, int64(len(b))))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := r.Lookup(estargz.NoPrefetchLandmark); !ok {
		t.Error("a layer converted without a record has no no-prefetch landmark")
	}
	if _, _, err := o.image("other"); err == nil {
		t.Error("a tag the layout does not hold was found")
	}
}

func TestReadPaths(t *testing.T) {
	f := filepath.Join(t.TempDir(), "list")
	os.WriteFile(f, []byte("/usr/bin/python3\n\nusr/lib/x.so\n/usr/bin/../bin/python3\n  /etc/hosts  \n"), 0o644)
	got, err := readPaths(f)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"usr/bin/python3", "usr/lib/x.so", "etc/hosts"}
	if !slices.Equal(got, want) {
		t.Errorf("readPaths = %q, want %q", got, want)
	}
}
