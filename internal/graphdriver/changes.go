package graphdriver

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// ChangeKind is Docker's archive.ChangeType.
type ChangeKind int

// Docker's change kinds, as numbers on the wire.
const (
	ChangeModify ChangeKind = 0
	ChangeAdd    ChangeKind = 1
	ChangeDelete ChangeKind = 2
)

func (k ChangeKind) String() string {
	switch k {
	case ChangeModify:
		return "C"
	case ChangeAdd:
		return "A"
	case ChangeDelete:
		return "D"
	}
	return "?"
}

// Change is one changed path, as Docker's archive.Change marshals: {"Path":"/etc/motd","Kind":0}.
type Change struct {
	Path string
	Kind ChangeKind
}

// change is a Change with the layer side's stat (Add and Modify).
type change struct {
	Change
	st unix.Stat_t
}

// treeChanges compares the tree at layer with the tree at parent ("" for none) and
// returns what changed, sorted by path. The two trees are clones of one filesystem
// (a layer's volume is a block-level clone of its parent's snapshot), so an entry
// whose inode number, ctime, mtime, size, mode, owner and device number are equal is
// unchanged: any write, chmod, chown, xattr or link change moves ctime, which no
// user can set. Nothing is read but directories and inodes. Like Docker's own
// change detection, an added directory brings every path under it, a deleted one
// only itself, and the root is never reported.
func treeChanges(ctx context.Context, layer, parent string) ([]change, error) {
	lfd, err := unix.Open(layer, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("changes: open %s: %w", layer, err)
	}
	defer unix.Close(lfd)
	pfd := -1
	if parent != "" {
		if pfd, err = unix.Open(parent, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
			return nil, fmt.Errorf("changes: open %s: %w", parent, err)
		}
		defer unix.Close(pfd)
	}
	d := &differ{ctx: ctx}
	if err := d.dir(lfd, pfd, ""); err != nil {
		return nil, fmt.Errorf("changes of %s against %s: %w", layer, parent, err)
	}
	sort.Slice(d.out, func(i, j int) bool { return d.out[i].Path < d.out[j].Path })
	return d.out, nil
}

type differ struct {
	ctx context.Context
	out []change
}

// dir compares the directories open at lfd and pfd (-1: absent on the parent side).
func (d *differ) dir(lfd, pfd int, rel string) error {
	if err := d.ctx.Err(); err != nil {
		return err
	}
	lnames, err := dirNames(lfd)
	if err != nil {
		return fmt.Errorf("read %s/: %w", rel, err)
	}
	var pnames []string
	if pfd >= 0 {
		if pnames, err = dirNames(pfd); err != nil {
			return fmt.Errorf("read parent's %s/: %w", rel, err)
		}
	}
	i, j := 0, 0
	for i < len(lnames) || j < len(pnames) {
		switch {
		case j == len(pnames) || (i < len(lnames) && lnames[i] < pnames[j]):
			if err := d.added(lfd, lnames[i], rel+"/"+lnames[i]); err != nil {
				return err
			}
			i++
		case i == len(lnames) || pnames[j] < lnames[i]:
			d.out = append(d.out, change{Change: Change{Path: rel + "/" + pnames[j], Kind: ChangeDelete}})
			j++
		default:
			if err := d.both(lfd, pfd, lnames[i], rel+"/"+lnames[i]); err != nil {
				return err
			}
			i++
			j++
		}
	}
	return nil
}

// added records name (in lfd) and, for a directory, everything under it.
func (d *differ) added(lfd int, name, p string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(lfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("stat %s: %w", p, err)
	}
	d.out = append(d.out, change{Change: Change{Path: p, Kind: ChangeAdd}, st: st})
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil
	}
	fd, err := openDir(lfd, name)
	if err != nil {
		return fmt.Errorf("open %s: %w", p, err)
	}
	defer unix.Close(fd)
	return d.dir(fd, -1, p)
}

// both compares name present in both trees.
func (d *differ) both(lfd, pfd int, name, p string) error {
	var ls, ps unix.Stat_t
	if err := unix.Fstatat(lfd, name, &ls, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("stat %s: %w", p, err)
	}
	if err := unix.Fstatat(pfd, name, &ps, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("stat parent's %s: %w", p, err)
	}
	lt, pt := ls.Mode&unix.S_IFMT, ps.Mode&unix.S_IFMT
	if lt != pt || changed(&ls, &ps) {
		d.out = append(d.out, change{Change: Change{Path: p, Kind: ChangeModify}, st: ls})
	}
	if lt != unix.S_IFDIR {
		return nil
	}
	lc, err := openDir(lfd, name)
	if err != nil {
		return fmt.Errorf("open %s: %w", p, err)
	}
	defer unix.Close(lc)
	pc := -1
	if pt == unix.S_IFDIR {
		if pc, err = openDir(pfd, name); err != nil {
			return fmt.Errorf("open parent's %s: %w", p, err)
		}
		defer unix.Close(pc)
	}
	return d.dir(lc, pc, p)
}

func changed(a, b *unix.Stat_t) bool {
	if a.Ino != b.Ino || a.Ctim != b.Ctim || a.Mtim != b.Mtim || a.Mode != b.Mode ||
		a.Uid != b.Uid || a.Gid != b.Gid || a.Rdev != b.Rdev {
		return true
	}
	return a.Mode&unix.S_IFMT != unix.S_IFDIR && a.Size != b.Size
}

func openDir(dfd int, name string) (int, error) {
	return unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
}

// dirNames lists the directory open at fd, sorted; fd stays open.
func dirNames(fd int) ([]string, error) {
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), "dir")
	defer f.Close()
	if _, err := f.Seek(0, 0); err != nil {
		return nil, err
	}
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	return names, nil
}

// publicChanges strips the stat.
func publicChanges(cs []change) []Change {
	out := make([]Change, len(cs))
	for i, c := range cs {
		out[i] = c.Change
	}
	return out
}

// changesSize is Docker's DiffSize: the bytes of regular files added or changed, a
// file with several names counted once.
func changesSize(cs []change) int64 {
	seen := map[uint64]bool{}
	var n int64
	for _, c := range cs {
		if c.Kind == ChangeDelete || c.st.Mode&unix.S_IFMT != unix.S_IFREG {
			continue
		}
		if c.st.Nlink > 1 {
			if seen[c.st.Ino] {
				continue
			}
			seen[c.st.Ino] = true
		}
		n += c.st.Size
	}
	return n
}

// underAny reports whether p is one of set's paths or below one.
func underAny(p string, set map[string]bool) bool {
	for q := p; q != "" && q != "/"; {
		if set[q] {
			return true
		}
		i := strings.LastIndexByte(q, '/')
		if i <= 0 {
			break
		}
		q = q[:i]
	}
	return false
}
