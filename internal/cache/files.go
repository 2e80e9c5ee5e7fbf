package cache

import (
	"container/list"
	"errors"
	"os"
	"sync"
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
	f    *os.File
	path string
	refs int           // readers holding it, plus one while it is in the LRU
	el   *list.Element // nil once out of the LRU
}

func newOpenFiles(max int) *openFiles {
	return &openFiles{max: max, byPath: map[string]*openFile{}, lru: list.New()}
}

// open returns the open file at path, opening it if needed; the caller reads
// with ReadAt (never Seek or Read: the file is shared) and calls release.
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
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		f.Close()
		return nil, errFilesClosed
	}
	if of, ok := o.byPath[path]; ok { // opened by another reader meanwhile
		f.Close()
		of.refs++
		o.lru.MoveToFront(of.el)
		return of, nil
	}
	of := &openFile{f: f, path: path, refs: 2}
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
		of.f.Close()
	}
}
