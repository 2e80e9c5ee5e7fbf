package local

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/opencontainers/go-digest"
	"golang.org/x/sys/unix"

	"github.com/slacker-dev/slacker/internal/atomicfile"
	"github.com/slacker-dev/slacker/internal/atomicfile/atomicfiletest"
	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/store"
	"github.com/slacker-dev/slacker/internal/store/storetest"
)

func TestSuite(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) store.Store {
			s, err := Open(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		Corrupt: func(t *testing.T, s store.Store, d digest.Digest) {
			p := s.(*Store).Path(d)
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)/2] ^= 0x40
			if err := os.WriteFile(p, b, 0o600); err != nil {
				t.Fatal(err)
			}
		},
	})
}

func TestStrayFilesAreNotObjects(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(dir+"/sha256/ab", 0o700)
	os.WriteFile(dir+"/sha256/ab/not-a-digest", []byte("x"), 0o600)
	n := 0
	if err := s.List(t.Context(), func(store.Info) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("listed %d objects from stray files", n)
	}
}

// TestFailedWriteKeepsOldState: a Put or PutRef whose write fails at any step before
// the rename reports the error, stores nothing (a record keeps its old content) and
// leaves nothing in tmp/; one cut short by a crash leaves at most its temporary
// file, which neither List nor the next Put minds.
func TestFailedWriteKeepsOldState(t *testing.T) {
	ctx := t.Context()
	errDisk := errors.New("disk full")
	obj := []byte("an object's bytes")
	d := digest.FromBytes(obj)
	for _, crash := range []bool{false, true} {
		for _, step := range []atomicfile.Step{atomicfile.StepCreate, atomicfile.StepWrite, atomicfile.StepSync,
			atomicfile.StepClose, atomicfile.StepRename} {
			name := step.String()
			if crash {
				name = "crash-at-" + name
			}
			t.Run(name, func(t *testing.T) {
				dir := t.TempDir()
				s, err := Open(dir)
				if err != nil {
					t.Fatal(err)
				}
				if err := s.PutRef(ctx, "leases/a", []byte("old")); err != nil {
					t.Fatal(err)
				}
				f := atomicfiletest.New(nil)
				if crash {
					f.Crash(step)
				} else {
					f.Fail(step, errDisk)
				}
				s.files.FS = f
				want := errDisk
				if crash {
					want = atomicfiletest.ErrCrashed
				}
				if err := s.Put(ctx, d, int64(len(obj)), bytes.NewReader(obj)); !errors.Is(err, want) {
					t.Errorf("Put: %v, want %v", err, want)
				}
				if _, err := s.Stat(ctx, d); !errors.Is(err, errdefs.ErrNotFound) {
					t.Errorf("Stat after the failed Put: %v, want not found", err)
				}
				n := 0
				if err := s.List(ctx, func(store.Info) error { n++; return nil }); err != nil || n != 0 {
					t.Errorf("List after the failed Put: %d objects, %v", n, err)
				}
				if !crash { // a crashed process makes no more calls
					if err := s.PutRef(ctx, "leases/a", []byte("new")); !errors.Is(err, errDisk) {
						t.Errorf("PutRef: %v, want the disk's error", err)
					}
					if b, err := s.GetRef(ctx, "leases/a"); err != nil || string(b) != "old" {
						t.Errorf("GetRef after the failed PutRef: %q, %v; want the old record", b, err)
					}
					if ents, err := os.ReadDir(filepath.Join(dir, "tmp")); err != nil || len(ents) != 0 {
						t.Errorf("tmp/ holds %v (%v) after failed writes", ents, err)
					}
				}

				s.files.FS = nil // restarted
				if err := s.Put(ctx, d, int64(len(obj)), bytes.NewReader(obj)); err != nil {
					t.Fatal(err)
				}
				if err := s.PutRef(ctx, "leases/a", []byte("new")); err != nil {
					t.Fatal(err)
				}
				if b, err := s.GetRange(ctx, d, 0, int64(len(obj))); err != nil || !bytes.Equal(b, obj) {
					t.Errorf("object after the next Put: %q, %v", b, err)
				}
				if b, err := s.GetRef(ctx, "leases/a"); err != nil || string(b) != "new" {
					t.Errorf("record after the next PutRef: %q, %v", b, err)
				}
				ents, err := os.ReadDir(filepath.Join(dir, "tmp"))
				if err != nil {
					t.Fatal(err)
				}
				maxLeft := 0
				if crash && step != atomicfile.StepCreate {
					maxLeft = 1
				}
				for _, e := range ents {
					if !atomicfile.IsTemp(e.Name()) {
						t.Errorf("tmp/%s is not a temporary file", e.Name())
					}
				}
				if len(ents) != maxLeft {
					t.Errorf("tmp/ holds %d files, want %d (the crashed write's)", len(ents), maxLeft)
				}
			})
		}
	}
}

// TestBlockSumsKept: an object keeps the checksums of its 4 KiB blocks with its
// file, taken from the bytes its Put verified; an object without them (stored
// before they were kept) gets them from its first whole read that matches its
// digest, and never from a read cut short or of damaged bytes; an object over
// store.MaxSummedObject has none.
func TestBlockSumsKept(t *testing.T) {
	ctx := t.Context()
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	put := func(size int) (digest.Digest, []byte) {
		t.Helper()
		b := make([]byte, size)
		rand.Read(b)
		d := digest.FromBytes(b)
		if err := s.Put(ctx, d, int64(size), bytes.NewReader(b)); err != nil {
			t.Fatal(err)
		}
		return d, b
	}
	check := func(d digest.Digest, data []byte) {
		t.Helper()
		bs, ok := s.ObjectSums(d)
		if !ok || bs.Size != int64(len(data)) || !slices.Equal(bs.Sums, store.SumBlocks(data, bs.Seed)) {
			t.Fatalf("object %s: checksums %v (%d for %d bytes); want those of its blocks", d, ok, len(bs.Sums), bs.Size)
		}
	}
	unsum := func(d digest.Digest) {
		t.Helper()
		if err := unix.Removexattr(s.ObjectFile(d), blockSumsXattr); err != nil {
			t.Fatal(err)
		}
	}
	d, data := put(256<<10 + 100)
	check(d, data)

	unsum(d)
	r, err := s.Get(ctx, d) // cut short
	if err != nil {
		t.Fatal(err)
	}
	io.ReadFull(r, make([]byte, 4096))
	r.Close()
	if _, ok := s.ObjectSums(d); ok {
		t.Fatal("checksums kept from a read cut short")
	}
	if got, err := store.ReadAll(ctx, s, d); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("whole read: %v", err)
	}
	check(d, data)

	// Damaged bytes: the read fails, and takes no checksums.
	unsum(d)
	p := s.ObjectFile(d)
	b, _ := os.ReadFile(p)
	b[5000] ^= 1
	os.WriteFile(p, b, 0o600)
	if _, err := store.ReadAll(ctx, s, d); !errors.Is(err, errdefs.ErrCorrupt) {
		t.Fatalf("read of a damaged object: %v", err)
	}
	if _, ok := s.ObjectSums(d); ok {
		t.Fatal("checksums kept from damaged bytes")
	}
	// A damaged encoding is none.
	if err := unix.Setxattr(p, blockSumsXattr, []byte("SBS1 not really"), 0); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.ObjectSums(d); ok {
		t.Fatal("a damaged encoding was taken for checksums")
	}

	big, _ := put(store.MaxSummedObject + 1)
	if _, ok := s.ObjectSums(big); ok {
		t.Fatal("checksums of an object over MaxSummedObject")
	}
	if _, ok := s.ObjectSums(digest.FromString("missing")); ok {
		t.Fatal("checksums of a missing object")
	}
}
