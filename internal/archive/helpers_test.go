package archive_test

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/slacker-dev/slacker/internal/archive"
	"github.com/slacker-dev/slacker/internal/fstree"
	"golang.org/x/sys/unix"
)

// ent is one tar entry of a test layer.
type ent struct {
	name   string
	typ    byte
	body   string
	link   string
	mode   int64
	uid    int
	gid    int
	xattrs map[string]string
	mtime  time.Time
	major  int64
	minor  int64
	size   int64 // header size when body is left empty on purpose (0: len(body))
}

var testTime = time.Date(2020, 2, 3, 4, 5, 6, 700000000, time.UTC)

func file(name, body string) ent { return ent{name: name, typ: tar.TypeReg, body: body, mode: 0o644} }
func dir(name string) ent        { return ent{name: name, typ: tar.TypeDir, mode: 0o755} }
func symlink(name, to string) ent {
	return ent{name: name, typ: tar.TypeSymlink, link: to, mode: 0o777}
}
func hardlink(name, to string) ent {
	return ent{name: name, typ: tar.TypeLink, link: to, mode: 0o644}
}
func fifo(name string) ent { return ent{name: name, typ: tar.TypeFifo, mode: 0o600} }
func chardev(name string, major, minor int64) ent {
	return ent{name: name, typ: tar.TypeChar, mode: 0o666, major: major, minor: minor}
}
func whiteout(name string) ent { return file(name, "") }

func (e ent) withMode(m int64) ent       { e.mode = m; return e }
func (e ent) withOwner(uid, gid int) ent { e.uid, e.gid = uid, gid; return e }
func (e ent) withMtime(t time.Time) ent  { e.mtime = t; return e }
func (e ent) withXattr(k, v string) ent {
	x := map[string]string{}
	for a, b := range e.xattrs {
		x[a] = b
	}
	x[k] = v
	e.xattrs = x
	return e
}

func (e ent) header() *tar.Header {
	mt := e.mtime
	if mt.IsZero() {
		mt = testTime
	}
	h := &tar.Header{
		Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: e.mode,
		Uid: e.uid, Gid: e.gid, ModTime: mt, AccessTime: mt,
		Devmajor: e.major, Devminor: e.minor, Format: tar.FormatPAX,
	}
	if e.typ == tar.TypeReg {
		h.Size = int64(len(e.body))
		if e.size != 0 {
			h.Size = e.size
		}
	}
	for k, v := range e.xattrs {
		if h.PAXRecords == nil {
			h.PAXRecords = map[string]string{}
		}
		h.PAXRecords["SCHILY.xattr."+k] = v
	}
	return h
}

// layer builds an uncompressed tar of entries.
func layer(t testing.TB, entries ...ent) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		if err := tw.WriteHeader(e.header()); err != nil {
			t.Fatalf("tar header %s: %v", e.name, err)
		}
		if e.body != "" {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatalf("tar body %s: %v", e.name, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// apply applies a layer to root and fails the test on error.
func apply(t testing.TB, root string, tarball []byte, opts archive.Options) archive.Stats {
	t.Helper()
	st, err := archive.Apply(context.Background(), root, bytes.NewReader(tarball), opts)
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	return st
}

// summary describes every path of the tree at root, one line each, for exact
// assertions: "path: file 0644 0:0 \"body\"", "path: dir 0755 0:0", ...
func summary(t testing.TB, root string) map[string]string {
	t.Helper()
	tree, err := fstree.Walk(context.Background(), root, fstree.Options{Xattrs: []string{"user.", "security.capability", "trusted."}})
	if err != nil {
		t.Fatalf("walk: %v", err)
	}
	out := map[string]string{}
	for _, p := range tree.Paths() {
		e := tree.Entries[p]
		perm := e.Mode & 0o7777
		var s string
		switch e.Type() {
		case unix.S_IFREG:
			body, err := os.ReadFile(filepath.Join(root, p))
			if err != nil {
				t.Fatal(err)
			}
			s = fmt.Sprintf("file %04o %d:%d %q", perm, e.UID, e.GID, body)
		case unix.S_IFDIR:
			s = fmt.Sprintf("dir %04o %d:%d", perm, e.UID, e.GID)
		case unix.S_IFLNK:
			s = fmt.Sprintf("symlink %s %d:%d", e.Target, e.UID, e.GID)
		case unix.S_IFIFO:
			s = fmt.Sprintf("fifo %04o %d:%d", perm, e.UID, e.GID)
		case unix.S_IFCHR:
			s = fmt.Sprintf("char %d:%d %04o", unix.Major(e.Rdev), unix.Minor(e.Rdev), perm)
		default:
			s = fmt.Sprintf("mode %#o", e.Mode)
		}
		if len(e.Links) > 0 {
			s += " links=" + strings.Join(e.Links, ",")
		}
		var xs []string
		for k, v := range e.Xattrs {
			xs = append(xs, fmt.Sprintf("%s=%q", k, v))
		}
		sort.Strings(xs)
		for _, x := range xs {
			s += " " + x
		}
		out[p] = s
	}
	return out
}

// diffSummary returns human-readable differences between two summaries.
func diffSummary(got, want map[string]string) []string {
	var d []string
	for p, w := range want {
		if g, ok := got[p]; !ok {
			d = append(d, fmt.Sprintf("%s: missing, want %s", p, w))
		} else if g != w {
			d = append(d, fmt.Sprintf("%s: got  %s\n%s  want %s", p, g, strings.Repeat(" ", len(p)), w))
		}
	}
	for p, g := range got {
		if _, ok := want[p]; !ok {
			d = append(d, fmt.Sprintf("%s: unexpected %s", p, g))
		}
	}
	sort.Strings(d)
	return d
}

// rawHeader builds a ustar header block by hand, for names and sizes archive/tar's
// writer refuses to produce.
func rawHeader(name string, typ byte, size int64, link string) []byte {
	b := make([]byte, 512)
	copy(b[0:100], name)
	copy(b[100:108], fmt.Sprintf("%07o\x00", 0o644))
	copy(b[108:116], "0000000\x00")
	copy(b[116:124], "0000000\x00")
	copy(b[124:136], fmt.Sprintf("%011o\x00", size))
	copy(b[136:148], fmt.Sprintf("%011o\x00", testTime.Unix()))
	b[156] = typ
	copy(b[157:257], link)
	copy(b[257:265], "ustar\x0000")
	copy(b[148:156], "        ")
	sum := 0
	for _, c := range b {
		sum += int(c)
	}
	copy(b[148:156], fmt.Sprintf("%06o\x00 ", sum))
	return b
}

// rawEntry is a header made by rawHeader followed by its padded content.
func rawEntry(name string, typ byte, body []byte, link string) []byte {
	out := rawHeader(name, typ, int64(len(body)), link)
	out = append(out, body...)
	if pad := len(body) % 512; pad != 0 {
		out = append(out, make([]byte, 512-pad)...)
	}
	return out
}

// endOfArchive is the two zero blocks that end a tar.
var endOfArchive = make([]byte, 1024)
