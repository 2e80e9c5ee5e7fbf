package volume

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/slacker-dev/slacker/internal/runs"
)

// readUnsyncedFile returns the volume's unsynced file.
func readUnsyncedFile(t *testing.T, v *Volume) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(v.Dir(), unsyncedName))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestUnsyncedFileFormat: the unsynced file is a header naming this boot, then one
// record per run a write added to the pending ones (none for a write inside the
// last pending run); a Sync and Close leave the header alone.
func TestUnsyncedFileFormat(t *testing.T) {
	ctx := context.Background()
	s := newStack(t, 1<<20)
	v := s.clone(t, "a", "", 1<<20)
	hdr := "slacker-unsynced 1 " + bootID() + "\n"
	if len(hdr) != unsyncedHeaderLen {
		t.Fatalf("header %q of %d bytes, want %d", hdr, len(hdr), unsyncedHeaderLen)
	}
	want := []byte(hdr)
	check := func(what string) {
		t.Helper()
		if got := readUnsyncedFile(t, v); !bytes.Equal(got, want) {
			t.Fatalf("%s: unsynced file\n%q\nwant\n%q", what, got, want)
		}
	}
	check("created")
	write := func(off, n int64, rec ...runs.Run) {
		t.Helper()
		if _, err := v.WriteAt(ctx, bytes.Repeat([]byte{9}, int(n)), off); err != nil {
			t.Fatal(err)
		}
		want = append(want, encodeRecords(rec)...)
		check(fmt.Sprintf("after a write of [%d, +%d)", off, n))
	}
	write(5*BlockSize+1, 10, runs.Run{Start: 5, End: 6})
	write(5*BlockSize+100, 10)                          // inside the pending run: nothing
	write(6*BlockSize-1, 2, runs.Run{Start: 5, End: 7}) // extends it: the write's run
	write(20*BlockSize, 2*BlockSize, runs.Run{Start: 20, End: 22})
	if err := v.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	want = []byte(hdr)
	check("synced")
	write(5*BlockSize, 1, runs.Run{Start: 5, End: 6}) // synced, but a new pending run
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	want = []byte(hdr)
	check("closed")
	if !strings.HasPrefix(hdr, unsyncedMagic) || !validBootID(bootID()) {
		t.Fatalf("boot id %q", bootID())
	}
}

// TestKillAtEveryStep copies the volume's files at every point between the steps
// of Sync and of the unsynced file's rewrite (a daemon killed there leaves them so:
// the page cache keeps what was written) and opens each copy: every write
// acknowledged before the point reads back.
func TestKillAtEveryStep(t *testing.T) {
	ctx := context.Background()
	s := newStack(t, 1<<20)
	const size = 1 << 20
	v := s.clone(t, "a", "", size)
	model := make([]byte, size)
	write := func(v *Volume, off, n int64, b byte) {
		t.Helper()
		if _, err := v.WriteAt(ctx, bytes.Repeat([]byte{b}, int(n)), off); err != nil {
			t.Fatal(err)
		}
		copy(model[off:], bytes.Repeat([]byte{b}, int(n)))
	}
	type kill struct {
		where, dir string
		model      []byte
	}
	var kills []kill
	var during func() // a write made while Sync runs
	dir := v.Dir()
	crashPoint = func(where string) {
		if where == "sync-taken" && during != nil {
			during()
		}
		to := filepath.Join(t.TempDir(), "copy")
		if err := os.Mkdir(to, 0o700); err != nil {
			t.Fatal(err)
		}
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(to, e.Name()), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		kills = append(kills, kill{where, to, slices.Clone(model)})
	}
	t.Cleanup(func() { crashPoint = nil })

	write(v, 1*BlockSize, 2*BlockSize, 1)
	write(v, 9*BlockSize+5, 3, 2)
	if err := v.Sync(ctx); err != nil { // the truncating trim
		t.Fatal(err)
	}
	write(v, 30*BlockSize+7, 100, 3)
	during = func() {
		write(v, 40*BlockSize+1, 10, 4)
		write(v, 41*BlockSize-1, 2, 5)
		during = nil
	}
	if err := v.Sync(ctx); err != nil { // a rewrite: writes came during it
		t.Fatal(err)
	}
	write(v, 50*BlockSize, 1, 6)
	v.abandon()
	v = s.reopen(t, v) // Open's rewrite with the runs read back
	dir = v.Dir()
	write(v, 60*BlockSize, 1, 7)
	if err := v.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	crashPoint = nil

	seen := map[string]bool{}
	for i, k := range kills {
		seen[k.where] = true
		t.Run(fmt.Sprint(i, "-", k.where), func(t *testing.T) {
			nv, err := Open(k.dir, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			checkRead(t, nv, k.model, 0, size)
			nv.Close()
		})
	}
	for _, w := range []string{"sync-taken", "sync-data", "sync-journaled", "unsynced-trimmed", "unsynced-written", "unsynced-rewritten"} {
		if !seen[w] {
			t.Errorf("no kill at %s", w)
		}
	}
	v.Close()
}

// TestWriteFailsWhenUnsyncedAppendFails: a write or a Zero whose runs cannot be
// listed in the unsynced file fails, and adds nothing to the delta.
func TestWriteFailsWhenUnsyncedAppendFails(t *testing.T) {
	ctx := context.Background()
	s := newStack(t, 8<<20)
	const size = 1 << 20
	v, model := baseVolume(t, s, "a", size)
	v.mu.Lock()
	v.unsynced.Close()
	v.mu.Unlock()
	if _, err := v.WriteAt(ctx, []byte{1, 2, 3}, 5*BlockSize+7); !errors.Is(err, os.ErrClosed) || !strings.Contains(err.Error(), "unsynced") {
		t.Fatalf("write with a failing unsynced file: %v", err)
	}
	if err := v.Zero(ctx, 10*BlockSize, 4*BlockSize); !errors.Is(err, os.ErrClosed) || !strings.Contains(err.Error(), "unsynced") {
		t.Fatalf("zero with a failing unsynced file: %v", err)
	}
	if st := v.Stats(); st.DeltaBytes != 0 {
		t.Fatalf("failed writes added %d bytes to the delta", st.DeltaBytes)
	}
	checkRead(t, v, model, 10*BlockSize, 4*BlockSize)
	v.abandon()
}

// FuzzUnsynced: the unsynced file's reader never panics, reads nothing from a
// file without this boot's header, and reads exactly the whole good records after
// it, up to the first bad one.
func FuzzUnsynced(f *testing.F) {
	const boot = "0ec4802e-86bb-4806-9a1c-d193b26c05c2"
	hdr := unsyncedHeader(boot)
	good := append(slices.Clone(hdr), encodeRecords([]runs.Run{{Start: 0, End: 1}, {Start: 5, End: 9}, {Start: 3, End: 100}})...)
	f.Add(good, int64(100))
	f.Add(good[:len(good)-5], int64(100))
	f.Add(good, int64(50))
	f.Add(hdr, int64(1))
	f.Add(hdr[:10], int64(1))
	f.Add(unsyncedHeader(otherBoot), int64(10))
	f.Add([]byte{}, int64(0))
	f.Fuzz(func(t *testing.T, b []byte, maxBlock int64) {
		var got []runs.Run
		ok, err := readUnsynced(bytes.NewReader(b), hdr, maxBlock, func(r runs.Run) { got = append(got, r) })
		if err != nil {
			t.Fatal(err)
		}
		if ok != bytes.HasPrefix(b, hdr) {
			t.Fatalf("header matched %v, file starts with it %v", ok, bytes.HasPrefix(b, hdr))
		}
		if !ok {
			if len(got) > 0 {
				t.Fatalf("%d runs read from a file without the header", len(got))
			}
			return
		}
		recs := b[len(hdr):]
		if !bytes.Equal(encodeRecords(got), recs[:len(got)*journalRecord]) {
			t.Fatal("the runs read are not those the file's records encode")
		}
		for _, r := range got {
			if r.Start < 0 || r.End <= r.Start || r.End > maxBlock {
				t.Fatalf("run %v outside [0, %d)", r, maxBlock)
			}
		}
		if rest := recs[len(got)*journalRecord:]; len(rest) >= journalRecord {
			if _, ok := decodeRecord(rest[:journalRecord], maxBlock); ok {
				t.Fatal("reading stopped before a good record")
			}
		}
	})
}
