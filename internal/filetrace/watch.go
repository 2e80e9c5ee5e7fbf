package filetrace

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Watcher reports the regular files opened on one filesystem, each the first time
// it is opened while watched. It marks the whole filesystem
// (FAN_MARK_FILESYSTEM), so a filesystem mounted once at Root is watched through
// every mount of it: the bind mount a runtime makes inside a container's mount
// namespace, and the lower layer of an overlay.
//
// Each file reported, or seen not to be a regular file, is then ignored (an
// ignore mark on its inode), so that the kernel makes no more events of it: a
// server that opens the same file for every request (nginx its page) while a
// start is recorded would otherwise cost an event, a descriptor and a lookup per
// open.
type Watcher struct {
	Root   string
	f      *os.File
	fn     func(path string, fd int)
	mu     sync.Mutex
	seen   map[string]bool
	err    error
	done   chan struct{}
	events atomic.Int64 // events read, for tests
}

// Watch starts watching the filesystem mounted at root, calling fn (from one
// goroutine, in the order of the opens) with each regular file's path from root
// ("/usr/bin/python3") and a descriptor of it, open for reading, valid only
// during the call.
func Watch(root string, fn func(path string, fd int)) (*Watcher, error) {
	fd, err := unix.FanotifyInit(unix.FAN_CLASS_NOTIF|unix.FAN_CLOEXEC|unix.FAN_NONBLOCK, unix.O_RDONLY|unix.O_LARGEFILE|unix.O_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("watch %s: fanotify_init: %w", root, err)
	}
	if err := unix.FanotifyMark(fd, unix.FAN_MARK_ADD|unix.FAN_MARK_FILESYSTEM, unix.FAN_OPEN|unix.FAN_OPEN_EXEC, unix.AT_FDCWD, root); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("watch %s: fanotify_mark: %w", root, err)
	}
	w := &Watcher{Root: strings.TrimSuffix(root, "/"), f: os.NewFile(uintptr(fd), "fanotify"), fn: fn,
		seen: map[string]bool{}, done: make(chan struct{})}
	go w.read()
	return w, nil
}

// Stop ends the watch, once every event read so far is reported, and says why it
// ended early if it did. Safe to call more than once.
func (w *Watcher) Stop() error {
	w.f.Close()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

func (w *Watcher) fail(err error) {
	w.mu.Lock()
	w.err = err
	w.mu.Unlock()
}

func (w *Watcher) read() {
	defer close(w.done)
	buf := make([]byte, 64<<10)
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			if !errors.Is(err, os.ErrClosed) && !errors.Is(err, io.EOF) {
				w.fail(fmt.Errorf("read fanotify events: %w", err))
			}
			return
		}
		err = eachEvent(buf[:n], func(fd int) {
			w.events.Add(1)
			w.note(fd)
			w.ignore(fd)
			unix.Close(fd)
		})
		if err != nil {
			w.fail(err)
			return
		}
	}
}

// ignore has the kernel make no more open events of the file behind an event's
// descriptor, whatever mount it is opened through (the inode's ignore mask
// applies to the filesystem's mark). It is a saving, not a rule: a mark refused
// (a group's marks are bounded, fs.fanotify.max_user_marks) leaves the file's
// events coming, and note skips them by path.
func (w *Watcher) ignore(fd int) {
	c, err := w.f.SyscallConn()
	if err != nil {
		return
	}
	c.Control(func(group uintptr) {
		unix.FanotifyMark(int(group), unix.FAN_MARK_ADD|unix.FAN_MARK_IGNORED_MASK|unix.FAN_MARK_IGNORED_SURV_MODIFY,
			unix.FAN_OPEN|unix.FAN_OPEN_EXEC, fd, "")
	})
}

var metaSize = int(unsafe.Sizeof(unix.FanotifyEventMetadata{}))

// eachEvent calls fn with the descriptor of each event in b (a read of a
// fanotify descriptor without FAN_REPORT_FID); events without one are skipped.
// It stops at a malformed event (which the kernel does not write).
func eachEvent(b []byte, fn func(fd int)) error {
	for off := 0; off < len(b); {
		if len(b)-off < metaSize {
			return fmt.Errorf("fanotify: %d bytes of a partial event", len(b)-off)
		}
		var ev unix.FanotifyEventMetadata
		if _, err := binary.Decode(b[off:off+metaSize], binary.NativeEndian, &ev); err != nil {
			return fmt.Errorf("fanotify: %w", err)
		}
		if ev.Vers != unix.FANOTIFY_METADATA_VERSION {
			return fmt.Errorf("fanotify metadata version %d, want %d", ev.Vers, unix.FANOTIFY_METADATA_VERSION)
		}
		if ev.Event_len < uint32(metaSize) || int(ev.Event_len) > len(b)-off {
			return fmt.Errorf("fanotify: event of %d bytes at %d of %d", ev.Event_len, off, len(b))
		}
		if ev.Fd >= 0 {
			fn(int(ev.Fd))
		}
		off += int(ev.Event_len)
	}
	return nil
}

// note reports the file behind an event's descriptor, if it is a regular file
// not reported before.
func (w *Watcher) note(fd int) {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return
	}
	p, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		return
	}
	// Through the watched mount the path starts with Root; through a container's
	// own mount of the filesystem (its root after pivot_root) it is already from
	// the root.
	if rest, ok := strings.CutPrefix(p, w.Root+"/"); ok {
		p = "/" + rest
	}
	p = strings.TrimSuffix(p, " (deleted)")
	w.mu.Lock()
	seen := w.seen[p]
	w.seen[p] = true
	w.mu.Unlock()
	if !seen {
		w.fn(p, fd)
	}
}
