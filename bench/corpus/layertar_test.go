package corpus

import (
	"archive/tar"
	"context"
	"io"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"testing"

	"github.com/klauspost/compress/gzip"
	"golang.org/x/sys/unix"

	"github.com/slacker-dev/slacker/internal/testutil"
)

type tarEntry struct {
	typ      byte
	mode     int64
	size     int64
	link     string
	xattrs   map[string]string
	contents string
}

func readTar(t *testing.T, blob string) map[string]tarEntry {
	t.Helper()
	f, err := os.Open(blob)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	out := map[string]tarEntry{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		e := tarEntry{typ: h.Typeflag, mode: h.Mode, size: h.Size, link: h.Linkname, contents: string(b)}
		for k, v := range h.PAXRecords {
			if len(k) > 13 && k[:13] == "SCHILY.xattr." {
				if e.xattrs == nil {
					e.xattrs = map[string]string{}
				}
				e.xattrs[k[13:]] = v
			}
		}
		out[h.Name] = e
	}
	return out
}

// makeUpper builds what an overlayfs upper directory looks like after a layer
// deleted a file, replaced a directory and added content.
func makeUpper(t *testing.T, dir string) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "etc/app"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "etc/app/conf"), []byte("key=1\n"), 0o640))
	must(os.Chown(filepath.Join(dir, "etc/app/conf"), 0, 42))
	must(os.Symlink("/etc/app/conf", filepath.Join(dir, "etc/app.conf")))
	must(os.MkdirAll(filepath.Join(dir, "usr/bin"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "usr/bin/tool"), []byte("#!/bin/sh\n"), 0o4755))
	must(os.Chmod(filepath.Join(dir, "usr/bin/tool"), 0o755|os.ModeSetuid))
	must(os.Link(filepath.Join(dir, "usr/bin/tool"), filepath.Join(dir, "usr/bin/tool2")))
	// A deleted file: overlayfs' whiteout is a 0:0 character device.
	must(unix.Mknod(filepath.Join(dir, "usr/bin/gone"), unix.S_IFCHR, 0))
	// A replaced directory: opaque.
	must(os.MkdirAll(filepath.Join(dir, "var/cache/x"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "var/cache/x/new"), []byte("n"), 0o644))
	must(unix.Lsetxattr(filepath.Join(dir, "var/cache/x"), overlayOpaque, []byte("y"), 0))
	// overlayfs bookkeeping must not leak; file capabilities must survive.
	must(unix.Lsetxattr(filepath.Join(dir, "etc/app"), "trusted.overlay.impure", []byte("y"), 0))
	must(unix.Lsetxattr(filepath.Join(dir, "usr/bin/tool2"), "user.note", []byte("kept"), 0))
}

func TestLayerRoundTrip(t *testing.T) {
	testutil.RequireRoot(t) // mknod and trusted.* xattrs
	ctx := context.Background()
	upper := t.TempDir()
	blobs := t.TempDir()
	makeUpper(t, upper)

	b, err := WriteLayerFromDir(ctx, upper, blobs)
	if err != nil {
		t.Fatal(err)
	}
	if b.Whiteouts != 2 {
		t.Errorf("whiteouts %d, want 2", b.Whiteouts)
	}
	ents := readTar(t, filepath.Join(blobs, b.Digest[7:]))
	var names []string
	for n := range ents {
		names = append(names, n)
	}
	sort.Strings(names)
	tests := []struct {
		name  string
		check func(e tarEntry) bool
	}{
		{"usr/bin/.wh.gone", func(e tarEntry) bool { return e.typ == tar.TypeReg && e.size == 0 }},
		{"var/cache/x/.wh..wh..opq", func(e tarEntry) bool { return e.typ == tar.TypeReg }},
		{"var/cache/x/new", func(e tarEntry) bool { return e.contents == "n" }},
		{"etc/app/", func(e tarEntry) bool { return e.typ == tar.TypeDir && e.xattrs == nil }},
		{"etc/app.conf", func(e tarEntry) bool { return e.typ == tar.TypeSymlink && e.link == "/etc/app/conf" }},
		{"etc/app/conf", func(e tarEntry) bool { return e.mode&0o777 == 0o640 && e.contents == "key=1\n" }},
		{"usr/bin/tool", func(e tarEntry) bool { return e.typ == tar.TypeReg && e.mode&0o4000 != 0 }},
		{"usr/bin/tool2", func(e tarEntry) bool {
			return e.typ == tar.TypeLink && e.link == "usr/bin/tool" && e.xattrs["user.note"] == "kept"
		}},
	}
	for _, tt := range tests {
		e, ok := ents[tt.name]
		if !ok {
			t.Errorf("missing %s in %v", tt.name, names)
			continue
		}
		if !tt.check(e) {
			t.Errorf("%s: unexpected %+v", tt.name, e)
		}
	}
	if _, ok := ents["usr/bin/gone"]; ok {
		t.Error("whiteout device itself is in the tar")
	}

	// Same tree, same blob.
	b2, err := WriteLayerFromDir(ctx, upper, blobs)
	if err != nil {
		t.Fatal(err)
	}
	if b2.Digest != b.Digest || b2.DiffID != b.DiffID {
		t.Errorf("not deterministic: %s vs %s", b.Digest, b2.Digest)
	}

	// Extracting gives back a directory overlayfs reads as the same layer.
	out := filepath.Join(t.TempDir(), "l")
	if err := ExtractLayerToDir(ctx, filepath.Join(blobs, b.Digest[7:]), out); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(out, "usr/bin/gone"), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 {
		t.Errorf("whiteout not restored: %v %+v", err, st)
	}
	if v, err := lgetxattr(filepath.Join(out, "var/cache/x"), overlayOpaque); err != nil || v != "y" {
		t.Errorf("opaque not restored: %q %v", v, err)
	}
	var s1, s2 syscall.Stat_t
	syscall.Lstat(filepath.Join(out, "usr/bin/tool"), &s1)
	syscall.Lstat(filepath.Join(out, "usr/bin/tool2"), &s2)
	if s1.Ino != s2.Ino || s1.Mode&unix.S_ISUID == 0 {
		t.Errorf("hard link or setuid lost: %+v %+v", s1, s2)
	}
	if fi, err := os.Lstat(filepath.Join(out, "etc/app/conf")); err != nil || fi.Mode().Perm() != 0o640 || fi.Sys().(*syscall.Stat_t).Gid != 42 {
		t.Errorf("conf metadata: %v %v", fi, err)
	}
	// And re-archiving the extracted tree gives the very same layer.
	b3, err := WriteLayerFromDir(ctx, out, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if b3.DiffID != b.DiffID {
		t.Errorf("round trip changed the layer: %s vs %s", b3.DiffID, b.DiffID)
	}
}

func TestExtractRefusesEscapes(t *testing.T) {
	tests := []struct {
		name    string
		entries []tar.Header
	}{
		{"dotdot", []tar.Header{{Name: "../evil", Typeflag: tar.TypeReg}}},
		{"through symlink", []tar.Header{
			{Name: "link", Typeflag: tar.TypeSymlink, Linkname: "/tmp"},
			{Name: "link/evil", Typeflag: tar.TypeReg},
		}},
		{"hard link out", []tar.Header{{Name: "h", Typeflag: tar.TypeLink, Linkname: "../../etc/passwd"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			blob := filepath.Join(dir, "blob")
			f, _ := os.Create(blob)
			gz := gzip.NewWriter(f)
			tw := tar.NewWriter(gz)
			for _, h := range tt.entries {
				h.Mode = 0o644
				if err := tw.WriteHeader(&h); err != nil {
					t.Fatal(err)
				}
			}
			tw.Close()
			gz.Close()
			f.Close()
			if err := ExtractLayerToDir(context.Background(), blob, filepath.Join(dir, "out")); err == nil {
				t.Fatal("extraction succeeded")
			}
			if _, err := os.Lstat("/tmp/evil"); err == nil && tt.name == "through symlink" {
				t.Fatal("wrote through the symlink")
			}
		})
	}
}
