package fusefs

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// Volume is what the filesystem needs from a volume (*volume.Volume has it).
type Volume interface {
	ReadAt(ctx context.Context, p []byte, off int64) (int, error)
	WriteAt(ctx context.Context, p []byte, off int64) (int, error)
	Zero(ctx context.Context, off, n int64) error
	Sync(ctx context.Context) error
	Size() int64
}

// raw serves the FUSE protocol for an FS: one directory (node 1) of volume files
// known by node ID alone. Whatever the kernel names that this process does not
// know (a file removed since) is ENOENT, never a panic: after a take-over the
// kernel may name nodes before the new process has added every file.
type raw struct {
	fuse.RawFileSystem // ENOSYS for the rest
	fs                 *FS
}

func (r *raw) String() string { return "slacker" }

// reqContext is a request's context: done when the kernel interrupts it.
type reqContext struct {
	context.Context
	done <-chan struct{}
}

func (c reqContext) Done() <-chan struct{} { return c.done }

func (c reqContext) Err() error {
	select {
	case <-c.done:
		return context.Canceled
	default:
		return nil
	}
}

func ctxOf(cancel <-chan struct{}) context.Context {
	return reqContext{Context: context.Background(), done: cancel}
}

func (r *raw) Lookup(cancel <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	if h.NodeId != rootNode {
		return fuse.ENOTDIR
	}
	r.fs.mu.RLock()
	n := r.fs.files[name]
	r.fs.mu.RUnlock()
	if n == nil {
		return fuse.ENOENT
	}
	out.NodeId, out.Generation = n.node, n.generation
	out.SetEntryTimeout(attrTimeout)
	out.SetAttrTimeout(attrTimeout)
	n.fillAttr(&out.Attr)
	return fuse.OK
}

func (r *raw) Forget(nodeid, nlookup uint64) {}

func (r *raw) GetAttr(cancel <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	out.SetTimeout(attrTimeout)
	if in.NodeId == rootNode {
		fillRootAttr(&out.Attr)
		return fuse.OK
	}
	n := r.fs.lookup(in.NodeId)
	if n == nil {
		return fuse.ENOENT
	}
	n.fillAttr(&out.Attr)
	return fuse.OK
}

// SetAttr accepts only a no-op truncate (losetup may ftruncate to the current size).
func (r *raw) SetAttr(cancel <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	if in.NodeId == rootNode {
		return fuse.EPERM
	}
	n := r.fs.lookup(in.NodeId)
	if n == nil {
		return fuse.ENOENT
	}
	if sz, ok := in.GetSize(); ok && int64(sz) != n.vol.Size() {
		return fuse.EPERM
	}
	out.SetTimeout(attrTimeout)
	n.fillAttr(&out.Attr)
	return fuse.OK
}

func (r *raw) Open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	n := r.fs.lookup(in.NodeId)
	if n == nil {
		return fuse.ENOENT
	}
	if n.backingID > 0 {
		if in.Flags&(syscall.O_WRONLY|syscall.O_RDWR) != 0 {
			return fuse.EROFS // a backed volume is never written
		}
		out.OpenFlags, out.BackingID = fuse.FOPEN_PASSTHROUGH, n.backingID
		return fuse.OK
	}
	if !r.fs.opts.PageCache {
		out.OpenFlags = fuse.FOPEN_DIRECT_IO | fuse.FOPEN_PARALLEL_DIRECT_WRITES
	}
	return fuse.OK
}

func (r *raw) Release(cancel <-chan struct{}, in *fuse.ReleaseIn) {}

// Flush is not implemented (ENOSYS), on purpose: the kernel then stops sending
// FLUSH, which it does on every close of a file and waits for. With it, a process
// that closes a volume file while no server runs (one exec'ing with such a file
// open: a slackerd being started by a process that holds one) would wait for a
// server that it may itself be.

func (r *raw) Read(cancel <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	n := r.fs.lookup(in.NodeId)
	if n == nil {
		return nil, fuse.ENOENT
	}
	dest := buf[:min(int(in.Size), len(buf))]
	off := int64(in.Offset)
	start := n.begin()
	k, err := n.vol.ReadAt(ctxOf(cancel), dest, off)
	if isEOF(err) {
		err = nil
	}
	n.observe("read", start, err)
	if err != nil && k == 0 {
		return nil, n.errno("read", off, len(dest), err)
	}
	return fuse.ReadResultData(dest[:k]), fuse.OK
}

func (r *raw) Write(cancel <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	n := r.fs.lookup(in.NodeId)
	if n == nil {
		return 0, fuse.ENOENT
	}
	off := int64(in.Offset)
	start := n.begin()
	k, err := n.vol.WriteAt(ctxOf(cancel), data, off)
	n.observe("write", start, err)
	if err != nil {
		return 0, n.errno("write", off, len(data), err)
	}
	return uint32(k), fuse.OK
}

func (r *raw) Fsync(cancel <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	n := r.fs.lookup(in.NodeId)
	if n == nil {
		return fuse.ENOENT
	}
	start := n.begin()
	err := n.vol.Sync(ctxOf(cancel))
	n.observe("fsync", start, err)
	if err != nil {
		return n.errno("fsync", 0, 0, err)
	}
	return fuse.OK
}

func (r *raw) Fallocate(cancel <-chan struct{}, in *fuse.FallocateIn) fuse.Status {
	n := r.fs.lookup(in.NodeId)
	if n == nil {
		return fuse.ENOENT
	}
	off, size, mode := int64(in.Offset), int64(in.Length), in.Mode
	switch {
	case mode&unix.FALLOC_FL_PUNCH_HOLE != 0, mode&unix.FALLOC_FL_ZERO_RANGE != 0:
		start := n.begin()
		err := n.vol.Zero(ctxOf(cancel), off, size)
		n.observe("zero", start, err)
		if err != nil {
			return n.errno("zero", off, int(size), err)
		}
		return fuse.OK
	case mode == 0 || mode == unix.FALLOC_FL_KEEP_SIZE:
		// Space is always available in the sparse delta; nothing to reserve.
		if off+size > n.vol.Size() && mode == 0 {
			return fuse.Status(syscall.EFBIG)
		}
		return fuse.OK
	default:
		return fuse.ENOTSUP
	}
}

func (r *raw) OpenDir(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	if in.NodeId != rootNode {
		return fuse.ENOTDIR
	}
	return fuse.OK
}

// ReadDir lists the volume files; the offset is an index into them by name.
func (r *raw) ReadDir(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	if in.NodeId != rootNode {
		return fuse.ENOTDIR
	}
	files := r.fs.names()
	for i := int(in.Offset); i < len(files); i++ {
		n := files[i]
		if !out.AddDirEntry(fuse.DirEntry{Mode: syscall.S_IFREG, Name: n.name, Ino: n.node, Off: uint64(i + 1)}) {
			break
		}
	}
	return fuse.OK
}

func (r *raw) ReleaseDir(in *fuse.ReleaseIn) {}

func (r *raw) FsyncDir(cancel <-chan struct{}, in *fuse.FsyncIn) fuse.Status { return fuse.OK }

func (r *raw) StatFs(cancel <-chan struct{}, h *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	out.Bsize, out.Frsize, out.NameLen = 4096, 4096, 255
	return fuse.OK
}
