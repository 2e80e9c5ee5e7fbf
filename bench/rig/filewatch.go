package rig

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// FileWatch records the regular files opened or read on one filesystem, in the
// order of their first access: the recorded run of a workload that eStargz
// images are optimized from (stargz's own analyzer does the same with fanotify).
// It marks the whole filesystem (FAN_MARK_FILESYSTEM), so a container root
// mounted once at Root is watched through every mount of it, including the bind
// mount the runtime makes inside the container's mount namespace.
type FileWatch struct {
	Root string
	f    *os.File
	mu   sync.Mutex
	seen map[string]bool
	list []string
	err  error
	done chan struct{}
}

// WatchFiles starts recording accesses to the filesystem mounted at root.
func WatchFiles(root string) (*FileWatch, error) {
	fd, err := unix.FanotifyInit(unix.FAN_CLASS_NOTIF|unix.FAN_CLOEXEC|unix.FAN_NONBLOCK, unix.O_RDONLY|unix.O_LARGEFILE|unix.O_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("fanotify_init: %w", err)
	}
	if err := unix.FanotifyMark(fd, unix.FAN_MARK_ADD|unix.FAN_MARK_FILESYSTEM, unix.FAN_OPEN|unix.FAN_ACCESS|unix.FAN_OPEN_EXEC, unix.AT_FDCWD, root); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("fanotify_mark %s: %w", root, err)
	}
	w := &FileWatch{Root: strings.TrimSuffix(root, "/"), f: os.NewFile(uintptr(fd), "fanotify"), seen: map[string]bool{}, done: make(chan struct{})}
	go w.read()
	return w, nil
}

// Stop ends the recording and returns the files, as paths in the watched root
// (/usr/bin/python3), first accessed first.
func (w *FileWatch) Stop() ([]string, error) {
	w.f.Close()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.list, w.err
}

func (w *FileWatch) read() {
	defer close(w.done)
	buf := make([]byte, 64<<10)
	meta := int(unsafe.Sizeof(unix.FanotifyEventMetadata{}))
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			if !errors.Is(err, os.ErrClosed) && !errors.Is(err, io.EOF) {
				w.mu.Lock()
				w.err = fmt.Errorf("read fanotify events: %w", err)
				w.mu.Unlock()
			}
			return
		}
		for off := 0; off+meta <= n; {
			var ev unix.FanotifyEventMetadata
			if _, err := binary.Decode(buf[off:off+meta], binary.NativeEndian, &ev); err != nil || ev.Event_len < uint32(meta) {
				break
			}
			if ev.Vers != unix.FANOTIFY_METADATA_VERSION {
				w.mu.Lock()
				w.err = fmt.Errorf("fanotify metadata version %d, want %d", ev.Vers, unix.FANOTIFY_METADATA_VERSION)
				w.mu.Unlock()
				return
			}
			if ev.Fd >= 0 {
				w.note(int(ev.Fd))
				unix.Close(int(ev.Fd))
			}
			off += int(ev.Event_len)
		}
	}
}

// note records the file behind an event's descriptor, if it is a regular file.
func (w *FileWatch) note(fd int) {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return
	}
	p, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		return
	}
	// Through the watched mount the path starts with Root; through the container's
	// own mount (its root after pivot_root) it is already relative to the root.
	if rest, ok := strings.CutPrefix(p, w.Root+"/"); ok {
		p = "/" + rest
	}
	p = strings.TrimSuffix(p, " (deleted)")
	w.mu.Lock()
	if !w.seen[p] {
		w.seen[p] = true
		w.list = append(w.list, p)
	}
	w.mu.Unlock()
}
