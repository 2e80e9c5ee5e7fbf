package corpus

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/klauspost/compress/gzip"
)

func TestSynthDeterministicAndSized(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		spec SynthSpec
		name string
	}{
		{SynthSpec{Files: 10, Size: 1000, Layers: 1, Seed: 1}, "synth-f10-s1000-l1-r1"},
		{SynthSpec{Files: 7, Size: 64 << 10, Layers: 3, Seed: 9}, "synth-f7-s64kib-l3-r9"},
		{SynthSpec{Files: 3, Size: 0, Layers: 3, Seed: 2}, "synth-f3-s0-l3-r2"},
		{SynthSpec{Files: 600, Size: 16, Layers: 2, Seed: 5}, "synth-f600-s16-l2-r5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.spec.DefaultName(); got != tt.name {
				t.Errorf("name %q, want %q", got, tt.name)
			}
			c1, err := Open(Options{Dir: t.TempDir(), MinFree: -1})
			if err != nil {
				t.Fatal(err)
			}
			c2, err := Open(Options{Dir: t.TempDir(), MinFree: -1})
			if err != nil {
				t.Fatal(err)
			}
			r1, err := c1.Synth(ctx, tt.spec)
			if err != nil {
				t.Fatal(err)
			}
			r2, err := c2.Synth(ctx, tt.spec)
			if err != nil {
				t.Fatal(err)
			}
			if r1.Manifest != r2.Manifest || len(r1.Layers) != tt.spec.Layers {
				t.Fatalf("not deterministic or wrong layers: %s %s (%d layers)", r1.Manifest, r2.Manifest, len(r1.Layers))
			}
			// Every file is there once, with the right size and its own content.
			seen := map[string]bool{}
			sums := map[[32]byte]bool{}
			for _, l := range r1.Layers {
				f, err := os.Open(c1.Layout.BlobPath(l.Digest))
				if err != nil {
					t.Fatal(err)
				}
				gz, err := gzip.NewReader(f)
				if err != nil {
					t.Fatal(err)
				}
				tr := tar.NewReader(gz)
				for {
					h, err := tr.Next()
					if err == io.EOF {
						break
					}
					if err != nil {
						t.Fatal(err)
					}
					if h.Typeflag != tar.TypeReg {
						continue
					}
					b, _ := io.ReadAll(tr)
					if int64(len(b)) != tt.spec.Size || h.Size != tt.spec.Size {
						t.Fatalf("%s: %d bytes, want %d", h.Name, len(b), tt.spec.Size)
					}
					if seen[h.Name] {
						t.Fatalf("%s twice", h.Name)
					}
					seen[h.Name] = true
					sums[sha256.Sum256(b)] = true
				}
				f.Close()
			}
			if len(seen) != tt.spec.Files {
				t.Fatalf("%d files, want %d", len(seen), tt.spec.Files)
			}
			if tt.spec.Size >= 16 && len(sums) != tt.spec.Files {
				t.Fatalf("only %d distinct contents for %d files", len(sums), tt.spec.Files)
			}
			if tags, _ := c1.Layout.Tags(); tags[tt.name].Digest.String() != r1.Manifest {
				t.Fatalf("not tagged as %s", tt.name)
			}
		})
	}
}

func TestSynthSeedChangesContent(t *testing.T) {
	read := func(seed uint64) []byte {
		b, _ := io.ReadAll(synthReader(seed, 0, 4096))
		return b
	}
	if bytes.Equal(read(1), read(2)) {
		t.Fatal("seed does not change content")
	}
	if !bytes.Equal(read(3), read(3)) {
		t.Fatal("content not deterministic")
	}
	a, _ := io.ReadAll(synthReader(1, 0, 100))
	b, _ := io.ReadAll(synthReader(1, 1, 100))
	if bytes.Equal(a, b) {
		t.Fatal("files share content")
	}
}

func TestSynthValidate(t *testing.T) {
	for _, s := range []SynthSpec{
		{Files: 0, Size: 1, Layers: 1},
		{Files: 1, Size: -1, Layers: 1},
		{Files: 2, Size: 1, Layers: 3},
		{Files: 2, Size: 1, Layers: 0},
		{Files: 1 << 20, Size: 1 << 20, Layers: 1},
	} {
		if err := s.Validate(); err == nil {
			t.Errorf("%+v: no error", s)
		}
	}
	c, err := Open(Options{Dir: t.TempDir(), MinFree: 1 << 62})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Synth(context.Background(), SynthSpec{Files: 1, Size: 1, Layers: 1}); err == nil {
		t.Fatal("synth ignored the free-space minimum")
	}
	if _, err := os.Stat(filepath.Join(c.Dir(), "records")); err == nil {
		t.Fatal("refused synth left a record")
	}
}
