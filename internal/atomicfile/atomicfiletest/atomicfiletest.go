package atomicfiletest

import (
	"errors"
	"fmt"
	"io/fs"
	"sync"

	"github.com/slacker-dev/slacker/internal/atomicfile"
)

// ErrCrashed is the error of every call at and after an injected crash.
var ErrCrashed = errors.New("crashed (injected)")

// Call is one call a write made.
type Call struct {
	Step atomicfile.Step
	// Path is the temporary file (create, write, sync, close, remove, and the old
	// path of a rename) or the directory (sync-dir).
	Path string
	// NewPath is the target of a rename.
	NewPath string
}

func (c Call) String() string {
	if c.NewPath != "" {
		return fmt.Sprintf("%s %s %s", c.Step, c.Path, c.NewPath)
	}
	return fmt.Sprintf("%s %s", c.Step, c.Path)
}

// FS is an atomicfile.FS that records calls and injects faults. It is safe for
// concurrent use.
type FS struct {
	inner atomicfile.FS

	mu      sync.Mutex
	calls   []Call
	fail    map[atomicfile.Step]error
	crashAt atomicfile.Step
	crashed bool
	open    map[*file]struct{}
}

var _ atomicfile.FS = (*FS)(nil)

// New wraps inner (nil: atomicfile.OSFS).
func New(inner atomicfile.FS) *FS {
	if inner == nil {
		inner = atomicfile.OSFS{}
	}
	return &FS{inner: inner, fail: map[atomicfile.Step]error{}, open: map[*file]struct{}{}}
}

// Fail makes every later call of step fail with an error wrapping err, without
// reaching the inner FS (a failed close still closes the inner file, as close(2)
// does).
func (f *FS) Fail(step atomicfile.Step, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail[step] = fmt.Errorf("%s failed (injected): %w", step, err)
}

// Crash makes the next call of step the point where the process dies.
func (f *FS) Crash(step atomicfile.Step) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.crashAt = step
}

// Clear removes the injected errors and a crash not yet reached. A crashed FS stays
// crashed.
func (f *FS) Clear() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.fail)
	f.crashAt = 0
}

// Crashed reports whether the injected crash happened.
func (f *FS) Crashed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.crashed
}

// Calls returns the calls made so far, failed ones included, in order. The call
// that crashed and everything after it are not calls: the process was dead.
func (f *FS) Calls() []Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Call(nil), f.calls...)
}

// Steps returns the step of each call so far, in order.
func (f *FS) Steps() []atomicfile.Step {
	var out []atomicfile.Step
	for _, c := range f.Calls() {
		out = append(out, c.Step)
	}
	return out
}

// enter decides the fate of a call: nil (go ahead), ErrCrashed, or an injected
// error. It records the call unless it crashes.
func (f *FS) enter(c Call) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.crashed {
		return ErrCrashed
	}
	if f.crashAt == c.Step {
		f.crashed = true
		for fl := range f.open {
			fl.inner.Close() // the kernel closes a dead process's files
			delete(f.open, fl)
		}
		return ErrCrashed
	}
	f.calls = append(f.calls, c)
	return f.fail[c.Step]
}

func (f *FS) OpenFile(name string, flag int, perm fs.FileMode) (atomicfile.File, error) {
	if err := f.enter(Call{Step: atomicfile.StepCreate, Path: name}); err != nil {
		return nil, err
	}
	inner, err := f.inner.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	fl := &file{fs: f, name: name, inner: inner}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.crashed { // crashed while opening
		inner.Close()
		return nil, ErrCrashed
	}
	f.open[fl] = struct{}{}
	return fl, nil
}

func (f *FS) Rename(oldpath, newpath string) error {
	if err := f.enter(Call{Step: atomicfile.StepRename, Path: oldpath, NewPath: newpath}); err != nil {
		return err
	}
	return f.inner.Rename(oldpath, newpath)
}

func (f *FS) Remove(name string) error {
	if err := f.enter(Call{Step: atomicfile.StepRemove, Path: name}); err != nil {
		return err
	}
	return f.inner.Remove(name)
}

func (f *FS) SyncDir(dir string) error {
	if err := f.enter(Call{Step: atomicfile.StepSyncDir, Path: dir}); err != nil {
		return err
	}
	return f.inner.SyncDir(dir)
}

type file struct {
	fs    *FS
	name  string
	inner atomicfile.File
}

func (fl *file) Write(b []byte) (int, error) {
	if err := fl.fs.enter(Call{Step: atomicfile.StepWrite, Path: fl.name}); err != nil {
		return 0, err
	}
	return fl.inner.Write(b)
}

func (fl *file) Sync() error {
	if err := fl.fs.enter(Call{Step: atomicfile.StepSync, Path: fl.name}); err != nil {
		return err
	}
	return fl.inner.Sync()
}

func (fl *file) Close() error {
	err := fl.fs.enter(Call{Step: atomicfile.StepClose, Path: fl.name})
	if errors.Is(err, ErrCrashed) {
		return err // closed at the crash
	}
	fl.fs.mu.Lock()
	_, open := fl.fs.open[fl]
	delete(fl.fs.open, fl)
	fl.fs.mu.Unlock()
	if !open {
		return fmt.Errorf("close %s: %w", fl.name, fs.ErrClosed)
	}
	if cerr := fl.inner.Close(); err == nil {
		err = cerr
	}
	return err
}
