package fusefs

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"os"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/slacker-dev/slacker/internal/errdefs"
)

// Options configure Mount and Resume.
type Options struct {
	// MaxRequest is the largest read or write the kernel sends, in bytes (1 MiB).
	MaxRequest int
	Logger     *slog.Logger
	Debug      bool
	// PageCache lets the kernel cache volume files (no FOPEN_DIRECT_IO): reads get
	// FUSE readahead, at the price of a second copy of what the guest reads.
	PageCache bool
	// Observe, if set, is told of every read, write, fsync and zero of a volume
	// file: how long it took and the error the volume returned (slackerd's
	// metrics).
	Observe func(op string, took time.Duration, err error)
}

// FileOptions configure Add.
type FileOptions struct {
	// Generation tells this file from an earlier one of the same name (its
	// volume's creation time, say): the kernel drops what it cached of a file
	// whose generation changed. It must be the same for the same file in every
	// process that serves the connection.
	Generation uint64
	// Backing, if not nil, is a local file holding exactly the volume's bytes,
	// which the kernel then reads itself (FUSE passthrough, Linux 6.9 or later, as
	// root), without a round trip to this process or any check of the bytes. Only
	// for a volume that is never written (an image root, mounted read-only). Where
	// the kernel refuses passthrough, reads come to the volume. Add keeps no
	// descriptor of it: the kernel keeps its own until Remove.
	Backing *os.File
}

// FS is a mounted volume directory.
type FS struct {
	mountpoint string
	server     *fuse.Server
	devFD      int    // the connection's /dev/fuse descriptor (the server owns it)
	init       []byte // the kernel's INIT request (Session)
	resumed    bool
	serveOnce  sync.Once
	log        *slog.Logger
	opts       Options

	mu     sync.RWMutex
	files  map[string]*file // by name
	byNode map[uint64]*file // by node ID
}

// file is one volume file. It has no state per open: a process that takes the
// connection over knows a file by its node ID alone.
type file struct {
	fs         *FS
	name       string
	node       uint64
	generation uint64
	vol        Volume
	backingID  int32 // registered passthrough backing file; 0: none
}

// rootNode is the directory's node ID (FUSE's).
const rootNode = fuse.FUSE_ROOT_ID

// nodeID is the node ID of the file named name: the same in every process, so
// that one taking the connection over answers for the node IDs the kernel holds.
func nodeID(name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	id := h.Sum64() >> 1 // positive as an int64, as some tools print inode numbers
	if id <= rootNode {
		id += 2
	}
	return id
}

// Mountpoint returns the directory the volumes appear in.
func (f *FS) Mountpoint() string { return f.mountpoint }

// Path returns the file of the volume named name.
func (f *FS) Path(name string) string { return f.mountpoint + "/" + name }

// Resumed reports whether this FS took over a connection (Resume) rather than
// mounting a new one.
func (f *FS) Resumed() bool { return f.resumed }

// Add exposes v as the file name.
func (f *FS) Add(name string, v Volume, opts FileOptions) (string, error) {
	n := &file{fs: f, name: name, node: nodeID(name), generation: opts.Generation, vol: v}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.files[name]; ok {
		return "", fmt.Errorf("volume file %s: %w", name, os.ErrExist)
	}
	if other, ok := f.byNode[n.node]; ok {
		return "", fmt.Errorf("volume file %s: its node ID %d is that of %s; rename one: %w", name, n.node, other.name, os.ErrExist)
	}
	if opts.Backing != nil {
		id, errno := f.server.RegisterBackingFd(&fuse.BackingMap{Fd: int32(opts.Backing.Fd())})
		if errno == 0 && id > 0 {
			n.backingID = id
		} else {
			f.log.Info("fuse-passthrough-refused", "volume", name, "err", errno,
				"action", "its reads go through slackerd")
		}
	}
	f.files[name] = n
	f.byNode[n.node] = n
	return f.Path(name), nil
}

// Remove hides the volume's file. Callers first detach whatever uses it.
func (f *FS) Remove(name string) error {
	f.mu.Lock()
	n, ok := f.files[name]
	if ok {
		delete(f.files, name)
		delete(f.byNode, n.node)
	}
	f.mu.Unlock()
	if !ok {
		return fmt.Errorf("volume file %s: %w", name, os.ErrNotExist)
	}
	if n.backingID > 0 {
		f.server.UnregisterBackingFd(n.backingID) // open files keep their reference
	}
	f.server.EntryNotify(rootNode, name)
	return nil
}

// Unmount unmounts the directory; it fails while a volume file is in use.
func (f *FS) Unmount() error {
	if err := unix.Unmount(f.mountpoint, 0); err != nil {
		return fmt.Errorf("unmount %s: %w", f.mountpoint, err)
	}
	f.server.Wait()
	return nil
}

// Wait blocks until the filesystem is unmounted (or its connection ended).
func (f *FS) Wait() { f.server.Wait() }

func (f *FS) lookup(node uint64) *file {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.byNode[node]
}

// names returns the volume files' names, sorted.
func (f *FS) names() []*file {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]*file, 0, len(f.files))
	for _, n := range f.files {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// attrTimeout is how long the kernel trusts a file's attributes and the names it
// looked up (a volume's size never changes).
const attrTimeout = time.Hour

func (n *file) fillAttr(out *fuse.Attr) {
	out.Ino = n.node
	out.Mode = 0o600 | syscall.S_IFREG
	out.Nlink = 1
	out.Size = uint64(n.vol.Size())
	out.Blocks = (out.Size + 511) / 512
	out.Blksize = 4096
}

func fillRootAttr(out *fuse.Attr) {
	out.Ino = rootNode
	out.Mode = 0o700 | syscall.S_IFDIR
	out.Nlink = 2
}

// begin is the time a request begins, for observe: none is taken without
// Options.Observe, as reads are the hot path.
func (n *file) begin() time.Time {
	if n.fs.opts.Observe == nil {
		return time.Time{}
	}
	return time.Now()
}

// observe tells Options.Observe of a request begun at start.
func (n *file) observe(op string, start time.Time, err error) {
	if o := n.fs.opts.Observe; o != nil {
		o(op, time.Since(start), err)
	}
}

func isEOF(err error) bool { return errors.Is(err, io.EOF) }

// Errno is this edge's one translation of a volume error (errdefs.KindOf) to the
// errno the kernel sees: EINTR for an interrupted request (canceled), ENOSPC for a
// range outside the volume (a write past the end of the device), EIO for anything
// else.
func Errno(err error) syscall.Errno {
	switch errdefs.KindOf(err) {
	case errdefs.Canceled:
		return syscall.EINTR
	case errdefs.OutOfRange:
		return syscall.ENOSPC
	}
	return syscall.EIO
}

// errno is Errno, with one log line naming the volume and offset for an EIO.
func (n *file) errno(op string, off int64, length int, err error) fuse.Status {
	e := Errno(err)
	if e == syscall.EIO {
		n.fs.log.Error("volume-io-error", "volume", n.name, "op", op, "offset", off, "length", length, "err", err)
	}
	return fuse.Status(e)
}
