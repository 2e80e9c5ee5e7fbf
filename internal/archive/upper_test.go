package archive_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/slacker-dev/slacker/internal/archive"
	"github.com/slacker-dev/slacker/internal/fstree"
	"github.com/slacker-dev/slacker/internal/mount"
	"github.com/slacker-dev/slacker/internal/testutil"
)

// TestCommitOverlayUpper is a shared-root commit in small: a tree (the image),
// an overlay over it where a "container" makes every kind of change, then the
// overlay's upper layer written as a layer (UpperChanges, WriteChanges) and
// applied in place onto a copy of the image. The copy must equal what the
// container saw, file by file with metadata, and a 1-byte change to a 4 MiB file
// must rewrite one 4 KiB block of the same inode, not the file.
func TestCommitOverlayUpper(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireOverlay(t)
	ctx := context.Background()
	dir := t.TempDir()
	lower, upper, work, merged := filepath.Join(dir, "lower"), filepath.Join(dir, "upper"), filepath.Join(dir, "work"), filepath.Join(dir, "merged")
	for _, d := range []string{lower, upper, work, merged} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	big := make([]byte, 4<<20)
	rand.Read(big)
	write := func(root, p string, b []byte, mode os.FileMode) {
		t.Helper()
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, b, mode); err != nil {
			t.Fatal(err)
		}
	}
	// The image.
	write(lower, "usr/lib/big", big, 0o644)
	write(lower, "etc/motd", []byte("welcome\n"), 0o644)
	write(lower, "etc/gone", []byte("deleted by the container\n"), 0o644)
	write(lower, "etc/mode", []byte("chmod me\n"), 0o644)
	write(lower, "opaque/old1", []byte("old"), 0o644)
	write(lower, "opaque/sub/old2", []byte("old"), 0o644)
	write(lower, "shared/a", []byte("linked"), 0o644)
	if err := os.Link(filepath.Join(lower, "shared/a"), filepath.Join(lower, "shared/b")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("motd", filepath.Join(lower, "etc/link")); err != nil {
		t.Fatal(err)
	}
	clone := filepath.Join(dir, "clone")
	if out, err := exec.Command("cp", "-a", lower, clone).CombinedOutput(); err != nil {
		t.Fatalf("cp -a: %v: %s", err, out)
	}
	var before unix.Stat_t
	if err := unix.Stat(filepath.Join(clone, "usr/lib/big"), &before); err != nil {
		t.Fatal(err)
	}

	// The container's changes, through the overlay.
	if err := mount.MountOverlay(mount.OverlaySpec{Lower: []string{lower}, Upper: upper, Work: work}, merged); err != nil {
		t.Fatal(err)
	}
	mounted := true
	t.Cleanup(func() {
		if mounted {
			unix.Unmount(merged, unix.MNT_DETACH)
		}
	})
	f, err := os.OpenFile(filepath.Join(merged, "usr/lib/big"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{big[3<<20+17] ^ 0xff}, 3<<20+17); err != nil {
		t.Fatal(err)
	}
	f.Close()
	for _, step := range []func() error{
		func() error {
			return os.WriteFile(filepath.Join(merged, "etc/motd"), []byte("changed, and longer than before\n"), 0o644)
		},
		func() error { return os.Remove(filepath.Join(merged, "etc/gone")) },
		func() error { return os.Chmod(filepath.Join(merged, "etc/mode"), 0o600) },
		func() error { return os.Chown(filepath.Join(merged, "etc/mode"), 1000, 1000) },
		func() error { return os.RemoveAll(filepath.Join(merged, "opaque")) },
		func() error { return os.MkdirAll(filepath.Join(merged, "opaque/new"), 0o750) },
		func() error { return os.WriteFile(filepath.Join(merged, "opaque/new/file"), []byte("new"), 0o600) },
		func() error {
			return os.WriteFile(filepath.Join(merged, "shared/a"), []byte("one name changed"), 0o644)
		},
		func() error { return os.Mkdir(filepath.Join(merged, "var"), 0o700) },
		func() error {
			return os.WriteFile(filepath.Join(merged, "var/data"), bytes.Repeat([]byte{0}, 64<<10), 0o644)
		},
		func() error { return os.Link(filepath.Join(merged, "var/data"), filepath.Join(merged, "var/data2")) },
		func() error { return os.Symlink("../etc/motd", filepath.Join(merged, "var/motd")) },
		func() error { return unix.Setxattr(filepath.Join(merged, "etc/motd"), "user.note", []byte("kept"), 0) },
		func() error { return unix.Mkfifo(filepath.Join(merged, "var/fifo"), 0o600) },
		func() error {
			return unix.Mknod(filepath.Join(merged, "var/null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3)))
		},
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	// What the container saw, kept to compare with (a second overlay, read-only,
	// after the first is gone).
	if err := unix.Unmount(merged, 0); err != nil {
		t.Fatal(err)
	}
	mounted = false

	cs, err := archive.UpperChanges(ctx, upper)
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	go func() {
		pw.CloseWithError(archive.WriteChanges(ctx, pw, upper, cs, archive.WriteOptions{Xattrs: archive.OverlayXattrs}))
	}()
	st, err := archive.Apply(ctx, clone, pr, archive.Options{AllowDevices: true, InPlace: true})
	if err != nil {
		t.Fatal(err)
	}
	if st.Whiteouts != 1 || st.Opaques != 1 {
		t.Errorf("applied %d whiteouts and %d opaque directories, want 1 and 1 (%+v)", st.Whiteouts, st.Opaques, st)
	}
	// The 4 MiB file: one block rewritten, same inode.
	var after unix.Stat_t
	if err := unix.Stat(filepath.Join(clone, "usr/lib/big"), &after); err != nil {
		t.Fatal(err)
	}
	if after.Ino != before.Ino {
		t.Errorf("the big file was replaced (inode %d -> %d), not rewritten in place", before.Ino, after.Ino)
	}
	// Besides that block, motd's one block changed; etc/mode's change is metadata only.
	if st.RewrittenBytes > 2*4096 {
		t.Errorf("rewrote %d bytes in place; want the one block of the 1-byte change and motd's block", st.RewrittenBytes)
	}

	view := filepath.Join(dir, "view")
	if err := mount.MountOverlay(mount.OverlaySpec{Lower: []string{upper, lower}}, view); err == nil {
		t.Fatal("an overlay without an upper directory mounted")
	}
	if err := os.MkdirAll(view, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("overlay", view, "overlay", unix.MS_RDONLY, "lowerdir="+upper+":"+lower); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(view, unix.MNT_DETACH) })
	diffs, err := fstree.Compare(ctx, view, clone, fstree.Options{Xattrs: []string{"user."}, Mtimes: true, IgnoreRoot: true,
		LabelA: "container", LabelB: "commit"})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range diffs {
		t.Error(d)
	}
}
