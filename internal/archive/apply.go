package archive

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/slacker-dev/slacker/internal/fdio"
)

// Whiteout names of the OCI image-spec changeset format.
const (
	whiteoutPrefix = ".wh."
	whiteoutMeta   = ".wh..wh."
	whiteoutOpaque = ".wh..wh..opq"
	xattrPAXPrefix = "SCHILY.xattr."
)

// copyBufferSize is the size of the buffer file contents are copied through.
const copyBufferSize = 1 << 20

// Options tune Apply. The zero value is valid: no limits, no devices, no logging.
type Options struct {
	// Logger receives skipped xattrs (event "xattr-skipped", Warn) and a summary
	// (event "layer-applied", Debug). Nil discards.
	Logger *slog.Logger

	// AllowDevices lets character and block device entries be created. When false such
	// an entry fails Apply with ErrUnsafe. Fifos are always allowed.
	AllowDevices bool

	// MaxBytes bounds the sum of the sizes of the layer's regular files; 0 = no bound.
	// A layer over it fails with ErrLimit before the file that crosses it is created.
	MaxBytes int64

	// MaxEntrySize bounds the size of any one regular file; 0 = no bound.
	MaxEntrySize int64

	// MaxEntries bounds the number of tar entries; 0 = no bound. Apply keeps a little
	// memory per entry (to honour opaque whiteouts and directory times), so this is
	// also its memory bound.
	MaxEntries int

	// InPlace rewrites a regular file that already exists with one link in place:
	// only the 4 KiB blocks whose content differs are written (blocks that became
	// zeros are punched out), the file is cut to the entry's size, and its inode
	// stays. Applied to a block-level clone of the tree the layer was made from (a
	// commit of an overlay upper onto a clone of its image), the clone's changed
	// blocks are then what the entry changed, not the whole file. A file with
	// several links is replaced as usual, so its other names keep their content.
	InPlace bool
}

// Stats reports what Apply did. Entries counts every tar entry read; the others count
// objects created or updated.
type Stats struct {
	Entries   int
	Files     int
	Dirs      int // directories created or updated, the root included
	Symlinks  int
	Hardlinks int
	Devices   int
	Fifos     int
	Whiteouts int // ".wh.NAME" entries
	Opaques   int // ".wh..wh..opq" entries
	Xattrs    int // xattrs set
	// XattrsSkipped counts xattrs the filesystem refused with ENOTSUP (or EPERM for
	// user.* on a symlink or special file, which the kernel never stores); each one is
	// logged with its entry name.
	XattrsSkipped int
	// Bytes is the sum of the sizes of the regular files written.
	Bytes int64
	// Rewritten counts files rewritten in place (Options.InPlace), and
	// RewrittenBytes the bytes of the blocks of theirs that differed and were
	// written or punched out.
	Rewritten      int
	RewrittenBytes int64
}

// Apply applies one layer, an uncompressed tar stream (see Decompress), to the tree
// at root, following the OCI image-spec changeset rules, and returns what it did.
//
// Each entry replaces what is at its path without following a final symlink: a
// directory entry over a directory keeps the directory and updates its metadata
// (ownership, mode, the whole xattr set, times); anything else removes what is there,
// a whole subtree for a directory, and creates the new object. Missing parent
// directories are created 0755 and owned by root. ".wh.NAME" removes NAME and its
// subtree; ".wh..wh..opq" in D removes every child of D that this layer did not itself
// create, wherever the marker sits among D's entries. Whiteouts are never created.
// Ownership is the header's numeric uid/gid; the mode, special bits included, is set
// after chown, xattrs after that, and times last; directory times are set once every
// entry is applied.
//
// Parent components of every path are resolved inside root as the container sees them
// (chroot semantics), so nothing outside root is ever touched. Refused input returns
// an *EntryError wrapping ErrUnsafe; Apply stops at the first error, leaving the
// entries before it applied. Cancelling ctx stops Apply between entries and during
// file copies with ctx.Err() wrapped. Apply reads r up to the end-of-archive marker and
// no further. It needs privileges to chown and to create device nodes (root).
func Apply(ctx context.Context, root string, r io.Reader, opts Options) (Stats, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rootFd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return Stats{}, fmt.Errorf("open layer root %s: %w", root, err)
	}
	defer unix.Close(rootFd)
	rootPath, err := fdPath(rootFd)
	if err != nil {
		return Stats{}, fmt.Errorf("open layer root %s: %w", root, err)
	}
	a := &applier{
		ctx:      ctx,
		opts:     opts,
		log:      log,
		rootFd:   rootFd,
		rootPath: rootPath,
		layer:    make(map[string]struct{}),
		dirTimes: make(map[string]times),
		oldTimes: make(map[string]times),
		buf:      make([]byte, copyBufferSize),
	}
	tr := tar.NewReader(r)
	last := ""
	for {
		if err := ctx.Err(); err != nil {
			return a.stats, &EntryError{Name: last, Op: "stopped after entry", Err: err}
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		// archive/tar reports names it finds insecure (only when GODEBUG asks it to)
		// along with a valid header: Apply makes its own, stricter check.
		if err != nil && !(errors.Is(err, tar.ErrInsecurePath) && hdr != nil) {
			return a.stats, &EntryError{Name: last, Op: "read the next header (after this entry)", Err: headerError(err)}
		}
		a.stats.Entries++
		if opts.MaxEntries > 0 && a.stats.Entries > opts.MaxEntries {
			return a.stats, &EntryError{Name: hdr.Name, Op: "check", Err: limitf("more than %d entries", opts.MaxEntries)}
		}
		if err := a.entry(hdr, tr); err != nil {
			var ee *EntryError
			if errors.As(err, &ee) {
				return a.stats, err
			}
			return a.stats, &EntryError{Name: hdr.Name, Op: "apply", Err: err}
		}
		last = hdr.Name
	}
	if err := a.finishDirTimes(); err != nil {
		return a.stats, err
	}
	log.Debug("layer-applied", "root", root, "entries", a.stats.Entries, "files", a.stats.Files,
		"dirs", a.stats.Dirs, "whiteouts", a.stats.Whiteouts+a.stats.Opaques, "bytes", a.stats.Bytes)
	return a.stats, nil
}

// headerError classifies an error from tar.Reader.Next.
func headerError(err error) error {
	switch {
	case errors.Is(err, tar.ErrFieldTooLong):
		return limitf("header or PAX record block over 1 MiB: %w", err)
	case errors.Is(err, tar.ErrHeader):
		return unsafef("corrupt tar header: %w", err)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("truncated layer: %w", err)
	}
	return err
}

// times is an entry's access and modification time.
type times [2]unix.Timespec

// applier is the state of one Apply call.
type applier struct {
	ctx      context.Context
	opts     Options
	log      *slog.Logger
	rootFd   int
	rootPath string // what /proc says rootFd is
	stats    Stats
	// layer holds the root-relative real path of everything this layer created or
	// updated, and of all their ancestors: what an opaque whiteout must keep.
	layer map[string]struct{}
	// dirTimes holds the times of the layer's directories by real relative path, set
	// by finishDirTimes once every entry is applied.
	dirTimes map[string]times
	// oldTimes holds, for each directory whose children the layer changes, its times
	// before the change: finishDirTimes puts them back unless the layer has an entry
	// for the directory itself, so that the tree stays a pure function of the image
	// (as umoci does) rather than of the clock.
	oldTimes map[string]times
	buf      []byte
	old      []byte // what a file rewritten in place held (InPlace)
}

// cleanName validates a header's name (or a hardlink's target) and returns it
// root-relative and lexically clean: "." for the root itself, never "..", never
// absolute.
func cleanName(name string) (string, error) {
	if name == "" {
		return "", unsafef("empty name")
	}
	if strings.HasPrefix(name, "/") {
		return "", unsafef("absolute name %q", name)
	}
	c := path.Clean(name)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", unsafef("name %q climbs above the root", name)
	}
	return c, nil
}

// entry applies one tar entry.
func (a *applier) entry(hdr *tar.Header, r io.Reader) error {
	fail := func(op string, err error) error { return &EntryError{Name: hdr.Name, Op: op, Err: err} }
	switch hdr.Typeflag {
	case tar.TypeXGlobalHeader:
		return nil // carries no object; archive/tar already parsed it
	}
	name, err := cleanName(hdr.Name)
	if err != nil {
		return fail("check", err)
	}
	base := path.Base(name)
	if strings.HasPrefix(base, whiteoutPrefix) {
		return a.whiteout(hdr, path.Dir(name), base)
	}
	if hdr.Uid < 0 || hdr.Gid < 0 || hdr.Uid > 1<<32-2 || hdr.Gid > 1<<32-2 {
		return fail("check", unsafef("uid %d / gid %d out of range", hdr.Uid, hdr.Gid))
	}
	isDir := hdr.Typeflag == tar.TypeDir
	if name == "." {
		if !isDir {
			return fail("check", unsafef("non-directory entry names the root"))
		}
		return a.rootDir(hdr)
	}
	switch hdr.Typeflag {
	case tar.TypeReg, tar.TypeGNUSparse, tar.TypeCont: // archive/tar reports TypeRegA as TypeReg
		return a.file(hdr, name, r)
	case tar.TypeDir:
		return a.dir(hdr, name)
	case tar.TypeSymlink:
		return a.symlink(hdr, name)
	case tar.TypeLink:
		return a.hardlink(hdr, name)
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		return a.special(hdr, name)
	default:
		return fail("check", unsafef("unsupported entry type %q", hdr.Typeflag))
	}
}

// file creates a regular file with the entry's content.
func (a *applier) file(hdr *tar.Header, name string, r io.Reader) error {
	fail := func(op string, err error) error { return &EntryError{Name: hdr.Name, Op: op, Err: err} }
	if a.opts.MaxEntrySize > 0 && hdr.Size > a.opts.MaxEntrySize {
		return fail("check", limitf("file of %d bytes over the %d-byte entry limit", hdr.Size, a.opts.MaxEntrySize))
	}
	if a.opts.MaxBytes > 0 && a.stats.Bytes+hdr.Size > a.opts.MaxBytes {
		return fail("check", limitf("file of %d bytes takes the layer over its %d-byte limit", hdr.Size, a.opts.MaxBytes))
	}
	p, err := a.parent(name)
	if err != nil {
		return fail("resolve parent", err)
	}
	defer p.close()
	if a.opts.InPlace {
		done, err := a.rewrite(hdr, p, r)
		if err != nil {
			return fail("rewrite in place", err)
		}
		if done {
			return nil
		}
	}
	if _, err := a.clear(p, false); err != nil {
		return fail("remove existing", err)
	}
	fd, err := unix.Openat(p.fd, p.base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fail("create", err)
	}
	defer unix.Close(fd)
	if err := a.copyContent(fd, r, hdr.Size); err != nil {
		return fail("write", err)
	}
	a.stats.Bytes += hdr.Size
	if err := a.setMeta(hdr, p, obj{fd: fd, kind: unix.S_IFREG}); err != nil {
		return err
	}
	a.stats.Files++
	a.touched(p)
	return nil
}

// rewrite applies a regular file entry onto the regular file with one link at p, if
// there is one, writing only the blocks that differ (Options.InPlace). It reports
// whether it did; if not, nothing was changed and the file is created as usual.
func (a *applier) rewrite(hdr *tar.Header, p *parentDir, r io.Reader) (bool, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(p.fd, p.base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 1 {
		return false, nil
	}
	fd, err := unix.Openat(p.fd, p.base, unix.O_RDWR|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, err
	}
	defer unix.Close(fd)
	var fst unix.Stat_t
	if err := unix.Fstat(fd, &fst); err != nil {
		return false, err
	}
	if fst.Ino != st.Ino || fst.Mode&unix.S_IFMT != unix.S_IFREG || fst.Nlink != 1 {
		return false, nil // changed under us: replace it
	}
	if a.old == nil {
		a.old = make([]byte, copyBufferSize)
	}
	const block = 4096
	var off int64
	for off < hdr.Size {
		if err := a.ctx.Err(); err != nil {
			return true, err
		}
		in := a.buf[:min(int64(len(a.buf)), hdr.Size-off)]
		if _, err := io.ReadFull(r, in); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return true, fmt.Errorf("truncated layer: %d of %d bytes: %w", off, hdr.Size, io.ErrUnexpectedEOF)
			}
			return true, err
		}
		// What the file holds there now (zeros past its end).
		have := a.old[:len(in)]
		n, err := preadFull(fd, have, off)
		if err != nil {
			return true, err
		}
		clear(have[n:])
		for b := 0; b < len(in); b += block {
			e := min(b+block, len(in))
			if bytes.Equal(in[b:e], have[b:e]) {
				continue
			}
			at := off + int64(b)
			if allZero(in[b:e]) && e-b == block {
				err = unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, at, block)
			}
			if !allZero(in[b:e]) || e-b != block || err != nil {
				err = pwriteAll(fd, in[b:e], at)
			}
			if err != nil {
				return true, err
			}
			a.stats.RewrittenBytes += int64(e - b)
		}
		off += int64(len(in))
	}
	if fst.Size != hdr.Size {
		if err := unix.Ftruncate(fd, hdr.Size); err != nil {
			return true, err
		}
	}
	a.stats.Bytes += hdr.Size
	if err := a.setMeta(hdr, p, obj{fd: fd, kind: unix.S_IFREG, clearXattrs: true}); err != nil {
		return true, err
	}
	a.stats.Files++
	a.stats.Rewritten++
	a.touched(p)
	return true, nil
}

// preadFull reads into b at off until b is full or the file ends, and returns how
// many bytes it read.
func preadFull(fd int, b []byte, off int64) (int, error) {
	n := 0
	for n < len(b) {
		m, err := unix.Pread(fd, b[n:], off+int64(n))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return n, err
		}
		if m == 0 {
			break
		}
		n += m
	}
	return n, nil
}

func pwriteAll(fd int, b []byte, off int64) error {
	for len(b) > 0 {
		n, err := unix.Pwrite(fd, b, off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		b, off = b[n:], off+int64(n)
	}
	return nil
}

// copyContent copies size bytes of r into fd. Every 4 KiB block of zeros becomes a
// hole, so sparse files (a 300 GB /var/log/lastlog) stay sparse on the snapshot,
// as `cp --sparse=always` would leave them; runs of data are written at once.
func (a *applier) copyContent(fd int, r io.Reader, size int64) error {
	var n int64
	hole := false // the file ends in a hole so far: its size is set at the end
	for n < size {
		if err := a.ctx.Err(); err != nil {
			return err
		}
		chunk := a.buf[:min(int64(len(a.buf)), size-n)]
		m, err := io.ReadFull(r, chunk)
		if m > 0 {
			if hole, err = writeSparse(fd, chunk[:m], hole); err != nil {
				return err
			}
			n += int64(m)
		}
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return fmt.Errorf("truncated layer: %d of %d bytes: %w", n, size, io.ErrUnexpectedEOF)
			}
			return err
		}
	}
	if hole {
		return unix.Ftruncate(fd, size)
	}
	return nil
}

// sparseBlock is the unit in which zeros become holes.
const sparseBlock = 4096

// writeSparse writes b at fd's offset, seeking over each block of zeros instead
// of writing it; hole says whether what was written before ends in a hole, and
// it returns whether b does.
func writeSparse(fd int, b []byte, hole bool) (bool, error) {
	for len(b) > 0 {
		// The next run of blocks that are all zeros, or none of them.
		zero := allZero(b[:min(sparseBlock, len(b))])
		run := 0
		for run < len(b) && allZero(b[run:min(run+sparseBlock, len(b))]) == zero {
			run = min(run+sparseBlock, len(b))
		}
		if zero {
			if _, err := unix.Seek(fd, int64(run), io.SeekCurrent); err != nil {
				return hole, err
			}
		} else if err := writeAll(fd, b[:run]); err != nil {
			return hole, err
		}
		hole, b = zero, b[run:]
	}
	return hole, nil
}

func allZero(b []byte) bool {
	for len(b) >= 8 {
		if b[0]|b[1]|b[2]|b[3]|b[4]|b[5]|b[6]|b[7] != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func writeAll(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := unix.Write(fd, b)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// dir creates a directory, or keeps an existing one and updates its metadata.
func (a *applier) dir(hdr *tar.Header, name string) error {
	fail := func(op string, err error) error { return &EntryError{Name: hdr.Name, Op: op, Err: err} }
	p, err := a.parent(name)
	if err != nil {
		return fail("resolve parent", err)
	}
	defer p.close()
	kept, err := a.clear(p, true)
	if err != nil {
		return fail("remove existing", err)
	}
	if !kept {
		if err := unix.Mkdirat(p.fd, p.base, 0o700); err != nil {
			return fail("create", err)
		}
	}
	fd, err := unix.Openat(p.fd, p.base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fail("open", err)
	}
	defer unix.Close(fd)
	if err := a.setMeta(hdr, p, obj{fd: fd, kind: unix.S_IFDIR, clearXattrs: kept}); err != nil {
		return err
	}
	a.stats.Dirs++
	a.dirTimes[p.child()] = entryTimes(hdr)
	a.touched(p)
	return nil
}

// rootDir applies a directory entry naming the root ("./"): metadata only.
func (a *applier) rootDir(hdr *tar.Header) error {
	p := &parentDir{fd: -1, rel: ".", base: "."}
	if err := a.setMeta(hdr, p, obj{fd: a.rootFd, kind: unix.S_IFDIR, clearXattrs: true}); err != nil {
		return err
	}
	a.stats.Dirs++
	a.dirTimes["."] = entryTimes(hdr)
	return nil
}

// symlink creates a symlink. Absolute targets are kept as they are (they mean
// root-relative inside the container); relative ones that climb above root, resolved
// lexically from the link's own directory, are refused.
func (a *applier) symlink(hdr *tar.Header, name string) error {
	fail := func(op string, err error) error { return &EntryError{Name: hdr.Name, Op: op, Err: err} }
	target := hdr.Linkname
	if target == "" {
		return fail("check", unsafef("symlink with an empty target"))
	}
	if !path.IsAbs(target) {
		if j := path.Join(path.Dir(name), target); j == ".." || strings.HasPrefix(j, "../") {
			return fail("check", unsafef("symlink target %q climbs above the root", target))
		}
	}
	p, err := a.parent(name)
	if err != nil {
		return fail("resolve parent", err)
	}
	defer p.close()
	if _, err := a.clear(p, false); err != nil {
		return fail("remove existing", err)
	}
	if err := unix.Symlinkat(target, p.fd, p.base); err != nil {
		return fail("create", err)
	}
	if err := a.setMetaPath(hdr, p, unix.S_IFLNK); err != nil {
		return err
	}
	a.stats.Symlinks++
	a.touched(p)
	return nil
}

// hardlink links the entry's path to an existing non-directory named by Linkname,
// resolved inside root; the final component of the target is not followed (a link to
// a symlink links the symlink). A hardlink carries no metadata of its own.
func (a *applier) hardlink(hdr *tar.Header, name string) error {
	fail := func(op string, err error) error { return &EntryError{Name: hdr.Name, Op: op, Err: err} }
	target, err := cleanName(hdr.Linkname)
	if err != nil {
		return fail("check", fmt.Errorf("hardlink target: %w", err))
	}
	if target == "." {
		return fail("check", unsafef("hardlink to the root directory"))
	}
	tp, err := a.resolveParent(target, false)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return fail("check", unsafef("hardlink target %q does not exist", hdr.Linkname))
	}
	if err != nil {
		return fail("resolve hardlink target", err)
	}
	defer tp.close()
	var tst unix.Stat_t
	if err := unix.Fstatat(tp.fd, tp.base, &tst, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return fail("check", unsafef("hardlink target %q does not exist", hdr.Linkname))
		}
		return fail("stat hardlink target", err)
	}
	if tst.Mode&unix.S_IFMT == unix.S_IFDIR {
		return fail("check", unsafef("hardlink target %q is a directory", hdr.Linkname))
	}
	p, err := a.parent(name)
	if err != nil {
		return fail("resolve parent", err)
	}
	defer p.close()
	var st unix.Stat_t
	if err := unix.Fstatat(p.fd, p.base, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil && st.Dev == tst.Dev && st.Ino == tst.Ino {
		a.stats.Hardlinks++ // already the same inode (a link to itself)
		a.touched(p)
		return nil
	}
	if _, err := a.clear(p, false); err != nil {
		return fail("remove existing", err)
	}
	if err := unix.Linkat(tp.fd, tp.base, p.fd, p.base, 0); err != nil {
		return fail("link", err)
	}
	a.stats.Hardlinks++
	a.touched(p)
	return nil
}

// special creates a fifo or, when allowed, a device node.
func (a *applier) special(hdr *tar.Header, name string) error {
	fail := func(op string, err error) error { return &EntryError{Name: hdr.Name, Op: op, Err: err} }
	var kind uint32
	var dev int
	switch hdr.Typeflag {
	case tar.TypeFifo:
		kind = unix.S_IFIFO
	case tar.TypeChar, tar.TypeBlock:
		if !a.opts.AllowDevices {
			return fail("check", unsafef("device node not allowed (type %q, %d:%d)", hdr.Typeflag, hdr.Devmajor, hdr.Devminor))
		}
		if hdr.Devmajor < 0 || hdr.Devminor < 0 || hdr.Devmajor > 1<<32-1 || hdr.Devminor > 1<<32-1 {
			return fail("check", unsafef("device number %d:%d out of range", hdr.Devmajor, hdr.Devminor))
		}
		kind = unix.S_IFCHR
		if hdr.Typeflag == tar.TypeBlock {
			kind = unix.S_IFBLK
		}
		dev = int(unix.Mkdev(uint32(hdr.Devmajor), uint32(hdr.Devminor)))
	}
	p, err := a.parent(name)
	if err != nil {
		return fail("resolve parent", err)
	}
	defer p.close()
	if _, err := a.clear(p, false); err != nil {
		return fail("remove existing", err)
	}
	if err := unix.Mknodat(p.fd, p.base, kind|0o600, dev); err != nil {
		return fail("create", err)
	}
	if err := a.setMetaPath(hdr, p, kind); err != nil {
		return err
	}
	if kind == unix.S_IFIFO {
		a.stats.Fifos++
	} else {
		a.stats.Devices++
	}
	a.touched(p)
	return nil
}

// whiteout applies ".wh.NAME" or ".wh..wh..opq" found in directory dir.
func (a *applier) whiteout(hdr *tar.Header, dir, base string) error {
	fail := func(op string, err error) error { return &EntryError{Name: hdr.Name, Op: op, Err: err} }
	opaque := base == whiteoutOpaque
	victim := ""
	switch {
	case opaque:
	case strings.HasPrefix(base, whiteoutMeta):
		// Other AUFS metadata (.wh..wh.plnk, .wh..wh.aufs) carries nothing for us.
		a.log.Debug("whiteout-meta-skipped", "entry", hdr.Name)
		return nil
	default:
		victim = strings.TrimPrefix(base, whiteoutPrefix)
		if victim == "" || victim == "." || victim == ".." {
			return fail("check", unsafef("whiteout of %q", victim))
		}
	}
	fd, err := openInRoot(a.rootFd, dir, unix.O_RDONLY|unix.O_DIRECTORY)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		// Nothing to hide: the directory does not exist in the lower layers.
		a.countWhiteout(opaque)
		return nil
	}
	if err != nil {
		return fail("resolve parent", err)
	}
	defer unix.Close(fd)
	rel, err := a.relPath(fd)
	if err != nil {
		return fail("resolve parent", err)
	}
	if err := a.keepTimes(fd, rel); err != nil {
		return fail("stat parent", err)
	}
	if opaque {
		if err := a.prune(fd, rel); err != nil {
			return fail("opaque whiteout", err)
		}
		a.countWhiteout(true)
		return nil
	}
	if _, ok := a.layer[joinRel(rel, victim)]; ok {
		// This layer created the path itself: whiteouts only hide lower layers.
		a.countWhiteout(false)
		return nil
	}
	if err := removeAt(fd, victim); err != nil && !errors.Is(err, unix.ENOENT) {
		return fail("whiteout", err)
	}
	a.countWhiteout(false)
	return nil
}

func (a *applier) countWhiteout(opaque bool) {
	if opaque {
		a.stats.Opaques++
	} else {
		a.stats.Whiteouts++
	}
}

// prune removes every child of the directory dfd (real relative path rel) that this
// layer did not create, descending into the directories it did create or update.
func (a *applier) prune(dfd int, rel string) error {
	names, err := fdio.ReadDirNames(dfd)
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := a.ctx.Err(); err != nil {
			return err
		}
		key := joinRel(rel, n)
		if _, ok := a.layer[key]; !ok {
			if err := a.keepTimes(dfd, rel); err != nil {
				return err
			}
			if err := removeAt(dfd, n); err != nil && !errors.Is(err, unix.ENOENT) {
				return fmt.Errorf("remove %s: %w", key, err)
			}
			continue
		}
		cfd, err := unix.Openat(dfd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
			continue // the layer's own non-directory
		}
		if err != nil {
			return fmt.Errorf("open %s: %w", key, err)
		}
		err = a.prune(cfd, key)
		unix.Close(cfd)
		if err != nil {
			return err
		}
	}
	return nil
}

// keepTimes records the times of directory fd (real relative path rel) before the
// layer first changes its children.
func (a *applier) keepTimes(fd int, rel string) error {
	if _, ok := a.oldTimes[rel]; ok {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	a.oldTimes[rel] = times{
		{Sec: st.Atim.Sec, Nsec: st.Atim.Nsec},
		{Sec: st.Mtim.Sec, Nsec: st.Mtim.Nsec},
	}
	return nil
}

// touched records the entry at p, and its ancestors, as this layer's own.
func (a *applier) touched(p *parentDir) {
	for k := p.child(); k != "."; k = path.Dir(k) {
		if _, ok := a.layer[k]; ok {
			return // its ancestors are recorded too
		}
		a.layer[k] = struct{}{}
	}
}

// finishDirTimes sets the times of the layer's directories, now that no entry will
// add children to them.
func (a *applier) finishDirTimes() error {
	for k, ts := range a.oldTimes {
		if _, ok := a.dirTimes[k]; !ok {
			a.dirTimes[k] = ts
		}
	}
	keys := make([]string, 0, len(a.dirTimes))
	for k := range a.dirTimes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		ts := a.dirTimes[k]
		if k == "." {
			if err := unix.UtimesNanoAt(unix.AT_FDCWD, fdio.ProcPath(a.rootFd), ts[:], 0); err != nil {
				return &EntryError{Name: "./", Op: "set times", Err: err}
			}
			continue
		}
		p, err := a.resolveParent(k, false)
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			continue // removed by a later entry of the layer
		}
		if err != nil {
			return &EntryError{Name: k, Op: "set directory times", Err: err}
		}
		var st unix.Stat_t
		err = unix.Fstatat(p.fd, p.base, &st, unix.AT_SYMLINK_NOFOLLOW)
		if err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			err = unix.UtimesNanoAt(p.fd, p.base, ts[:], unix.AT_SYMLINK_NOFOLLOW)
		} else if errors.Is(err, unix.ENOENT) {
			err = nil
		}
		p.close()
		if err != nil {
			return &EntryError{Name: k, Op: "set directory times", Err: err}
		}
	}
	return nil
}
