package atomicfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Step is one step of a write, in the order a write takes them.
type Step int

// The steps of a write. A Writer with NoSync skips StepSync and StepSyncDir.
const (
	StepCreate  Step = iota + 1 // create the temporary file
	StepWrite                   // write content to it
	StepSync                    // fsync it
	StepClose                   // close it
	StepRename                  // rename it over the target
	StepSyncDir                 // fsync the target's directory
	// StepRemove is not a step of a write that succeeds: a failed write removes
	// its temporary file with it.
	StepRemove
)

var stepNames = [...]string{StepCreate: "create", StepWrite: "write", StepSync: "sync", StepClose: "close",
	StepRename: "rename", StepSyncDir: "sync-dir", StepRemove: "remove"}

func (s Step) String() string {
	if s > 0 && int(s) < len(stepNames) {
		return stepNames[s]
	}
	return "step(" + strconv.Itoa(int(s)) + ")"
}

// Error is the error of a failed write: the step that failed, the file the write
// was replacing, and the cause.
type Error struct {
	Step Step
	Path string
	Err  error
}

func (e *Error) Error() string { return fmt.Sprintf("replace %s: %s: %v", e.Path, e.Step, e.Err) }
func (e *Error) Unwrap() error { return e.Err }

// Replaced reports whether err is the error of a write whose new content is in
// place nonetheless: only the fsync of the directory failed, so the rename may not
// survive a crash of the machine. After any other error the target is untouched.
func Replaced(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Step == StepSyncDir
}

// FS is the file system a Writer uses. The methods are those of package os (SyncDir
// opens a directory and fsyncs it); a test wraps OSFS to record the calls and to
// inject errors or crashes.
type FS interface {
	// OpenFile is only ever called with os.O_WRONLY|os.O_CREATE|os.O_EXCL.
	OpenFile(name string, flag int, perm fs.FileMode) (File, error)
	Rename(oldpath, newpath string) error
	Remove(name string) error
	SyncDir(dir string) error
}

// File is an open temporary file.
type File interface {
	io.Writer
	Sync() error
	Close() error
}

// OSFS is the FS of the operating system.
type OSFS struct{}

func (OSFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	return os.OpenFile(name, flag, perm)
}
func (OSFS) Rename(oldpath, newpath string) error { return os.Rename(oldpath, newpath) }
func (OSFS) Remove(name string) error             { return os.Remove(name) }

func (OSFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		d.Close()
		return err
	}
	return d.Close()
}

// A Writer replaces files. The zero Writer writes durably through the OS, with its
// temporary files next to their targets. A Writer is a value with no state: copy it
// freely and use it from any number of goroutines.
type Writer struct {
	// FS is the file system (nil: OSFS).
	FS FS
	// TempDir holds the temporary files (empty: the target's directory). It must be
	// on the target's filesystem, or the rename fails.
	TempDir string
	// NoSync skips both fsyncs: the replacement is atomic for readers but may be
	// lost, or leave a torn target, if the machine crashes. Only for content that
	// is verified on read and can be made again (the chunk cache).
	NoSync bool
}

// WriteFile replaces path's content with data, durably (see the package doc). perm
// is the new file's mode before the umask, as for os.WriteFile.
func WriteFile(path string, data []byte, perm fs.FileMode) error {
	return Writer{}.WriteFile(path, data, perm)
}

// Create starts a replacement of path through the zero Writer; see Writer.Create.
func Create(path string, perm fs.FileMode) (*Pending, error) { return Writer{}.Create(path, perm) }

// WriteFile replaces path's content with data; see the package doc.
func (w Writer) WriteFile(path string, data []byte, perm fs.FileMode) error {
	p, err := w.Create(path, perm)
	if err != nil {
		return err
	}
	if _, err := p.Write(data); err != nil {
		p.Abort()
		return err
	}
	return p.Commit()
}

// Create starts a replacement of path: it creates the temporary file, which the
// returned Pending writes to. Nothing changes at path until Commit. The caller must
// end with Commit or Abort (Abort after Commit does nothing, so it can be deferred).
func (w Writer) Create(path string, perm fs.FileMode) (*Pending, error) {
	fsys := w.FS
	if fsys == nil {
		fsys = OSFS{}
	}
	dir := w.TempDir
	if dir == "" {
		dir = filepath.Dir(path)
	}
	base := filepath.Base(path)
	if len(base) > maxTempBase {
		base = base[:maxTempBase] // a name's length is bounded (255 bytes on Linux)
	}
	prefix := filepath.Join(dir, "."+base+tempInfix)
	for range 100 {
		tmp := prefix + fmt.Sprintf("%016x", rand.Uint64())
		f, err := fsys.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return nil, &Error{Step: StepCreate, Path: path, Err: err}
		}
		return &Pending{fs: fsys, noSync: w.NoSync, path: path, tmp: tmp, f: f}, nil
	}
	return nil, &Error{Step: StepCreate, Path: path, Err: fmt.Errorf("no free temporary name %s*", prefix)}
}

// tempInfix is in the name of every temporary file: ".<target's name>.tmp-<16 hex>".
const tempInfix = ".tmp-"

// maxTempBase bounds the part of a temporary file's name taken from its target.
const maxTempBase = 128

// IsTemp reports whether name (a base name) is a temporary file of a write, one
// that is in progress or was cut short by a crash. Listings of a directory that
// holds atomically written files must skip such names.
func IsTemp(name string) bool {
	i := strings.LastIndex(name, tempInfix)
	if !strings.HasPrefix(name, ".") || i < 2 {
		return false
	}
	hex := name[i+len(tempInfix):]
	if len(hex) != 16 {
		return false
	}
	for _, c := range hex {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// Pending is a replacement in progress: content written so far sits in a temporary
// file that nothing else reads. It is not safe for concurrent use.
type Pending struct {
	fs     FS
	noSync bool
	path   string
	tmp    string
	f      File
	err    error // the first failed write: Commit fails with it
	done   bool
}

// Write appends b to the new content. A failed Write fails Commit too.
func (p *Pending) Write(b []byte) (int, error) {
	if p.done {
		return 0, &Error{Step: StepWrite, Path: p.path, Err: os.ErrClosed}
	}
	if p.err != nil {
		return 0, p.err
	}
	n, err := p.f.Write(b)
	if err == nil && n < len(b) {
		err = io.ErrShortWrite
	}
	if err != nil {
		p.err = &Error{Step: StepWrite, Path: p.path, Err: err}
		return n, p.err
	}
	return n, nil
}

// WriteAt writes b at off of the new content, leaving what lies between the
// writes a hole (a sparse file), when the FS's files can (os files can). A failed
// WriteAt fails Commit too.
func (p *Pending) WriteAt(b []byte, off int64) (int, error) {
	if p.done {
		return 0, &Error{Step: StepWrite, Path: p.path, Err: os.ErrClosed}
	}
	if p.err != nil {
		return 0, p.err
	}
	wa, ok := p.f.(io.WriterAt)
	if !ok {
		p.err = &Error{Step: StepWrite, Path: p.path, Err: errors.ErrUnsupported}
		return 0, p.err
	}
	n, err := wa.WriteAt(b, off)
	if err == nil && n < len(b) {
		err = io.ErrShortWrite
	}
	if err != nil {
		p.err = &Error{Step: StepWrite, Path: p.path, Err: err}
		return n, p.err
	}
	return n, nil
}

// Truncate sets the new content's size (a sparse tail when it grows), when the
// FS's files can (os files can). A failed Truncate fails Commit too.
func (p *Pending) Truncate(size int64) error {
	if p.done {
		return &Error{Step: StepWrite, Path: p.path, Err: os.ErrClosed}
	}
	if p.err != nil {
		return p.err
	}
	t, ok := p.f.(interface{ Truncate(int64) error })
	if !ok {
		p.err = &Error{Step: StepWrite, Path: p.path, Err: errors.ErrUnsupported}
		return p.err
	}
	if err := t.Truncate(size); err != nil {
		p.err = &Error{Step: StepWrite, Path: p.path, Err: err}
		return p.err
	}
	return nil
}

// TempPath returns the temporary file's path. A caller that must keep the new
// content open after Commit (the volume's journal, appended to in place) opens it
// by this path before Commit; the rename keeps what it opened.
func (p *Pending) TempPath() string { return p.tmp }

// Commit puts the new content in place: it fsyncs and closes the temporary file,
// renames it over the target and fsyncs the directory. On an error before the rename
// the temporary file is removed and the target is untouched; on an error of the
// directory's fsync the new content is in place (Replaced reports it).
func (p *Pending) Commit() error {
	if p.done {
		return &Error{Step: StepRename, Path: p.path, Err: os.ErrClosed}
	}
	p.done = true
	if p.err != nil {
		p.f.Close()
		p.fs.Remove(p.tmp)
		return p.err
	}
	if !p.noSync {
		if err := p.f.Sync(); err != nil {
			p.f.Close()
			p.fs.Remove(p.tmp)
			return &Error{Step: StepSync, Path: p.path, Err: err}
		}
	}
	if err := p.f.Close(); err != nil {
		p.fs.Remove(p.tmp)
		return &Error{Step: StepClose, Path: p.path, Err: err}
	}
	if err := p.fs.Rename(p.tmp, p.path); err != nil {
		p.fs.Remove(p.tmp)
		return &Error{Step: StepRename, Path: p.path, Err: err}
	}
	if p.noSync {
		return nil
	}
	if err := p.fs.SyncDir(filepath.Dir(p.path)); err != nil {
		return &Error{Step: StepSyncDir, Path: p.path, Err: err}
	}
	return nil
}

// Abort drops the replacement: the temporary file is closed and removed, and the
// target is untouched. It does nothing after Commit or Abort.
func (p *Pending) Abort() {
	if p.done {
		return
	}
	p.done = true
	p.f.Close()
	p.fs.Remove(p.tmp)
}
