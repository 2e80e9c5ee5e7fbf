package cache

import (
	"container/list"
	"errors"
	"io"
	"io/fs"
	"sync"

	"golang.org/x/sys/unix"
)

// errFilesClosed is what open returns once the cache is closed.
var errFilesClosed = errors.New("cache closed")

// openFiles keeps the descriptors of the chunk files read most recently open, at
// most max of them, so that reads of a few blocks of a hot chunk do not open and
// close its file each time. A file is closed when it falls out of the LRU, when
// forget names it (its chunk left the disk tier) or when the cache closes, and in
// each case not before the last reader holding it has released it. A file removed
// while a reader was opening it may stay in the LRU until pushed out: its bytes are
// the chunk's all the same, and every block read is checked.
type openFiles struct {
	mu     sync.Mutex
	max    int
	byPath map[string]*openFile
	lru    *list.List // of *openFile, most recent at the front
	closed bool
}

type openFile struct {
	fd   int // a raw descriptor: an *os.File costs a poller registration and a finalizer per open
	path string
	refs int           // readers holding it, plus one while it is in the LRU
	el   *list.Element // nil once out of the LRU
}

func newOpenFiles(max int) *openFiles {
	return &openFiles{max: max, byPath: map[string]*openFile{}, lru: list.New()}
}

// open returns the open file at path, opening it if needed; the caller reads
// with readAt (never anything that moves the offset: the file is shared) and calls
// release.
func (o *openFiles) open(path string) (*openFile, error) {
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return nil, errFilesClosed
	}
	if of, ok := o.byPath[path]; ok {
		of.refs++
		o.lru.MoveToFront(of.el)
		o.mu.Unlock()
		return of, nil
	}
	o.mu.Unlock()
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOATIME, 0)
	if errors.Is(err, unix.EPERM) { // O_NOATIME is the owner's (or root's) to ask
		fd, err = unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		unix.Close(fd)
		return nil, errFilesClosed
	}
	if of, ok := o.byPath[path]; ok { // opened by another reader meanwhile
		unix.Close(fd)
		of.refs++
		o.lru.MoveToFront(of.el)
		return of, nil
	}
	of := &openFile{fd: fd, path: path, refs: 2}
	of.el = o.lru.PushFront(of)
	o.byPath[path] = of
	for o.lru.Len() > o.max {
		o.removeLocked(o.lru.Back().Value.(*openFile))
	}
	return of, nil
}

// release ends a reader's use of of.
func (o *openFiles) release(of *openFile) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.unrefLocked(of)
}

// forget closes the file at path (once its readers are done): its chunk left the
// disk tier, or its bytes proved damaged.
func (o *openFiles) forget(path string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if of, ok := o.byPath[path]; ok {
		o.removeLocked(of)
	}
}

// forgetAll closes every file (once its readers are done).
func (o *openFiles) forgetAll() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, of := range o.byPath {
		o.removeLocked(of)
	}
}

// closeAll is forgetAll, after which open fails.
func (o *openFiles) closeAll() {
	o.mu.Lock()
	o.closed = true
	o.mu.Unlock()
	o.forgetAll()
}

// len returns how many files are in the LRU.
func (o *openFiles) len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.lru.Len()
}

func (o *openFiles) removeLocked(of *openFile) {
	o.lru.Remove(of.el)
	of.el = nil
	delete(o.byPath, of.path)
	o.unrefLocked(of)
}

func (o *openFiles) unrefLocked(of *openFile) {
	if of.refs--; of.refs == 0 {
		unix.Close(of.fd)
	}
}

// readAt reads into b from off until b is full or the file ends, and returns
// how many bytes it read (io.EOF only when the file ends before b is full).
func (of *openFile) readAt(b []byte, off int64) (int, error) {
	n := 0
	for n < len(b) {
		m, err := unix.Pread(of.fd, b[n:], off+int64(n))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return n, &fs.PathError{Op: "read", Path: of.path, Err: err}
		}
		if m == 0 {
			return n, io.EOF
		}
		n += m
	}
	return n, nil
}
