package testutil

import (
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// RichTree fills the directory root with one of each kind of entry and metadata
// an image carries, for tests that copy or convert trees and compare them: a
// multi-block file with a short last block, hard links, relative, absolute and
// dangling symlinks, an empty file, a sparse file, a fifo, character devices
// (1:3 and a 0/0 one, overlayfs's whiteout), setuid and sticky modes, numeric
// owners, user and trusted xattrs, a file capability, times to the nanosecond, a
// name of 255 bytes, nested and empty directories, and the root's own mode,
// owner, xattr and time. It needs root. It returns the paths it made, relative to
// root.
func RichTree(t testing.TB, root string) []string {
	t.Helper()
	at := func(p string) string { return filepath.Join(root, p) }
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("rich tree: %v", err)
		}
	}
	data := make([]byte, 3<<20+123)
	rand.Read(data)
	long := strings.Repeat("n", 255)
	must(os.MkdirAll(at("usr/bin"), 0o755))
	must(os.MkdirAll(at("empty/deeper"), 0o700))
	must(os.MkdirAll(at("tmp"), 0o755))
	must(os.Chmod(at("tmp"), 0o1777|os.ModeSticky))
	must(os.WriteFile(at("usr/bin/tool"), data, 0o755))
	must(unix.Chmod(at("usr/bin/tool"), 0o4755)) // setuid
	must(os.Link(at("usr/bin/tool"), at("usr/bin/tool-alias")))
	must(os.Symlink("tool", at("usr/bin/link")))
	must(os.Symlink("/usr/bin/tool", at("absolute")))
	must(os.Symlink("/nowhere/at/all", at("dangling")))
	must(os.WriteFile(at("empty-file"), nil, 0o600))
	sparse, err := os.Create(at("sparse"))
	must(err)
	_, err = sparse.WriteAt([]byte("middle"), 5<<20)
	must(err)
	must(sparse.Truncate(9 << 20))
	must(sparse.Close())
	must(unix.Mkfifo(at("fifo"), 0o640))
	must(unix.Mknod(at("null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	must(unix.Mknod(at("whiteout"), unix.S_IFCHR, 0))
	must(os.WriteFile(at("owned"), []byte("x"), 0o640))
	must(os.Lchown(at("owned"), 1234, 5678))
	must(os.Lchown(at("dangling"), 42, 43))
	must(unix.Setxattr(at("owned"), "user.comment", []byte("hello"), 0))
	must(unix.Setxattr(at("empty"), "trusted.overlay.opaque", []byte("y"), 0))
	// cap_net_raw+ep: the kernel's vfs_cap_data, revision 2, effective.
	must(unix.Setxattr(at("usr/bin/tool"), "security.capability",
		[]byte{1, 0, 0, 2, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 0))
	must(os.WriteFile(at(long), []byte("long name"), 0o644))
	must(unix.Setxattr(root, "user.root", []byte("r"), 0))
	must(os.Chmod(root, 0o751))
	must(os.Lchown(root, 7, 8))
	for i, p := range []string{"usr/bin/tool", "owned", "empty", "sparse", long, "usr/bin", "usr", "."} {
		ts := time.Date(2001, 2, 3, 4, 5, 6, 123456789+i, time.UTC)
		must(os.Chtimes(at(p), ts, ts))
	}
	link := unix.NsecToTimespec(time.Date(1999, 1, 1, 0, 0, 0, 42, time.UTC).UnixNano())
	must(unix.UtimesNanoAt(unix.AT_FDCWD, at("dangling"), []unix.Timespec{link, link}, unix.AT_SYMLINK_NOFOLLOW))
	return []string{"usr", "usr/bin", "usr/bin/tool", "usr/bin/tool-alias", "usr/bin/link", "absolute", "dangling",
		"empty", "empty/deeper", "tmp", "empty-file", "sparse", "fifo", "null", "whiteout", "owned", long}
}
