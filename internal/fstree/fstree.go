package fstree

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/slacker-dev/slacker/internal/fdio"
)

// DefaultXattrs are the xattrs compared when Options.Xattrs is nil.
var DefaultXattrs = []string{"user.", "security.capability"}

// Options say what Walk records and Compare compares.
type Options struct {
	// Xattrs lists the xattrs to record: a name ("security.capability") or a namespace
	// prefix ending in "." ("user.", "trusted."). Nil means DefaultXattrs; an empty,
	// non-nil slice records none.
	Xattrs []string
	// Ignore lists root-relative paths ("lost+found", "etc/hostname") skipped with
	// their subtrees.
	Ignore []string
	// Mtimes compares the modification times of everything but directories.
	Mtimes bool
	// DirMtimes compares the modification times of directories.
	DirMtimes bool
	// IgnoreRoot leaves out the root directory's own metadata (a mount point's mode and
	// owner are often the mounter's, not the image's).
	IgnoreRoot bool
	// LabelA and LabelB name the two trees in differences; default "a" and "b".
	LabelA, LabelB string
}

// Entry is what Walk records of one path.
type Entry struct {
	Path   string // root-relative, slash-separated; "." is the root
	Mode   uint32 // st_mode: type and permission bits
	UID    uint32
	GID    uint32
	Size   int64  // regular files only
	Digest string // "sha256:<hex>" of a regular file's content
	Target string // symlink target
	Rdev   uint64 // device number of a char or block device
	Mtime  time.Time
	Xattrs map[string][]byte
	// Links lists the other paths of the tree that share this entry's inode (sorted;
	// empty for directories and for files with a single name in the tree).
	Links []string

	dev, ino uint64
}

// Type returns the entry's file type bits (unix.S_IFREG, ...).
func (e *Entry) Type() uint32 { return e.Mode & unix.S_IFMT }

// Tree is a walked directory tree.
type Tree struct {
	Root    string
	Entries map[string]*Entry
}

// Paths returns the tree's paths, sorted.
func (t *Tree) Paths() []string {
	ps := make([]string, 0, len(t.Entries))
	for p := range t.Entries {
		ps = append(ps, p)
	}
	sort.Strings(ps)
	return ps
}

// Walk records the tree at root (root itself may be reached through a symlink;
// nothing below it is followed).
func Walk(ctx context.Context, root string, opts Options) (*Tree, error) {
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("walk %s: %w", root, err)
	}
	defer unix.Close(fd)
	w := &walker{ctx: ctx, opts: opts, tree: &Tree{Root: root, Entries: make(map[string]*Entry)},
		buf: make([]byte, 1<<20)}
	if w.opts.Xattrs == nil {
		w.opts.Xattrs = DefaultXattrs
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("walk %s: %w", root, err)
	}
	e := newEntry(".", &st)
	if e.Xattrs, err = w.xattrs(fd, false); err != nil {
		return nil, fmt.Errorf("walk %s: xattrs of root: %w", root, err)
	}
	w.tree.Entries["."] = e
	if err := w.dir(fd, "."); err != nil {
		return nil, fmt.Errorf("walk %s: %w", root, err)
	}
	groups := make(map[[2]uint64][]string)
	for p, e := range w.tree.Entries {
		if e.Type() != unix.S_IFDIR {
			k := [2]uint64{e.dev, e.ino}
			groups[k] = append(groups[k], p)
		}
	}
	for _, g := range groups {
		if len(g) < 2 {
			continue
		}
		sort.Strings(g)
		for _, p := range g {
			for _, q := range g {
				if q != p {
					w.tree.Entries[p].Links = append(w.tree.Entries[p].Links, q)
				}
			}
		}
	}
	return w.tree, nil
}

type walker struct {
	ctx  context.Context
	opts Options
	tree *Tree
	buf  []byte
}

func newEntry(p string, st *unix.Stat_t) *Entry {
	e := &Entry{
		Path: p, Mode: st.Mode, UID: st.Uid, GID: st.Gid,
		Mtime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec).UTC(),
		dev:   st.Dev, ino: st.Ino,
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		e.Size = st.Size
	case unix.S_IFCHR, unix.S_IFBLK:
		e.Rdev = st.Rdev
	}
	return e
}

func joinRel(dir, name string) string {
	if dir == "." {
		return name
	}
	return dir + "/" + name
}

func (w *walker) ignored(p string) bool {
	for _, ig := range w.opts.Ignore {
		ig = path.Clean(ig)
		if p == ig || strings.HasPrefix(p, ig+"/") {
			return true
		}
	}
	return false
}

// dir records the children of the directory open at fd (root-relative path rel).
func (w *walker) dir(fd int, rel string) error {
	names, err := fdio.ReadDirNames(fd)
	if err != nil {
		return fmt.Errorf("read directory %s: %w", rel, err)
	}
	for _, n := range names {
		if err := w.ctx.Err(); err != nil {
			return err
		}
		p := joinRel(rel, n)
		if w.ignored(p) {
			continue
		}
		if err := w.entry(fd, n, p); err != nil {
			return err
		}
	}
	return nil
}

// entry records name in directory dfd.
func (w *walker) entry(dfd int, name, p string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("stat %s: %w", p, err)
	}
	kind := st.Mode & unix.S_IFMT
	// Only regular files and directories are opened for real; everything else gets an
	// O_PATH fd, which opens nothing (no device, no fifo) and follows no symlink.
	flags := unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC
	switch kind {
	case unix.S_IFREG:
		flags = unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC
	case unix.S_IFDIR:
		flags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	}
	fd, err := unix.Openat(dfd, name, flags|unix.O_NOATIME, 0)
	if errors.Is(err, unix.EPERM) {
		fd, err = unix.Openat(dfd, name, flags, 0)
	}
	if err != nil {
		return fmt.Errorf("open %s: %w", p, err)
	}
	defer unix.Close(fd)
	var fst unix.Stat_t
	if err := unix.Fstat(fd, &fst); err != nil {
		return fmt.Errorf("stat %s: %w", p, err)
	}
	if fst.Dev != st.Dev || fst.Ino != st.Ino || fst.Mode&unix.S_IFMT != kind {
		return fmt.Errorf("%s changed while walking", p)
	}
	e := newEntry(p, &fst)
	if e.Xattrs, err = w.xattrs(fd, flags&unix.O_PATH != 0); err != nil {
		return fmt.Errorf("xattrs of %s: %w", p, err)
	}
	w.tree.Entries[p] = e
	switch kind {
	case unix.S_IFREG:
		h := sha256.New()
		_, err := io.CopyBuffer(h, fdio.Reader(fd), w.buf)
		if err != nil {
			return fmt.Errorf("read %s: %w", p, err)
		}
		e.Digest = "sha256:" + hex.EncodeToString(h.Sum(nil))
	case unix.S_IFLNK:
		t, err := fdio.Readlinkat(dfd, name)
		if err != nil {
			return fmt.Errorf("readlink %s: %w", p, err)
		}
		e.Target = t
	case unix.S_IFDIR:
		return w.dir(fd, p)
	}
	return nil
}

// xattrs returns the wanted xattrs of the object open at fd (O_PATH when opath).
func (w *walker) xattrs(fd int, opath bool) (map[string][]byte, error) {
	if len(w.opts.Xattrs) == 0 {
		return nil, nil
	}
	return fdio.Xattrs(fd, opath, fdio.Matcher(w.opts.Xattrs))
}
