package volume

import (
	"context"
	"errors"
	"os"
	"slices"
	"testing"

	"github.com/slacker-dev/slacker/internal/atomicfile"
	"github.com/slacker-dev/slacker/internal/atomicfile/atomicfiletest"
)

var allSteps = []atomicfile.Step{atomicfile.StepCreate, atomicfile.StepWrite, atomicfile.StepSync,
	atomicfile.StepClose, atomicfile.StepRename, atomicfile.StepSyncDir}

// injectFS makes the volume's record writes go through a fault-injecting FS until
// the test ends.
func injectFS(t *testing.T) *atomicfiletest.FS {
	f := atomicfiletest.New(nil)
	files.FS = f
	t.Cleanup(func() { files.FS = nil })
	return f
}

// TestCreateFailsWhenRecordWriteFails: a volume whose record cannot be written is
// not made: Create reports the error and leaves no directory.
func TestCreateFailsWhenRecordWriteFails(t *testing.T) {
	errDisk := errors.New("disk full")
	for _, step := range allSteps {
		t.Run(step.String(), func(t *testing.T) {
			s := newStack(t, 1<<20)
			injectFS(t).Fail(step, errDisk)
			dir := s.dir + "/volumes/a"
			if _, err := Create(dir, "", nil, 1<<20, nil); !errors.Is(err, errDisk) {
				t.Fatalf("Create: %v, want the disk's error", err)
			}
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("volume directory after the failed Create: %v", err)
			}
		})
	}
}

// TestFailedCompactionKeepsJournal: when rewriting the journal fails at any step,
// Sync reports it, the journal in place still holds every synced run, and the
// volume keeps working: writes synced afterwards are there after a crash. (After a
// failed fsync of the directory the new journal is in place, and the volume must
// append to it, not to the old file the rename replaced.)
func TestFailedCompactionKeepsJournal(t *testing.T) {
	ctx := context.Background()
	errDisk := errors.New("disk full")
	for _, step := range allSteps {
		t.Run(step.String(), func(t *testing.T) {
			s := newStack(t, 1<<20)
			const size = 1 << 20
			v := s.clone(t, "a", "", size)
			model := make([]byte, size)
			write := func(block int64, b byte) {
				t.Helper()
				data := slices.Repeat([]byte{b}, BlockSize)
				if _, err := v.WriteAt(ctx, data, block*BlockSize); err != nil {
					t.Fatal(err)
				}
				copy(model[block*BlockSize:], data)
			}
			write(0, 1)
			write(5, 2)
			if err := v.Sync(ctx); err != nil {
				t.Fatal(err)
			}

			f := injectFS(t)
			f.Fail(step, errDisk)
			v.records = 1 << 20 // as if many syncs had appended records: the next Sync compacts
			write(9, 3)
			if err := v.Sync(ctx); !errors.Is(err, errDisk) {
				t.Fatalf("Sync with a failing compaction: %v, want the disk's error", err)
			}
			if got := f.Steps(); !slices.Contains(got, step) {
				t.Fatalf("no compaction was tried: calls %v", got)
			}
			f.Clear()
			inPlace, err := os.Stat(v.Dir() + "/journal")
			if err != nil {
				t.Fatal(err)
			}
			if open, err := v.journal.Stat(); err != nil || !os.SameFile(open, inPlace) {
				t.Errorf("the volume appends to a journal that is not the one in place (%v)", err)
			}
			ents, err := os.ReadDir(v.Dir())
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range ents {
				if atomicfile.IsTemp(e.Name()) {
					t.Errorf("temporary file %s left in the volume", e.Name())
				}
			}

			write(12, 4)
			if err := v.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			// Crash: no Close.
			nv, err := Open(v.Dir(), nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			checkRead(t, nv, model, 0, size)
			nv.Close()
			v.abandon()
		})
	}
}
