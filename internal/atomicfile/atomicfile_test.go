package atomicfile_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/slacker-dev/slacker/internal/atomicfile"
	"github.com/slacker-dev/slacker/internal/atomicfile/atomicfiletest"
)

var writeSteps = []atomicfile.Step{atomicfile.StepCreate, atomicfile.StepWrite, atomicfile.StepSync,
	atomicfile.StepClose, atomicfile.StepRename, atomicfile.StepSyncDir}

// layout is where a test's target and temporary files live.
type layout struct {
	name    string
	tempDir bool // temporaries in a directory of their own, as the local store has
}

var layouts = []layout{{"next-to-target", false}, {"temp-dir", true}}

// setup makes a directory holding target (with old, unless old is "") and returns
// the target's path and a Writer through f.
func setup(t *testing.T, l layout, old string, f atomicfile.FS) (string, atomicfile.Writer) {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "records")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	w := atomicfile.Writer{FS: f}
	if l.tempDir {
		w.TempDir = filepath.Join(root, "tmp")
		if err := os.Mkdir(w.TempDir, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	target := filepath.Join(dir, "record.json")
	if old != "" {
		if err := os.WriteFile(target, []byte(old), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return target, w
}

// content returns the target's content, "" if it does not exist.
func content(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// temps returns the temporary files in the directories a write uses, and fails the
// test on any other file there but the target.
func temps(t *testing.T, target string, w atomicfile.Writer) []string {
	t.Helper()
	var out []string
	dirs := []string{filepath.Dir(target)}
	if w.TempDir != "" {
		dirs = append(dirs, w.TempDir)
	}
	for _, dir := range dirs {
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			p := filepath.Join(dir, e.Name())
			switch {
			case p == target:
			case atomicfile.IsTemp(e.Name()):
				out = append(out, p)
			default:
				t.Errorf("stray file %s", p)
			}
		}
	}
	return out
}

// TestStepOrder: a write creates, writes, fsyncs and closes its temporary file,
// renames it over the target and then fsyncs the target's directory, in that order;
// without sync, the two fsyncs are left out.
func TestStepOrder(t *testing.T) {
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) {
			f := atomicfiletest.New(nil)
			target, w := setup(t, l, "old", f)
			if err := w.WriteFile(target, []byte("new"), 0o600); err != nil {
				t.Fatal(err)
			}
			if got := f.Steps(); !slices.Equal(got, writeSteps) {
				t.Fatalf("steps %v, want %v", got, writeSteps)
			}
			calls := f.Calls()
			tmp := calls[0].Path
			wantDir := filepath.Dir(target)
			if l.tempDir {
				wantDir = w.TempDir
			}
			if filepath.Dir(tmp) != wantDir || !atomicfile.IsTemp(filepath.Base(tmp)) {
				t.Errorf("temporary file %s, want a temporary name in %s", tmp, wantDir)
			}
			for _, c := range calls[1:4] {
				if c.Path != tmp {
					t.Errorf("%s of %s, want of %s", c.Step, c.Path, tmp)
				}
			}
			if c := calls[4]; c.Path != tmp || c.NewPath != target {
				t.Errorf("rename %s -> %s, want %s -> %s", c.Path, c.NewPath, tmp, target)
			}
			if c := calls[5]; c.Path != filepath.Dir(target) {
				t.Errorf("sync-dir of %s, want %s", c.Path, filepath.Dir(target))
			}
			if got := content(t, target); got != "new" {
				t.Errorf("target holds %q", got)
			}
			if left := temps(t, target, w); len(left) != 0 {
				t.Errorf("temporary files left: %v", left)
			}
		})
	}
	t.Run("no-sync", func(t *testing.T) {
		f := atomicfiletest.New(nil)
		target, w := setup(t, layouts[0], "old", f)
		w.NoSync = true
		if err := w.WriteFile(target, []byte("new"), 0o600); err != nil {
			t.Fatal(err)
		}
		want := []atomicfile.Step{atomicfile.StepCreate, atomicfile.StepWrite, atomicfile.StepClose, atomicfile.StepRename}
		if got := f.Steps(); !slices.Equal(got, want) {
			t.Fatalf("steps %v, want %v", got, want)
		}
		if got := content(t, target); got != "new" {
			t.Errorf("target holds %q", got)
		}
	})
}

// TestInjectedError: an error at any step fails the write with an *Error naming the
// step and the target, and leaves no temporary file; the target keeps its old
// content, except after a failed fsync of the directory, when the rename is done.
func TestInjectedError(t *testing.T) {
	errInjected := errors.New("disk on fire")
	for _, l := range layouts {
		for _, old := range []string{"old", ""} {
			for _, step := range writeSteps {
				t.Run(l.name+"/old="+old+"/"+step.String(), func(t *testing.T) {
					f := atomicfiletest.New(nil)
					target, w := setup(t, l, old, f)
					f.Fail(step, errInjected)
					err := w.WriteFile(target, []byte("new"), 0o600)
					var e *atomicfile.Error
					if !errors.As(err, &e) || e.Step != step || e.Path != target || !errors.Is(err, errInjected) {
						t.Fatalf("error %v, want an *Error of step %s of %s wrapping the injected one", err, step, target)
					}
					if msg := err.Error(); !strings.Contains(msg, ": "+step.String()+": ") || !strings.Contains(msg, target) {
						t.Errorf("message %q names neither the step nor the target", msg)
					}
					want := old
					if step == atomicfile.StepSyncDir {
						want = "new"
					}
					if got := content(t, target); got != want {
						t.Errorf("target holds %q, want %q", got, want)
					}
					if atomicfile.Replaced(err) != (step == atomicfile.StepSyncDir) {
						t.Errorf("Replaced = %v after a failed %s", atomicfile.Replaced(err), step)
					}
					if left := temps(t, target, w); len(left) != 0 {
						t.Errorf("temporary files left: %v", left)
					}
				})
			}
		}
	}
}

// TestInjectedCrash: a crash at any step (no cleanup at all) leaves the target with
// exactly the old content, or the new one once the rename is done, and at most one
// temporary file, which the next write ignores: it succeeds and leaves nothing of
// its own.
func TestInjectedCrash(t *testing.T) {
	for _, l := range layouts {
		for _, old := range []string{"old", ""} {
			for _, step := range writeSteps {
				t.Run(l.name+"/old="+old+"/"+step.String(), func(t *testing.T) {
					f := atomicfiletest.New(nil)
					target, w := setup(t, l, old, f)
					f.Crash(step)
					if err := w.WriteFile(target, []byte("new"), 0o600); !errors.Is(err, atomicfiletest.ErrCrashed) {
						t.Fatalf("write crashed at %s returned %v", step, err)
					}
					if !f.Crashed() {
						t.Fatal("no crash")
					}
					if got := f.Steps(); !slices.Equal(got, writeSteps[:slices.Index(writeSteps, step)]) {
						t.Errorf("calls before the crash: %v", got)
					}
					want := old
					if step == atomicfile.StepSyncDir {
						want = "new"
					}
					if got := content(t, target); got != want {
						t.Errorf("target holds %q, want %q", got, want)
					}
					left := temps(t, target, w)
					wantLeft := 1
					switch step {
					case atomicfile.StepCreate, atomicfile.StepSyncDir:
						wantLeft = 0
					}
					if len(left) != wantLeft {
						t.Fatalf("temporary files after the crash: %v, want %d", left, wantLeft)
					}
					if wantLeft == 1 {
						wantTmp := "new"
						if step == atomicfile.StepWrite {
							wantTmp = ""
						}
						if got := content(t, left[0]); got != wantTmp {
							t.Errorf("temporary file holds %q, want %q", got, wantTmp)
						}
					}

					// The process restarts: a new write goes through.
					w.FS = nil
					if err := w.WriteFile(target, []byte("newer"), 0o600); err != nil {
						t.Fatal(err)
					}
					if got := content(t, target); got != "newer" {
						t.Errorf("after the next write the target holds %q", got)
					}
					if after := temps(t, target, w); !slices.Equal(after, left) {
						t.Errorf("temporary files after the next write: %v, want only the crash's %v", after, left)
					}
				})
			}
		}
	}
}

// TestPending: the streaming form writes in pieces; Abort leaves the target alone;
// a failed Write fails Commit and removes the temporary file; Abort after Commit and
// a second Commit change nothing.
func TestPending(t *testing.T) {
	f := atomicfiletest.New(nil)
	target, w := setup(t, layouts[1], "old", f)

	p, err := w.Create(target, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"one ", "two ", "three"} {
		if _, err := p.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	if got := content(t, target); got != "old" {
		t.Errorf("before Commit the target holds %q", got)
	}
	if got := content(t, p.TempPath()); got != "one two three" {
		t.Errorf("temporary file %s holds %q", p.TempPath(), got)
	}
	if err := p.Commit(); err != nil {
		t.Fatal(err)
	}
	p.Abort()
	if err := p.Commit(); err == nil {
		t.Error("second Commit succeeded")
	}
	if _, err := p.Write([]byte("x")); err == nil {
		t.Error("Write after Commit succeeded")
	}
	if got := content(t, target); got != "one two three" {
		t.Errorf("after Commit and Abort the target holds %q", got)
	}

	p, err = w.Create(target, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	p.Write([]byte("dropped"))
	p.Abort()
	if got := content(t, target); got != "one two three" {
		t.Errorf("after Abort the target holds %q", got)
	}

	errInjected := errors.New("injected")
	p, err = w.Create(target, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	p.Write([]byte("first"))
	f.Fail(atomicfile.StepWrite, errInjected)
	if _, err := p.Write([]byte("second")); !errors.Is(err, errInjected) {
		t.Fatalf("write: %v", err)
	}
	f.Clear()
	if _, err := p.Write([]byte("third")); !errors.Is(err, errInjected) {
		t.Errorf("a write after a failed one: %v", err)
	}
	var e *atomicfile.Error
	if err := p.Commit(); !errors.As(err, &e) || e.Step != atomicfile.StepWrite {
		t.Errorf("Commit after a failed write: %v", err)
	}
	if got := content(t, target); got != "one two three" {
		t.Errorf("after a failed write the target holds %q", got)
	}
	if left := temps(t, target, w); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

// TestReadersSeeOldOrNew: a reader racing replacements of different sizes reads one
// whole version each time, never a mix or a truncated file.
func TestReadersSeeOldOrNew(t *testing.T) {
	target, w := setup(t, layouts[0], "", nil)
	w.NoSync = true // atomicity for readers does not rest on the fsyncs
	versions := [][]byte{bytes.Repeat([]byte("a"), 1<<20), bytes.Repeat([]byte("b"), 3000)}
	if err := w.WriteFile(target, versions[0], 0o600); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	reads := 0
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			b, err := os.ReadFile(target)
			if err != nil {
				t.Errorf("read: %v", err)
				return
			}
			if !bytes.Equal(b, versions[0]) && !bytes.Equal(b, versions[1]) {
				t.Errorf("read %d bytes that are neither version", len(b))
				return
			}
			reads++
		}
	}()
	for i := range 300 {
		if err := w.WriteFile(target, versions[(i+1)%2], 0o600); err != nil {
			t.Error(err)
			break
		}
	}
	close(stop)
	wg.Wait()
	if reads == 0 {
		t.Error("the reader never read")
	}
}

func TestIsTemp(t *testing.T) {
	for name, want := range map[string]bool{
		".record.json.tmp-0123456789abcdef": true,
		".x.tmp-ffffffffffffffff":           true,
		"record.json":                       false,
		"record.json.tmp":                   false, // the old hand-written writes' name
		".tmp-123456":                       false, // os.CreateTemp's
		"tmp-123456":                        false,
		".x.tmp-0123456789ABCDEF":           false,
		".x.tmp-0123456789abcde":            false,
		"x.tmp-0123456789abcdef":            false,
	} {
		if got := atomicfile.IsTemp(name); got != want {
			t.Errorf("IsTemp(%q) = %v, want %v", name, got, want)
		}
	}
	// A long target name still makes a temporary name that fits and IsTemp knows.
	dir := t.TempDir()
	target := filepath.Join(dir, strings.Repeat("n", 250))
	f := atomicfiletest.New(nil)
	if err := (atomicfile.Writer{FS: f}).WriteFile(target, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if tmp := filepath.Base(f.Calls()[0].Path); !atomicfile.IsTemp(tmp) || len(tmp) > 255 {
		t.Errorf("temporary name %q (%d bytes)", tmp, len(tmp))
	}
}
