package fusefs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/slacker-dev/slacker/internal/errdefs"
)

// Volume is what the filesystem needs from a volume (*volume.Volume has it).
type Volume interface {
	ReadAt(ctx context.Context, p []byte, off int64) (int, error)
	WriteAt(ctx context.Context, p []byte, off int64) (int, error)
	Zero(ctx context.Context, off, n int64) error
	Sync(ctx context.Context) error
	Size() int64
}

// Options configure Mount.
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

// FS is a mounted volume directory.
type FS struct {
	mountpoint string
	server     *fuse.Server
	root       *dirNode
	log        *slog.Logger
	opts       Options

	mu    sync.Mutex
	files map[string]*fileNode
}

// Mount mounts an empty volume directory at mountpoint (created if missing).
func Mount(mountpoint string, opts Options) (*FS, error) {
	if opts.MaxRequest <= 0 {
		opts.MaxRequest = 1 << 20
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(mountpoint, 0o700); err != nil {
		return nil, fmt.Errorf("mount volume directory: %w", err)
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return nil, fmt.Errorf("mount volume directory: this kernel has no FUSE (/dev/fuse: %v); load the fuse module (modprobe fuse)", err)
	}
	f := &FS{mountpoint: mountpoint, log: opts.Logger, opts: opts, files: map[string]*fileNode{}}
	f.root = &dirNode{}
	timeout := time.Hour
	server, err := fs.Mount(mountpoint, f.root, &fs.Options{
		EntryTimeout: &timeout,
		AttrTimeout:  &timeout,
		MountOptions: fuse.MountOptions{
			FsName:       "slacker",
			Name:         "slacker",
			DirectMount:  true,
			MaxWrite:     opts.MaxRequest,
			MaxReadAhead: opts.MaxRequest,
			// Background requests the kernel keeps in flight to slackerd (async direct
			// I/O from loop devices counts here). At 64, fio's 32 x QD32 random reads
			// on an image root ran at 21-28k IOPS; at 256, 31-47k (docs/EVALUATION.md
			// section 8, 2026-11-25).
			MaxBackground: 256,
			// Async direct I/O: a loop device's direct reads and writes return at once
			// and complete when the answer comes. Without it each one blocks the loop
			// device's worker until answered: queue depth 1 whatever the guest submits.
			ExtraCapabilities: fuse.CAP_ASYNC_DIO,
			DisableXAttrs:     true,
			DisableSplice:     true, // reads answer from memory buffers; splice only helps fd-backed results
			Debug:             opts.Debug,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("mount volume directory at %s: %w", mountpoint, err)
	}
	f.server = server
	return f, nil
}

// Mountpoint returns the directory the volumes appear in.
func (f *FS) Mountpoint() string { return f.mountpoint }

// Path returns the file of the volume named name.
func (f *FS) Path(name string) string { return f.mountpoint + "/" + name }

// Add exposes v as the file name.
func (f *FS) Add(name string, v Volume) (string, error) { return f.AddBacked(name, v, nil) }

// AddBacked exposes v as the file name, read through backing when it is not nil:
// a local file holding exactly v's bytes, which the kernel then reads itself (FUSE
// passthrough, Linux 6.9 or later, as root), without a round trip to this process
// or any check of the bytes. Only for a volume that is never written (an image
// root, mounted read-only). Where the kernel refuses passthrough, reads come to v as
// for Add. AddBacked keeps a descriptor of its own for backing until Remove: the
// caller may close backing when AddBacked returns.
func (f *FS) AddBacked(name string, v Volume, backing *os.File) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.files[name]; ok {
		return "", fmt.Errorf("volume file %s: %w", name, os.ErrExist)
	}
	n := &fileNode{fs: f, name: name, vol: v, backingFd: -1}
	if backing != nil {
		fd, err := unix.FcntlInt(backing.Fd(), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return "", fmt.Errorf("volume file %s: backing file %s: %w", name, backing.Name(), err)
		}
		n.backingFd = fd
	}
	ch := f.root.NewPersistentInode(context.Background(), n, fs.StableAttr{Mode: syscall.S_IFREG})
	if !f.root.AddChild(name, ch, false) {
		n.closeBacking()
		return "", fmt.Errorf("volume file %s: %w", name, os.ErrExist)
	}
	f.files[name] = n
	return f.Path(name), nil
}

// Remove hides the volume's file. Callers first detach whatever uses it.
func (f *FS) Remove(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, ok := f.files[name]
	if !ok {
		return fmt.Errorf("volume file %s: %w", name, os.ErrNotExist)
	}
	delete(f.files, name)
	n.closeBacking()
	f.root.RmChild(name)
	f.root.NotifyEntry(name)
	return nil
}

// Unmount unmounts the directory; it fails while a volume file is in use.
func (f *FS) Unmount() error {
	if err := f.server.Unmount(); err != nil {
		return fmt.Errorf("unmount %s: %w", f.mountpoint, err)
	}
	return nil
}

// Wait blocks until the filesystem is unmounted.
func (f *FS) Wait() { f.server.Wait() }

type dirNode struct{ fs.Inode }

var _ fs.NodeGetattrer = (*dirNode)(nil)

func (d *dirNode) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = 0o700 | syscall.S_IFDIR
	return 0
}

type fileNode struct {
	fs.Inode
	fs   *FS
	name string
	vol  Volume

	mu        sync.Mutex
	backingFd int // passthrough to it (AddBacked), closed by Remove; -1: reads and writes go to vol
}

// closeBacking closes the node's descriptor of its backing file: opens after it
// read through the volume. The files already open keep their own.
func (n *fileNode) closeBacking() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.backingFd >= 0 {
		unix.Close(n.backingFd)
		n.backingFd = -1
	}
}

// openBacking returns a descriptor of the backing file for one open, or -1.
func (n *fileNode) openBacking() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.backingFd < 0 {
		return -1
	}
	fd, err := unix.FcntlInt(uintptr(n.backingFd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return -1
	}
	return fd
}

// passthroughHandle is one open of a volume file with a backing file: go-fuse
// registers fd with the kernel after Open (FilePassthroughFder), and the kernel
// keeps its own reference to the file; fd is closed when the file is released.
// Reads the kernel still sends (passthrough refused) reach the node's Read.
type passthroughHandle struct{ fd int }

func (h *passthroughHandle) PassthroughFd() (int, bool) { return h.fd, true }

func (h *passthroughHandle) Release(ctx context.Context) syscall.Errno {
	unix.Close(h.fd)
	return 0
}

var (
	_ fs.NodeGetattrer = (*fileNode)(nil)
	_ fs.NodeSetattrer = (*fileNode)(nil)
	_ fs.NodeOpener    = (*fileNode)(nil)
	_ fs.NodeReader    = (*fileNode)(nil)
	_ fs.NodeWriter    = (*fileNode)(nil)
	_ fs.NodeFsyncer   = (*fileNode)(nil)
	_ fs.NodeFlusher   = (*fileNode)(nil)
	_ fs.NodeAllocater = (*fileNode)(nil)
)

func (n *fileNode) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = 0o600 | syscall.S_IFREG
	out.Size = uint64(n.vol.Size())
	out.Blocks = (out.Size + 511) / 512
	out.Blksize = 4096
	return 0
}

// Setattr accepts only a no-op truncate (losetup may ftruncate to the current size).
func (n *fileNode) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if sz, ok := in.GetSize(); ok && int64(sz) != n.vol.Size() {
		return syscall.EPERM
	}
	return n.Getattr(ctx, fh, out)
}

func (n *fileNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	n.mu.Lock()
	backed := n.backingFd >= 0
	n.mu.Unlock()
	if backed {
		if flags&(syscall.O_WRONLY|syscall.O_RDWR) != 0 {
			return nil, 0, syscall.EROFS // a backed volume is never written
		}
		if fd := n.openBacking(); fd >= 0 {
			return &passthroughHandle{fd: fd}, 0, 0
		}
	}
	if n.fs.opts.PageCache {
		return nil, 0, 0
	}
	return nil, fuse.FOPEN_DIRECT_IO | fuse.FOPEN_PARALLEL_DIRECT_WRITES, 0
}

// begin is the time a request begins, for observe: none is taken without
// Options.Observe, as reads are the hot path.
func (n *fileNode) begin() time.Time {
	if n.fs.opts.Observe == nil {
		return time.Time{}
	}
	return time.Now()
}

// observe tells Options.Observe of a request begun at start.
func (n *fileNode) observe(op string, start time.Time, err error) {
	if o := n.fs.opts.Observe; o != nil {
		o(op, time.Since(start), err)
	}
}

func (n *fileNode) Read(ctx context.Context, fh fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	start := n.begin()
	k, err := n.vol.ReadAt(ctx, dest, off)
	if isEOF(err) {
		err = nil
	}
	n.observe("read", start, err)
	if err != nil && k == 0 {
		return nil, n.errno("read", off, len(dest), err)
	}
	return fuse.ReadResultData(dest[:k]), 0
}

func (n *fileNode) Write(ctx context.Context, fh fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	start := n.begin()
	k, err := n.vol.WriteAt(ctx, data, off)
	n.observe("write", start, err)
	if err != nil {
		return 0, n.errno("write", off, len(data), err)
	}
	return uint32(k), 0
}

func (n *fileNode) Fsync(ctx context.Context, fh fs.FileHandle, flags uint32) syscall.Errno {
	start := n.begin()
	err := n.vol.Sync(ctx)
	n.observe("fsync", start, err)
	if err != nil {
		return n.errno("fsync", 0, 0, err)
	}
	return 0
}

func (n *fileNode) Flush(ctx context.Context, fh fs.FileHandle) syscall.Errno { return 0 }

func (n *fileNode) Allocate(ctx context.Context, fh fs.FileHandle, off, size uint64, mode uint32) syscall.Errno {
	switch {
	case mode&unix.FALLOC_FL_PUNCH_HOLE != 0, mode&unix.FALLOC_FL_ZERO_RANGE != 0:
		start := n.begin()
		err := n.vol.Zero(ctx, int64(off), int64(size))
		n.observe("zero", start, err)
		if err != nil {
			return n.errno("zero", int64(off), int(size), err)
		}
		return 0
	case mode == 0 || mode == unix.FALLOC_FL_KEEP_SIZE:
		// Space is always available in the sparse delta; nothing to reserve.
		if int64(off+size) > n.vol.Size() && mode == 0 {
			return syscall.EFBIG
		}
		return 0
	default:
		return syscall.EOPNOTSUPP
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
func (n *fileNode) errno(op string, off int64, length int, err error) syscall.Errno {
	e := Errno(err)
	if e == syscall.EIO {
		n.fs.log.Error("volume-io-error", "volume", n.name, "op", op, "offset", off, "length", length, "err", err)
	}
	return e
}
