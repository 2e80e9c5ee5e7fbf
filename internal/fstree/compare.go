package fstree

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Difference is one way two trees differ at one path.
type Difference struct {
	Path  string // root-relative; "." is the root
	Field string // "presence", "type", "mode", "uid", "gid", "size", "digest", "target", "rdev", "xattr NAME", "hardlinks", "mtime"
	A, B  string // the values in each tree, "(missing)" when absent
	la    string
	lb    string
}

func (d Difference) String() string {
	la, lb := d.la, d.lb
	if la == "" {
		la = "a"
	}
	if lb == "" {
		lb = "b"
	}
	return fmt.Sprintf("%s: %s differs: %s=%s %s=%s", d.Path, d.Field, la, d.A, lb, d.B)
}

// Compare walks the trees at a and b and returns their differences, sorted by path;
// none when the trees are equal under opts.
func Compare(ctx context.Context, a, b string, opts Options) ([]Difference, error) {
	ta, err := Walk(ctx, a, opts)
	if err != nil {
		return nil, err
	}
	tb, err := Walk(ctx, b, opts)
	if err != nil {
		return nil, err
	}
	return Diff(ta, tb, opts), nil
}

const missing = "(missing)"

// Diff compares two walked trees.
func Diff(ta, tb *Tree, opts Options) []Difference {
	la, lb := opts.LabelA, opts.LabelB
	if la == "" {
		la = "a"
	}
	if lb == "" {
		lb = "b"
	}
	var out []Difference
	add := func(p, field, va, vb string) {
		out = append(out, Difference{Path: p, Field: field, A: va, B: vb, la: la, lb: lb})
	}
	paths := make(map[string]struct{})
	for p := range ta.Entries {
		paths[p] = struct{}{}
	}
	for p := range tb.Entries {
		paths[p] = struct{}{}
	}
	sorted := make([]string, 0, len(paths))
	for p := range paths {
		sorted = append(sorted, p)
	}
	sort.Strings(sorted)
	for _, p := range sorted {
		ea, eb := ta.Entries[p], tb.Entries[p]
		switch {
		case ea == nil:
			add(p, "presence", missing, describe(eb))
			continue
		case eb == nil:
			add(p, "presence", describe(ea), missing)
			continue
		}
		if p == "." && opts.IgnoreRoot {
			continue
		}
		if ea.Type() != eb.Type() {
			add(p, "type", describe(ea), describe(eb))
			continue
		}
		if ea.Type() != unix.S_IFLNK && ea.Mode != eb.Mode {
			add(p, "mode", fmt.Sprintf("%#o", ea.Mode&0o7777), fmt.Sprintf("%#o", eb.Mode&0o7777))
		}
		if ea.UID != eb.UID {
			add(p, "uid", fmt.Sprint(ea.UID), fmt.Sprint(eb.UID))
		}
		if ea.GID != eb.GID {
			add(p, "gid", fmt.Sprint(ea.GID), fmt.Sprint(eb.GID))
		}
		switch ea.Type() {
		case unix.S_IFREG:
			if ea.Size != eb.Size {
				add(p, "size", fmt.Sprint(ea.Size), fmt.Sprint(eb.Size))
			} else if ea.Digest != eb.Digest {
				add(p, "digest", ea.Digest, eb.Digest)
			}
		case unix.S_IFLNK:
			if ea.Target != eb.Target {
				add(p, "target", fmt.Sprintf("%q", ea.Target), fmt.Sprintf("%q", eb.Target))
			}
		case unix.S_IFCHR, unix.S_IFBLK:
			if ea.Rdev != eb.Rdev {
				add(p, "rdev", devString(ea.Rdev), devString(eb.Rdev))
			}
		}
		names := make(map[string]struct{})
		for n := range ea.Xattrs {
			names[n] = struct{}{}
		}
		for n := range eb.Xattrs {
			names[n] = struct{}{}
		}
		xs := make([]string, 0, len(names))
		for n := range names {
			xs = append(xs, n)
		}
		sort.Strings(xs)
		for _, n := range xs {
			va, oka := ea.Xattrs[n]
			vb, okb := eb.Xattrs[n]
			if oka != okb || string(va) != string(vb) {
				add(p, "xattr "+n, xattrString(va, oka), xattrString(vb, okb))
			}
		}
		if strings.Join(ea.Links, ",") != strings.Join(eb.Links, ",") {
			add(p, "hardlinks", linksString(ea.Links), linksString(eb.Links))
		}
		isDir := ea.Type() == unix.S_IFDIR
		if ((isDir && opts.DirMtimes) || (!isDir && opts.Mtimes)) && !ea.Mtime.Equal(eb.Mtime) {
			add(p, "mtime", ea.Mtime.Format(time.RFC3339Nano), eb.Mtime.Format(time.RFC3339Nano))
		}
	}
	return out
}

// describe names an entry's type for presence and type differences.
func describe(e *Entry) string {
	switch e.Type() {
	case unix.S_IFREG:
		return fmt.Sprintf("file(%d bytes)", e.Size)
	case unix.S_IFDIR:
		return "dir"
	case unix.S_IFLNK:
		return fmt.Sprintf("symlink(%q)", e.Target)
	case unix.S_IFCHR:
		return "chardev(" + devString(e.Rdev) + ")"
	case unix.S_IFBLK:
		return "blockdev(" + devString(e.Rdev) + ")"
	case unix.S_IFIFO:
		return "fifo"
	case unix.S_IFSOCK:
		return "socket"
	}
	return fmt.Sprintf("mode(%#o)", e.Mode)
}

func devString(d uint64) string { return fmt.Sprintf("%d:%d", unix.Major(d), unix.Minor(d)) }

func xattrString(v []byte, ok bool) string {
	if !ok {
		return missing
	}
	return fmt.Sprintf("%q", v)
}

func linksString(l []string) string {
	if len(l) == 0 {
		return "[]"
	}
	return "[" + strings.Join(l, " ") + "]"
}
