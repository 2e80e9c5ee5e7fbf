package archive

import (
	"archive/tar"
	"errors"
	"fmt"
	"os"
	"path"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/slacker-dev/slacker/internal/fdio"
)

// resolveFlags resolve a path the way the container will: "/" and ".." stop at root,
// absolute symlinks are root-relative, and neither a magic link nor a mount point is
// crossed.
const resolveFlags = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// openInRoot opens rel (root-relative, "." for root) with chroot semantics.
func openInRoot(rootFd int, rel string, flags int) (int, error) {
	how := unix.OpenHow{Flags: uint64(flags) | unix.O_CLOEXEC, Resolve: resolveFlags}
	for tries := 0; ; tries++ {
		fd, err := unix.Openat2(rootFd, rel, &how)
		// EAGAIN: a concurrent rename raced the walk; the kernel asks for a retry.
		if (err == unix.EAGAIN && tries < 32) || err == unix.EINTR {
			continue
		}
		if err == unix.ENOSYS {
			return -1, fmt.Errorf("openat2 is unavailable (Linux 5.6 or later is required): %w", err)
		}
		return fd, err
	}
}

// fdPath returns the absolute path the kernel records for fd.
func fdPath(fd int) (string, error) {
	p, err := os.Readlink(fdio.ProcPath(fd))
	if err != nil {
		return "", fmt.Errorf("resolve path of fd: %w", err)
	}
	if !strings.HasPrefix(p, "/") || strings.HasSuffix(p, " (deleted)") {
		return "", fmt.Errorf("resolve path of fd: unusable path %q", p)
	}
	return p, nil
}

// relPath returns the real root-relative path of a directory fd opened inside root.
func (a *applier) relPath(fd int) (string, error) {
	p, err := fdPath(fd)
	if err != nil {
		return "", err
	}
	switch {
	case p == a.rootPath:
		return ".", nil
	case a.rootPath == "/":
		return p[1:], nil
	case strings.HasPrefix(p, a.rootPath+"/"):
		return p[len(a.rootPath)+1:], nil
	}
	// Cannot happen with RESOLVE_IN_ROOT; refuse rather than act on it.
	return "", unsafef("path resolved outside the root: %s", p)
}

// joinRel joins a root-relative directory and a name.
func joinRel(dir, name string) string {
	if dir == "." {
		return name
	}
	return dir + "/" + name
}

// parentDir is the resolved parent directory of an entry: every operation on the
// entry is an *at call on fd with base, which is one path component.
type parentDir struct {
	fd   int    // O_PATH directory fd, or -1 for the root entry
	rel  string // real root-relative path of the directory
	base string
}

func (p *parentDir) close() {
	if p.fd >= 0 {
		unix.Close(p.fd)
		p.fd = -1
	}
}

// child is the real root-relative path of the entry.
func (p *parentDir) child() string { return joinRel(p.rel, p.base) }

// parent resolves the parent directory of name, creating missing directories.
func (a *applier) parent(name string) (*parentDir, error) { return a.resolveParent(name, true) }

// resolveParent resolves the parent directory of name (a clean root-relative path,
// not "."), creating missing directories 0755 root:root when create is set.
func (a *applier) resolveParent(name string, create bool) (*parentDir, error) {
	dir, base := path.Dir(name), path.Base(name)
	fd, err := openInRoot(a.rootFd, dir, unix.O_PATH|unix.O_DIRECTORY)
	if errors.Is(err, unix.ENOENT) && create {
		fd, err = a.mkdirParents(dir)
	}
	if err != nil {
		return nil, err
	}
	rel, err := a.relPath(fd)
	if err == nil && create {
		err = a.keepTimes(fd, rel)
	}
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &parentDir{fd: fd, rel: rel, base: base}, nil
}

// mkdirParents creates the missing directories of dir, one component at a time,
// each resolved inside root, and returns an fd of dir. A dangling symlink on the way is
// followed the way the container would (its target resolved inside root) and the
// directories it names are created, as containerd and umoci do.
func (a *applier) mkdirParents(dir string) (int, error) {
	for hops := 0; hops <= 40; hops++ {
		fd, next, err := a.mkdirWalk(dir)
		if next == "" {
			return fd, err
		}
		dir = next
	}
	return -1, fmt.Errorf("create parent %s: %w", dir, unix.ELOOP)
}

// mkdirWalk creates the missing components of dir. When a component is a dangling
// symlink it returns, instead of an fd, the root-relative path that dir becomes once
// that symlink is expanded.
func (a *applier) mkdirWalk(dir string) (fd int, next string, err error) {
	comps := strings.Split(dir, "/")
	cur := -1 // -1: the root
	at := func() int {
		if cur < 0 {
			return a.rootFd
		}
		return cur
	}
	defer func() {
		if err != nil || next != "" {
			if cur >= 0 {
				unix.Close(cur)
			}
		}
	}()
	for i, c := range comps {
		prefix := strings.Join(comps[:i+1], "/")
		fd, err := openInRoot(a.rootFd, prefix, unix.O_PATH|unix.O_DIRECTORY)
		if err == nil {
			if cur >= 0 {
				unix.Close(cur)
			}
			cur = fd
			continue
		}
		if !errors.Is(err, unix.ENOENT) {
			return -1, "", fmt.Errorf("resolve %s: %w", prefix, err)
		}
		rel, err := a.relPath(at())
		if err == nil {
			err = a.keepTimes(at(), rel)
		}
		if err != nil {
			return -1, "", fmt.Errorf("resolve %s: %w", prefix, err)
		}
		err = unix.Mkdirat(at(), c, 0o700)
		if errors.Is(err, unix.EEXIST) {
			target, err := a.danglingTarget(at(), c)
			if err != nil {
				return -1, "", fmt.Errorf("resolve %s: %w", prefix, err)
			}
			return -1, path.Join(append([]string{target}, comps[i+1:]...)...), nil
		}
		if err != nil {
			return -1, "", fmt.Errorf("create parent %s: %w", prefix, err)
		}
		fd, err = unix.Openat(at(), c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, "", fmt.Errorf("open parent %s: %w", prefix, err)
		}
		if cur >= 0 {
			unix.Close(cur)
		}
		cur = fd
		if err := unix.Fchown(fd, 0, 0); err != nil {
			return -1, "", fmt.Errorf("chown parent %s: %w", prefix, err)
		}
		if err := unix.Fchmod(fd, 0o755); err != nil { // mkdirat obeys the umask
			return -1, "", fmt.Errorf("chmod parent %s: %w", prefix, err)
		}
	}
	return cur, "", nil
}

// danglingTarget returns the root-relative path that the symlink name in directory
// dfd points at, resolved lexically from dfd's real path with ".." stopping at root.
func (a *applier) danglingTarget(dfd int, name string) (string, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return "", err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFLNK {
		return "", fmt.Errorf("exists but is not a directory: %w", unix.ENOTDIR)
	}
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(dfd, name, buf)
	if err != nil {
		return "", err
	}
	target := string(buf[:n])
	if !path.IsAbs(target) {
		base, err := a.relPath(dfd)
		if err != nil {
			return "", err
		}
		target = path.Join("/", base, target)
	}
	// The real path of dfd has no symlinks, so lexical ".." is the kernel's "..";
	// cleaning under "/" clamps it at root like RESOLVE_IN_ROOT.
	if rel := strings.TrimPrefix(path.Clean("/"+target), "/"); rel != "" {
		return rel, nil
	}
	return ".", nil
}

// clear removes what is at p (a whole subtree for a directory), unless keepDir is set
// and it is a directory, which it keeps and reports.
func (a *applier) clear(p *parentDir, keepDir bool) (kept bool, err error) {
	var st unix.Stat_t
	err = unix.Fstatat(p.fd, p.base, &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if keepDir && st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return true, nil
	}
	return false, removeAt(p.fd, p.base)
}

// removeAt removes name in directory dfd, with its subtree if it is a directory,
// never following a symlink.
func removeAt(dfd int, name string) error {
	err := unix.Unlinkat(dfd, name, 0)
	if !errors.Is(err, unix.EISDIR) {
		return err
	}
	cfd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	names, err := fdio.ReadDirNames(cfd)
	if err == nil {
		for _, n := range names {
			if err = removeAt(cfd, n); err != nil && !errors.Is(err, unix.ENOENT) {
				break
			}
			err = nil
		}
	}
	unix.Close(cfd)
	if err != nil {
		return err
	}
	return unix.Unlinkat(dfd, name, unix.AT_REMOVEDIR)
}

// obj is an object just created or kept, open for setting its metadata.
type obj struct {
	fd   int
	kind uint32 // S_IFREG, S_IFDIR, ...
	// opath: fd is O_PATH (symlinks, fifos, devices: opening them for real would follow
	// the link, block, or open the device), so calls go through /proc/self/fd/N,
	// which resolves to the object itself and follows nothing further.
	opath bool
	// clearXattrs: the object existed (a kept directory); xattrs the entry lacks go.
	clearXattrs bool
}

func (o obj) chown(uid, gid int) error {
	if o.opath {
		return unix.Fchownat(o.fd, "", uid, gid, unix.AT_EMPTY_PATH)
	}
	return unix.Fchown(o.fd, uid, gid)
}

func (o obj) chmod(mode uint32) error {
	if o.opath {
		return unix.Chmod(fdio.ProcPath(o.fd), mode)
	}
	return unix.Fchmod(o.fd, mode)
}

func (o obj) setxattr(name string, val []byte) error {
	if o.opath {
		return unix.Setxattr(fdio.ProcPath(o.fd), name, val, 0)
	}
	return unix.Fsetxattr(o.fd, name, val, 0)
}

func (o obj) removexattr(name string) error {
	if o.opath {
		return unix.Removexattr(fdio.ProcPath(o.fd), name)
	}
	return unix.Fremovexattr(o.fd, name)
}

func (o obj) listxattr() ([]string, error) { return fdio.ListXattrs(o.fd, o.opath) }

// setMetaPath opens the object at p without following it and sets its metadata.
func (a *applier) setMetaPath(hdr *tar.Header, p *parentDir, kind uint32) error {
	fd, err := unix.Openat(p.fd, p.base, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &EntryError{Name: hdr.Name, Op: "open", Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return &EntryError{Name: hdr.Name, Op: "stat", Err: err}
	}
	if st.Mode&unix.S_IFMT != kind {
		return &EntryError{Name: hdr.Name, Op: "stat", Err: fmt.Errorf("object changed type under us (mode %#o)", st.Mode)}
	}
	return a.setMeta(hdr, p, obj{fd: fd, kind: kind, opath: true})
}

// setMeta sets ownership, then mode (chown clears setuid/setgid), then xattrs (chown
// and writes clear security.capability), then times. Directory times wait for the
// end of the layer.
func (a *applier) setMeta(hdr *tar.Header, p *parentDir, o obj) error {
	fail := func(op string, err error) error { return &EntryError{Name: hdr.Name, Op: op, Err: err} }
	if err := o.chown(hdr.Uid, hdr.Gid); err != nil {
		return fail("chown", err)
	}
	if o.kind != unix.S_IFLNK {
		if err := o.chmod(uint32(hdr.Mode) & 0o7777); err != nil {
			return fail("chmod", err)
		}
	}
	if err := a.setXattrs(hdr, o); err != nil {
		return err
	}
	if o.kind == unix.S_IFDIR {
		return nil
	}
	ts := entryTimes(hdr)
	if err := unix.UtimesNanoAt(p.fd, p.base, ts[:], unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fail("set times", err)
	}
	return nil
}

// setXattrs applies the entry's SCHILY.xattr.* PAX records.
func (a *applier) setXattrs(hdr *tar.Header, o obj) error {
	want := make(map[string]string)
	for k, v := range hdr.PAXRecords {
		if name, ok := strings.CutPrefix(k, xattrPAXPrefix); ok {
			want[name] = v
		}
	}
	if o.clearXattrs {
		have, err := o.listxattr()
		if err != nil && !errors.Is(err, unix.ENOTSUP) {
			return &EntryError{Name: hdr.Name, Op: "list xattrs", Err: err}
		}
		for _, name := range have {
			if _, ok := want[name]; ok {
				continue
			}
			err := o.removexattr(name)
			switch {
			case err == nil, errors.Is(err, unix.ENODATA):
			case errors.Is(err, unix.ENOTSUP), errors.Is(err, unix.EPERM):
				a.log.Warn("xattr-kept", "entry", hdr.Name, "xattr", name, "err", err)
			default:
				return &EntryError{Name: hdr.Name, Op: "remove xattr " + name, Err: err}
			}
		}
	}
	names := make([]string, 0, len(want))
	for name := range want {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		err := o.setxattr(name, []byte(want[name]))
		if err == nil {
			a.stats.Xattrs++
			continue
		}
		special := o.kind != unix.S_IFREG && o.kind != unix.S_IFDIR
		if errors.Is(err, unix.ENOTSUP) || (special && errors.Is(err, unix.EPERM) && strings.HasPrefix(name, "user.")) {
			a.stats.XattrsSkipped++
			a.log.Warn("xattr-skipped", "entry", hdr.Name, "xattr", name, "err", err)
			continue
		}
		return &EntryError{Name: hdr.Name, Op: "set xattr " + name, Err: err}
	}
	return nil
}

// entryTimes returns the entry's access and modification times; a missing access
// time is the modification time.
func entryTimes(hdr *tar.Header) times {
	mt := hdr.ModTime
	at := hdr.AccessTime
	if at.IsZero() {
		at = mt
	}
	return times{
		{Sec: at.Unix(), Nsec: int64(at.Nanosecond())},
		{Sec: mt.Unix(), Nsec: int64(mt.Nanosecond())},
	}
}
