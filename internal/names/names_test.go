package names

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/atomicfile"
	"github.com/slacker-dev/slacker/internal/atomicfile/atomicfiletest"
	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/image"
)

func TestNormalize(t *testing.T) {
	for in, want := range map[string]string{
		"debian":                   "debian:latest",
		"debian:bookworm":          "debian:bookworm",
		"127.0.0.1:5000/x/debian":  "127.0.0.1:5000/x/debian:latest",
		"localhost:5000/debian:12": "localhost:5000/debian:12",
		"my/app:v1":                "my/app:v1",
	} {
		got, err := Normalize(in)
		if err != nil || got != want {
			t.Errorf("Normalize(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "UPPER", "a b", "x:y:z"} {
		if _, err := Normalize(bad); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("Normalize(%q): %v, want ErrInvalid", bad, err)
		}
	}
}

func TestPutGetListDelete(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	d := &image.Descriptor{Snapshot: digest.FromString("x"), Size: 1 << 30, DataSize: 1 << 20}
	if err := s.Put("debian", d); err != nil {
		t.Fatal(err)
	}
	e, err := s.Get("debian:latest")
	if err != nil || e.Descriptor.Snapshot != d.Snapshot || e.Name != "debian:latest" {
		t.Fatalf("get: %+v, %v", e, err)
	}
	l, _ := s.List()
	if len(l) != 1 {
		t.Fatalf("list: %d", len(l))
	}
	if err := s.Delete("debian"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get("debian"); !errors.Is(err, errdefs.ErrNotFound) || err.Error() != "image debian: no such image" {
		t.Fatalf("after delete: %v", err)
	}
	k := digest.FromString("chain")
	if _, err := s.Chain(k); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatal(err)
	}
	s.PutChain(k, d.Snapshot)
	if got, err := s.Chain(k); err != nil || got != d.Snapshot {
		t.Fatalf("chain: %v %v", got, err)
	}
}

// TestFailedWriteKeepsOldEntry: when writing an entry fails at any step before the
// rename, Put and PutChain report it and the name and the chain keep what they
// held, with no file left beside the entries.
func TestFailedWriteKeepsOldEntry(t *testing.T) {
	errDisk := errors.New("disk full")
	old := &image.Descriptor{Snapshot: digest.FromString("old"), Size: 1 << 30, DataSize: 1 << 20}
	repl := &image.Descriptor{Snapshot: digest.FromString("new"), Size: 1 << 30, DataSize: 1 << 20}
	key := digest.FromString("chain")
	for _, step := range []atomicfile.Step{atomicfile.StepCreate, atomicfile.StepWrite, atomicfile.StepSync,
		atomicfile.StepClose, atomicfile.StepRename} {
		t.Run(step.String(), func(t *testing.T) {
			dir := t.TempDir()
			s, err := Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Put("debian", old); err != nil {
				t.Fatal(err)
			}
			if err := s.PutChain(key, old.Snapshot); err != nil {
				t.Fatal(err)
			}
			f := atomicfiletest.New(nil)
			f.Fail(step, errDisk)
			s.files.FS = f
			if err := s.Put("debian", repl); !errors.Is(err, errDisk) {
				t.Errorf("Put: %v, want the disk's error", err)
			}
			if err := s.PutChain(key, repl.Snapshot); !errors.Is(err, errDisk) {
				t.Errorf("PutChain: %v, want the disk's error", err)
			}
			if e, err := s.Get("debian"); err != nil || e.Descriptor.Snapshot != old.Snapshot {
				t.Errorf("Get after the failed Put: %+v, %v; want the old entry", e, err)
			}
			if got, err := s.Chain(key); err != nil || got != old.Snapshot {
				t.Errorf("Chain after the failed PutChain: %s, %v; want %s", got, err, old.Snapshot)
			}
			if l, err := s.List(); err != nil || len(l) != 1 {
				t.Errorf("List: %d entries, %v", len(l), err)
			}
			for _, sub := range []string{"images", "chains"} {
				ents, err := os.ReadDir(filepath.Join(dir, sub))
				if err != nil || len(ents) != 1 {
					t.Errorf("%s holds %v (%v), want only the entry", sub, ents, err)
				}
			}
		})
	}
}
