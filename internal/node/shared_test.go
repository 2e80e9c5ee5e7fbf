package node

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/fstree"
	"github.com/slacker-dev/slacker/internal/mount"
	"github.com/slacker-dev/slacker/internal/store/local"
	"github.com/slacker-dev/slacker/internal/testutil"
)

// sharedImage makes an image snapshot on n holding a 16 MiB file, a small one and
// a directory of three, and returns it with the big file's content.
func sharedImage(t *testing.T, n *Node) (digest.Digest, []byte) {
	t.Helper()
	ctx := context.Background()
	blank, err := n.MakeFilesystem(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.CreateVolume(ctx, CreateOptions{ID: "build", Snapshot: blank.ID}); err != nil {
		t.Fatal(err)
	}
	v, err := n.MountVolume(ctx, "build", false)
	if err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 16<<20)
	rand.Read(big)
	for name, b := range map[string][]byte{"big": big, "etc/motd": []byte("welcome\n"),
		"dir/a": []byte("a"), "dir/b": []byte("b"), "dir/c": []byte("c")} {
		os.MkdirAll(filepath.Join(v.Mountpoint, filepath.Dir(name)), 0o755)
		if err := os.WriteFile(filepath.Join(v.Mountpoint, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.UnmountVolume(ctx, "build"); err != nil {
		t.Fatal(err)
	}
	img, err := n.SnapshotVolume(ctx, "build", SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.DeleteVolume(ctx, "build"); err != nil {
		t.Fatal(err)
	}
	return img.ID, big
}

// lowerOf returns the lowerdir of the overlay mounted at target.
func lowerOf(t *testing.T, target string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == target {
			for _, o := range strings.Split(line, ",") {
				if l, ok := strings.CutPrefix(o, "lowerdir="); ok {
					return l
				}
			}
		}
	}
	t.Fatalf("no overlay mounted at %s", target)
	return ""
}

// TestSharedRoots: two container roots of one image are overlays over one
// read-only mount of the image, the node's only one; each sees the image and only
// its own writes; the image's mount goes with the last of them. A node opened
// again (a restart) mounts both back over one image mount.
func TestSharedRoots(t *testing.T) {
	requirePrivileged(t)
	testutil.RequireOverlay(t)
	ctx := context.Background()
	dir := t.TempDir()
	st, err := local.Open(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	n := openNode(t, filepath.Join(dir, "node"), st)
	t.Cleanup(func() { n.Close(ctx) })
	img, big := sharedImage(t, n)

	var roots []VolumeInfo
	for _, id := range []string{"c1", "c2"} {
		if _, err := n.CreateVolume(ctx, CreateOptions{ID: id, Snapshot: img, Startup: true}); err != nil {
			t.Fatal(err)
		}
		v, err := n.MountVolume(ctx, id, false)
		if err != nil {
			t.Fatal(err)
		}
		if v.Mode != RootShared || v.Image != img {
			t.Fatalf("container root %s: mode %q image %s, want a shared root of %s", id, v.Mode, v.Image, img)
		}
		roots = append(roots, v)
	}
	imageVol, err := n.Volume(imageRootID(img))
	if err != nil {
		t.Fatalf("no image root: %v", err)
	}
	if !imageVol.ReadOnly || imageVol.Mountpoint == "" {
		t.Fatalf("image root: %+v, want mounted read-only", imageVol)
	}
	for _, r := range roots {
		if l := lowerOf(t, r.Mountpoint); l != imageVol.Mountpoint {
			t.Fatalf("%s: lower %q, want the image root %q", r.ID, l, imageVol.Mountpoint)
		}
		got, err := os.ReadFile(filepath.Join(r.Mountpoint, "big"))
		if err != nil || !bytes.Equal(got, big) {
			t.Fatalf("%s: big file: %v", r.ID, err)
		}
	}
	if err := os.WriteFile(filepath.Join(roots[0].Mountpoint, "etc/motd"), []byte("c1 was here\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(roots[1].Mountpoint, "etc/motd")); string(b) != "welcome\n" {
		t.Fatalf("c2 sees c1's write: %q", b)
	}
	if v, _ := n.Volume("c1"); v.Stats.DeltaBytes == 0 {
		t.Fatal("c1's upper layer is empty after a write")
	}

	// A restart: both come back, over one image mount, c1's write kept.
	if err := n.Close(ctx); err != nil {
		t.Fatal(err)
	}
	n = openNode(t, filepath.Join(dir, "node"), st)
	imageVol, err = n.Volume(imageRootID(img))
	if err != nil || imageVol.Mountpoint == "" {
		t.Fatalf("image root after the restart: %+v %v", imageVol, err)
	}
	for _, r := range roots {
		v, err := n.Volume(r.ID)
		if err != nil || v.Mountpoint == "" || lowerOf(t, v.Mountpoint) != imageVol.Mountpoint {
			t.Fatalf("%s after the restart: %+v %v", r.ID, v, err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(roots[0].Mountpoint, "etc/motd")); string(b) != "c1 was here\n" {
		t.Fatalf("c1's write after the restart: %q", b)
	}

	// The image mount stays while a container uses it, and goes with the last.
	if err := n.DeleteVolume(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Volume(imageRootID(img)); err != nil {
		t.Fatalf("image root gone while c2 uses it: %v", err)
	}
	if err := n.DeleteVolume(ctx, "c2"); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Volume(imageRootID(img)); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("image root after its last container: %v", err)
	}
	if vs := n.Volumes(); len(vs) != 0 {
		t.Fatalf("volumes left: %+v", vs)
	}
}

// TestSharedRootCommit: a container's changes in a shared root (a 1-byte change
// to a 16 MiB image file, a new file, a deletion, a new directory over a deleted
// one) become a snapshot that reads exactly as the container saw its root, and
// the 1-byte change uploads blocks, not the file. A root whose upper layer is gone
// cannot be committed, and says so.
func TestSharedRootCommit(t *testing.T) {
	requirePrivileged(t)
	testutil.RequireOverlay(t)
	ctx := context.Background()
	dir := t.TempDir()
	st, err := local.Open(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	n := openNode(t, filepath.Join(dir, "node"), st)
	t.Cleanup(func() { n.Close(ctx) })
	img, big := sharedImage(t, n)
	if _, err := n.CreateVolume(ctx, CreateOptions{ID: "c", Snapshot: img, Mode: RootShared}); err != nil {
		t.Fatal(err)
	}
	c, err := n.MountVolume(ctx, "c", false)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(c.Mountpoint, "big"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{^big[10<<20]}, 10<<20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.WriteFile(filepath.Join(c.Mountpoint, "new"), bytes.Repeat([]byte("n"), 100<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(c.Mountpoint, "etc/motd")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(c.Mountpoint, "dir")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(c.Mountpoint, "dir/sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	res, err := n.SnapshotVolume(ctx, "c", SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The change, the new file and ext4's metadata: far less than the 16 MiB file.
	if res.NewBytes > 2<<20 {
		t.Fatalf("commit uploaded %d bytes for a 1-byte change and a 100 KiB file", res.NewBytes)
	}
	if _, err := n.CreateVolume(ctx, CreateOptions{ID: "check", Snapshot: res.ID, Mode: RootBlock}); err != nil {
		t.Fatal(err)
	}
	check, err := n.MountVolume(ctx, "check", true)
	if err != nil {
		t.Fatal(err)
	}
	diffs, err := fstree.Compare(ctx, c.Mountpoint, check.Mountpoint, fstree.Options{Mtimes: true, IgnoreRoot: true,
		Ignore: []string{"lost+found"}, LabelA: "container", LabelB: "commit"})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range diffs {
		t.Error(d)
	}
	if err := n.DeleteVolume(ctx, "check"); err != nil {
		t.Fatal(err)
	}

	// Bad input: an unknown mode, and a root whose upper layer is gone.
	if _, err := n.CreateVolume(ctx, CreateOptions{ID: "x", Snapshot: img, Mode: "zfs"}); !errors.Is(err, errdefs.ErrInvalid) ||
		!strings.Contains(err.Error(), `unknown container root mode "zfs"`) {
		t.Fatalf("unknown mode: %v", err)
	}
	// A kernel without overlayfs: the message says what is missing and what to use.
	n.overlayOnce.Do(func() {})
	saved := n.overlayErr
	n.overlayErr = mount.ErrNoOverlay
	if _, err := n.CreateVolume(ctx, CreateOptions{ID: "x", Snapshot: img, Mode: RootShared}); !errors.Is(err, errdefs.ErrUnsupported) ||
		!strings.Contains(err.Error(), "overlayfs") || !strings.Contains(err.Error(), `"block"`) {
		t.Fatalf("shared root on a kernel without overlayfs: %v", err)
	}
	n.overlayErr = saved
	if err := n.UnmountVolume(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "node", "volumes", "c", "upper")); err != nil {
		t.Fatal(err)
	}
	if _, err := n.SnapshotVolume(ctx, "c", SnapshotOptions{}); !errors.Is(err, errdefs.ErrNotFound) ||
		!strings.Contains(err.Error(), "upper layer") {
		t.Fatalf("commit without an upper layer: %v", err)
	}
}

// TestTrimBeforeSnapshot: data written and deleted before a snapshot is not in it,
// whether the volume is snapshotted mounted or after an unmount (conversion layers).
func TestTrimBeforeSnapshot(t *testing.T) {
	requirePrivileged(t)
	ctx := context.Background()
	dir := t.TempDir()
	st, err := local.Open(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	n := openNode(t, filepath.Join(dir, "node"), st)
	t.Cleanup(func() { n.Close(ctx) })
	img, _ := sharedImage(t, n)
	for _, unmount := range []bool{false, true} {
		id := "mounted"
		if unmount {
			id = "unmounted"
		}
		if _, err := n.CreateVolume(ctx, CreateOptions{ID: id, Snapshot: img, Mode: RootBlock}); err != nil {
			t.Fatal(err)
		}
		v, err := n.MountVolume(ctx, id, false)
		if err != nil {
			t.Fatal(err)
		}
		junk := make([]byte, 50<<20)
		rand.Read(junk)
		p := filepath.Join(v.Mountpoint, "junk")
		if err := os.WriteFile(p, junk, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := syncPath(p); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		if unmount {
			if err := n.UnmountVolume(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
		res, err := n.SnapshotVolume(ctx, id, SnapshotOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if res.NewBytes > 4<<20 {
			t.Fatalf("%s: a snapshot after writing and deleting 50 MiB uploaded %d bytes", id, res.NewBytes)
		}
		if err := n.DeleteVolume(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
}

func syncPath(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// TestSharedRootParent: a shared root standing on another (Docker's container on
// its init layer) sees the image, its parent's changes and its own; a commit of it
// has all of them; the parent cannot go while the child stands on it; both come
// back after a restart.
func TestSharedRootParent(t *testing.T) {
	requirePrivileged(t)
	testutil.RequireOverlay(t)
	ctx := context.Background()
	dir := t.TempDir()
	st, err := local.Open(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	n := openNode(t, filepath.Join(dir, "node"), st)
	t.Cleanup(func() { n.Close(ctx) })
	img, _ := sharedImage(t, n)
	if _, err := n.CreateVolume(ctx, CreateOptions{ID: "init", Snapshot: img, Mode: RootShared}); err != nil {
		t.Fatal(err)
	}
	in, err := n.MountVolume(ctx, "init", false)
	if err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"etc/hostname": "init\n", "etc/motd": "from init\n"} {
		if err := os.WriteFile(filepath.Join(in.Mountpoint, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.UnmountVolume(ctx, "init"); err != nil {
		t.Fatal(err)
	}
	if _, err := n.CreateVolume(ctx, CreateOptions{ID: "c", Snapshot: img, Mode: RootShared, Parent: "init"}); err != nil {
		t.Fatal(err)
	}
	c, err := n.MountVolume(ctx, "c", false)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c.Mountpoint, "etc/motd"), []byte("from c\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	check := func(root string) {
		t.Helper()
		for name, want := range map[string]string{"etc/hostname": "init\n", "etc/motd": "from c\n", "dir/a": "a"} {
			if b, err := os.ReadFile(filepath.Join(root, name)); err != nil || string(b) != want {
				t.Fatalf("%s in %s: %q %v, want %q", name, root, b, err, want)
			}
		}
	}
	check(c.Mountpoint)
	if err := n.DeleteVolume(ctx, "init"); !errors.Is(err, errdefs.ErrBusy) {
		t.Fatalf("delete of a parent in use: %v", err)
	}
	if err := n.Close(ctx); err != nil {
		t.Fatal(err)
	}
	n = openNode(t, filepath.Join(dir, "node"), st)
	check(c.Mountpoint)
	res, err := n.SnapshotVolume(ctx, "c", SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.CreateVolume(ctx, CreateOptions{ID: "check", Snapshot: res.ID, Mode: RootShared}); err != nil {
		t.Fatal(err)
	}
	v, err := n.MountVolume(ctx, "check", true)
	if err != nil {
		t.Fatal(err)
	}
	check(v.Mountpoint)
	for _, id := range []string{"check", "c", "init"} {
		if err := n.DeleteVolume(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
}
