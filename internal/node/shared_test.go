package node

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"golang.org/x/sys/unix"

	"github.com/slacker-dev/slacker/internal/archive"
	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/fstree"
	"github.com/slacker-dev/slacker/internal/mount"
	"github.com/slacker-dev/slacker/internal/store/local"
	"github.com/slacker-dev/slacker/internal/testutil"
	"github.com/slacker-dev/slacker/internal/trace"
)

// buildImage makes an image snapshot on n: a blank filesystem that fill writes
// into (its root is the mounted clone's), snapshotted.
func buildImage(t *testing.T, n *Node, fill func(root string)) digest.Digest {
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
	fill(v.Mountpoint)
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
	return img.ID
}

// sharedImage makes an image snapshot on n holding a 16 MiB file, a small one and
// a directory of three, and returns it with the big file's content.
func sharedImage(t *testing.T, n *Node) (digest.Digest, []byte) {
	t.Helper()
	big := make([]byte, 16<<20)
	rand.Read(big)
	img := buildImage(t, n, func(root string) {
		for name, b := range map[string][]byte{"big": big, "etc/motd": []byte("welcome\n"),
			"dir/a": []byte("a"), "dir/b": []byte("b"), "dir/c": []byte("c")} {
			os.MkdirAll(filepath.Join(root, filepath.Dir(name)), 0o755)
			if err := os.WriteFile(filepath.Join(root, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	})
	return img, big
}

// startReadingBig makes a shared root id of img for a start, mounted, whose
// "container" reads the big file (sharedImage) whole: the start-up its image
// root records.
func startReadingBig(t *testing.T, n *Node, id string, img digest.Digest, big []byte) {
	t.Helper()
	ctx := context.Background()
	if _, err := n.CreateVolume(ctx, CreateOptions{ID: id, Snapshot: img, Mode: RootShared, Startup: true}); err != nil {
		t.Fatal(err)
	}
	v, err := n.MountVolume(ctx, id, false)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(v.Mountpoint, "big")); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("%s: the big file: %v", id, err)
	}
}

// waitTrace waits up to 10 s for the start-up trace of img in st and returns it.
func waitTrace(t *testing.T, st *local.Store, img digest.Digest) *trace.Trace {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		b, err := st.GetRef(context.Background(), trace.RefName(img))
		if err == nil {
			tr, err := trace.Decode(b)
			if err != nil {
				t.Fatal(err)
			}
			return tr
		}
		if time.Now().After(deadline) {
			t.Fatalf("no start-up trace of %s: %v", img, err)
		}
	}
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
	n, _ := newNode(t)
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

// TestLocalImage: when the last container of an image goes and every chunk of the
// image is on the node (a local store), the node writes the image into one local
// file, once the image root has been idle localImageSettle, and then unmounts the
// idle root without waiting for its linger to end; the next image root of it is
// read through that file by the kernel (FUSE passthrough): its files read right,
// and slackerd's reader of the image root sees none of those reads. Without local
// images, it keeps reading through slackerd.
func TestLocalImage(t *testing.T) {
	requirePrivileged(t)
	testutil.RequireOverlay(t)
	for _, tc := range []struct {
		name   string
		format LocalImageFormat
		off    bool
		// copyErr makes the tree copy fail: an image it refuses (ErrUnsupported)
		// is written in ext4 instead; on any other failure none is written.
		copyErr error
		lower   string // what the second root's image is: "tree", or a filesystem type
	}{
		{name: "tree", format: LocalTree, lower: "tree"},
		{name: "default", lower: "tree"},
		{name: "ext4", format: LocalExt4, lower: "ext4"},
		{name: "tree-refused", format: LocalTree, copyErr: errdefs.Errorf(errdefs.ErrUnsupported, "copy: refused"), lower: "ext4"},
		{name: "tree-breaks", format: LocalTree, copyErr: errors.New("copy: broke"), lower: "ext4"},
		{name: "off", off: true, lower: "ext4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			off := tc.off
			// broken: the tree copy fails for a reason other than the image (a disk
			// error, a chunk that does not verify): no local image is written.
			broken := tc.copyErr != nil && !errors.Is(tc.copyErr, errdefs.ErrUnsupported)
			var copies atomic.Int32
			if tc.copyErr != nil {
				saved := copyTree
				copyTree = func(context.Context, string, string) (archive.Stats, error) {
					copies.Add(1)
					return archive.Stats{}, tc.copyErr
				}
				t.Cleanup(func() { copyTree = saved })
			}
			ctx := context.Background()
			n, _ := openLocalImageNode(t, t.TempDir(), Config{LocalImageBytes: map[bool]int64{false: 1 << 30, true: 0}[off],
				LocalImageFormat: tc.format, ImageRootLinger: map[bool]time.Duration{false: time.Hour, true: 0}[off]})
			img, big := sharedImage(t, n)
			run := func(id string) (VolumeStats, string) {
				t.Helper()
				if _, err := n.CreateVolume(ctx, CreateOptions{ID: id, Snapshot: img, Mode: RootShared}); err != nil {
					t.Fatal(err)
				}
				v, err := n.MountVolume(ctx, id, false)
				if err != nil {
					t.Fatal(err)
				}
				if err := dropCaches(); err != nil {
					t.Fatal(err)
				}
				if got, err := os.ReadFile(filepath.Join(v.Mountpoint, "big")); err != nil || !bytes.Equal(got, big) {
					t.Fatalf("%s: the big file: %v", id, err)
				}
				if err := readDirect(filepath.Join(v.Mountpoint, "big"), big); err != nil { // as databases and fio do
					t.Fatalf("%s: %v", id, err)
				}
				info, err := n.Volume(id)
				if err != nil {
					t.Fatal(err)
				}
				lower := rootKind(t, info.Lowers[len(info.Lowers)-1])
				if err := n.DeleteVolume(ctx, id); err != nil {
					t.Fatal(err)
				}
				return info.Stats, lower
			}
			if st, lower := run("first"); st.BaseReadBytes < int64(len(big)) || lower != "ext4" {
				t.Fatalf("the first root read %d bytes of its image through slackerd (want the file's %d), from %s (want ext4)",
					st.BaseReadBytes, len(big), lower)
			}
			// The image's chunks are all in the local store: its local image is written.
			// Count is the file, there once renamed; Writing ends a moment later.
			written := func() bool { li := n.Stats().LocalImages; return li.Count > 0 && li.Writing == 0 }
			if broken {
				written = func() bool { return copies.Load() > 0 && n.Stats().LocalImages.Writing == 0 }
			}
			for deadline := time.Now().Add(20 * time.Second); !off && !written(); time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("no local image written (nor, for a broken copy, tried)")
				}
			}
			if broken {
				off = true // from here on, as without local images
			}
			if li := n.Stats().LocalImages; !off && (li.Count != 1 || li.Bytes < int64(len(big)) || li.Writing != 0) {
				t.Fatalf("local images %+v; want the image's, written", li)
			}
			// The idle root went when its local image was written, an hour before its linger's end.
			for deadline := time.Now().Add(20 * time.Second); !off; time.Sleep(20 * time.Millisecond) {
				if _, err := n.Volume(imageRootID(img)); errors.Is(err, errdefs.ErrNotFound) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the idle image root is still mounted after its local image was written")
				}
			}
			// The clone a tree was copied from is gone with the write.
			if _, err := n.Volume(localImageVolumeID(img)); !errors.Is(err, errdefs.ErrNotFound) {
				t.Fatalf("the clone of the local image's copy: %v; want it gone", err)
			}
			second, lower := run("second")
			if !off && second.BaseReadBytes != 0 {
				t.Fatalf("the second root read %d bytes through slackerd; want none (its local image, read by the kernel)", second.BaseReadBytes)
			}
			if lower != tc.lower {
				t.Fatalf("the second root's image is %s; want %s", lower, tc.lower)
			}
			if off && (second.BaseReadBytes == 0 || n.Stats().LocalImages.Count != 0) {
				t.Fatalf("local images off: %d bytes read through slackerd, local images %+v", second.BaseReadBytes, n.Stats().LocalImages)
			}
			if !off {
				// Dropped with the disk tier when no image root reads it.
				n.DropCaches(ctx, true)
				if li := n.Stats().LocalImages; li.Count != 0 {
					t.Fatalf("after DropCaches(true): local images %+v", li)
				}
			}
		})
	}
}

// openLocalImageNode opens a node in dir/node on a new local store in dir/store,
// as the tests of local images want it: cfg's settings, on a cache of 256 MiB in
// memory and volumes of 1 GiB, and a local image tried once its image root has
// been idle 50 ms. It is closed with the test.
func openLocalImageNode(t *testing.T, dir string, cfg Config) (*Node, *local.Store) {
	t.Helper()
	st, err := local.Open(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	settle := localImageSettle
	localImageSettle = 50 * time.Millisecond
	t.Cleanup(func() { localImageSettle = settle })
	cfg.Root, cfg.Store, cfg.CacheBytes, cfg.CacheNoDisk, cfg.DefaultSize = filepath.Join(dir, "node"), st, 256<<20, true, 1<<30
	if cfg.Logger == nil {
		cfg.Logger = testLogger()
	}
	n, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close(context.Background()) })
	return n, st
}

// readDirect reads a few 4 KiB blocks of the file at path with O_DIRECT and
// compares them with want, its content.
func readDirect(path string, want []byte) error {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		return fmt.Errorf("open with O_DIRECT: %w", err)
	}
	defer f.Close()
	buf, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE) // aligned
	if err != nil {
		return err
	}
	defer unix.Munmap(buf)
	for _, off := range []int64{0, 4096, int64(len(want)) / 2 / 4096 * 4096, int64(len(want)) - 4096} {
		if _, err := f.ReadAt(buf, off); err != nil {
			return fmt.Errorf("O_DIRECT read at %d: %w", off, err)
		}
		if !bytes.Equal(buf, want[off:off+4096]) {
			return fmt.Errorf("O_DIRECT read at %d: wrong bytes", off)
		}
	}
	return nil
}

// rootKind says what the image root at dir is: "tree" if nothing is mounted
// there (a local image's directory), else the mounted filesystem's type.
func rootKind(t *testing.T, dir string) string {
	t.Helper()
	ms, err := mount.Mounts(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Target == dir {
			return m.FSType
		}
	}
	return "tree"
}

// TestTreeLocalImage: an image's local image in LocalTree holds the image's tree
// exactly as the image root reads it through slackerd: contents, owners, modes
// with their special bits, times to the nanosecond, xattrs of every namespace, hard
// links, symlinks, fifos, devices, lost+found and the root's own metadata; a
// container on it sees what a container on the ext4 root sees.
func TestTreeLocalImage(t *testing.T) {
	requirePrivileged(t)
	testutil.RequireOverlay(t)
	ctx := context.Background()
	dir := t.TempDir()
	n, _ := openLocalImageNode(t, dir, Config{LocalImageBytes: 1 << 30, ImageRootLinger: time.Hour})
	img := richImage(t, n)
	if _, err := n.CreateVolume(ctx, CreateOptions{ID: "first", Snapshot: img, Mode: RootShared}); err != nil {
		t.Fatal(err)
	}
	first, err := n.MountVolume(ctx, "first", true)
	if err != nil {
		t.Fatal(err)
	}
	// A container's view of the image through slackerd, to compare with one on the tree.
	view := filepath.Join(dir, "view")
	if err := os.Mkdir(view, 0o755); err != nil {
		t.Fatal(err)
	}
	viewOpts := fstree.Options{Mtimes: true, DirMtimes: true, IgnoreRoot: true, Xattrs: []string{"user.", "security."}}
	viewOf := func(root string) *fstree.Tree {
		t.Helper()
		tr, err := fstree.Walk(ctx, root, viewOpts)
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	firstView := viewOf(first.Mountpoint)
	if err := n.DeleteVolume(ctx, "first"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if li := n.Stats().LocalImages; li.Count == 1 && li.Writing == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no local image written: %+v", n.Stats().LocalImages)
		}
	}
	if _, err := n.CreateVolume(ctx, CreateOptions{ID: "second", Snapshot: img, Mode: RootShared}); err != nil {
		t.Fatal(err)
	}
	second, err := n.MountVolume(ctx, "second", true)
	if err != nil {
		t.Fatal(err)
	}
	lower := second.Lowers[len(second.Lowers)-1]
	if got := rootKind(t, lower); got != "tree" {
		t.Fatalf("the second root stands on %s; want the local image's tree", got)
	}
	// The image as a block clone reads it, through slackerd.
	if _, err := n.CreateVolume(ctx, CreateOptions{ID: "check", Snapshot: img, Mode: RootBlock}); err != nil {
		t.Fatal(err)
	}
	check, err := n.MountVolume(ctx, "check", true)
	if err != nil {
		t.Fatal(err)
	}
	opts := fstree.Options{Mtimes: true, DirMtimes: true, Xattrs: []string{"user.", "trusted.", "security."},
		LabelA: "tree", LabelB: "ext4"}
	diffs, err := fstree.Compare(ctx, lower, check.Mountpoint, opts)
	if err != nil {
		t.Fatal(err)
	}
	viewOpts.LabelA, viewOpts.LabelB = "container on the tree", "container through slackerd"
	diffs = append(diffs, fstree.Diff(viewOf(second.Mountpoint), firstView, viewOpts)...)
	for _, d := range diffs {
		t.Error(d)
	}
	for _, id := range []string{"check", "second"} {
		if err := n.DeleteVolume(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
}

// richImage makes an image snapshot on n holding one of each kind of file and
// metadata an image carries (testutil.RichTree).
func richImage(t *testing.T, n *Node) digest.Digest {
	t.Helper()
	return buildImage(t, n, func(root string) { testutil.RichTree(t, root) })
}

// dropCaches empties the page cache, so that reads reach the image root's device.
func dropCaches() error {
	unix.Sync()
	return os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0o200)
}

// TestLocalImageCorruptChunk: a chunk of a file damaged in the local store after
// the image was read is caught when the local image is written, in either format,
// and no local image is left: the kernel never serves bytes that did not pass
// their digest.
func TestLocalImageCorruptChunk(t *testing.T) {
	requirePrivileged(t)
	testutil.RequireOverlay(t)
	for _, format := range []LocalImageFormat{LocalTree, LocalExt4} {
		t.Run(string(format), func(t *testing.T) {
			ctx := context.Background()
			n, st := openLocalImageNode(t, t.TempDir(), Config{LocalImageBytes: 1 << 30, LocalImageFormat: format})
			img, big := sharedImage(t, n)
			if _, err := n.CreateVolume(ctx, CreateOptions{ID: "c", Snapshot: img, Mode: RootShared}); err != nil {
				t.Fatal(err)
			}
			v, err := n.MountVolume(ctx, "c", false)
			if err != nil {
				t.Fatal(err)
			}
			if got, err := os.ReadFile(filepath.Join(v.Mountpoint, "big")); err != nil || !bytes.Equal(got, big) {
				t.Fatalf("the big file: %v", err)
			}
			m, err := n.Map(ctx, img)
			if err != nil {
				t.Fatal(err)
			}
			// Flip a byte in the middle of a chunk of the big file, in its object file.
			var path string
			var off int64
			for _, c := range m.Chunks {
				obj, err := os.ReadFile(st.ObjectFile(c.Digest))
				if err != nil {
					t.Fatal(err)
				}
				if mid := c.Size / 2; c.Size >= 64<<10 && bytes.Contains(big, obj[mid-32:mid+32]) {
					path, off = st.ObjectFile(c.Digest), mid
					break
				}
			}
			if path == "" {
				t.Fatal("no chunk of the big file in the map")
			}
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			b := []byte{0}
			if _, err := f.ReadAt(b, off); err != nil {
				t.Fatal(err)
			}
			b[0] ^= 0xff
			if _, err := f.WriteAt(b, off); err != nil {
				t.Fatal(err)
			}
			f.Close()
			if err := n.DeleteVolume(ctx, "c"); err != nil { // the image's last root: a local image is tried
				t.Fatal(err)
			}
			for deadline := time.Now().Add(20 * time.Second); n.Stats().LocalImages.Writing != 0; time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the local image is still being written")
				}
			}
			if li := n.Stats().LocalImages; li.Count != 0 {
				t.Fatalf("local images %+v after a corrupt chunk; want none", li)
			}
			// A tree is copied through the image's ext4, read by the block:
			// the block's checksum caught it (ext4 reads the chunk whole).
			if c := n.Stats().Cache; format == LocalTree && c.SumMismatches == 0 {
				t.Fatalf("cache %+v: the damaged block was not caught by its checksum", c)
			}
		})
	}
}

// TestLocalImageLimit: local images stay under Config.LocalImageBytes: a new one
// evicts the least recently used that no image root reads, and is not written
// when only images in use could make room.
func TestLocalImageLimit(t *testing.T) {
	requirePrivileged(t)
	testutil.RequireOverlay(t)
	ctx := context.Background()
	dir := t.TempDir()
	st, err := local.Open(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	n, err := Open(ctx, Config{Root: filepath.Join(dir, "node"), Store: st, CacheBytes: 256 << 20, CacheNoDisk: true,
		DefaultSize: 1 << 30, LocalImageBytes: 24 << 20}) // room for one image of 16 MiB
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close(ctx) })
	a, _ := sharedImage(t, n)
	b, _ := sharedImage(t, n)
	start := func(id string, img digest.Digest) {
		t.Helper()
		if _, err := n.CreateVolume(ctx, CreateOptions{ID: id, Snapshot: img, Mode: RootShared}); err != nil {
			t.Fatal(err)
		}
		if _, err := n.MountVolume(ctx, id, false); err != nil {
			t.Fatal(err)
		}
	}
	stop := func(id string) {
		t.Helper()
		if err := n.DeleteVolume(ctx, id); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(20 * time.Second); n.Stats().LocalImages.Writing != 0; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("a local image is still being written")
			}
		}
	}
	has := func(img digest.Digest) bool { return n.local.has(img) }
	start("a1", a)
	stop("a1")
	if !has(a) {
		t.Fatal("no local image of a")
	}
	start("b1", b)
	stop("b1")
	if has(a) || !has(b) {
		t.Fatalf("after b: local image of a %v, of b %v; want b's only (a's evicted)", has(a), has(b))
	}
	// b's local image in use by a root: a's cannot evict it.
	start("b2", b)
	start("a2", a)
	stop("a2")
	if has(a) || !has(b) {
		t.Fatalf("with b in use: local image of a %v, of b %v; want b's only", has(a), has(b))
	}
	if li := n.Stats().LocalImages; li.Count != 1 || li.InUse != 1 || li.Bytes > 24<<20 {
		t.Fatalf("local images %+v", li)
	}
	stop("b2")
}

// TestImageRootLinger: an image root outlives its last container for
// Config.ImageRootLinger: the image's next container stands on the same mount
// (its page cache kept), and it goes when the linger ends, on DropCaches, or when
// the node closes.
func TestImageRootLinger(t *testing.T) {
	requirePrivileged(t)
	testutil.RequireOverlay(t)
	ctx := context.Background()
	dir := t.TempDir()
	st, err := local.Open(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	const linger = 2 * time.Second
	n, err := Open(ctx, Config{Root: filepath.Join(dir, "node"), Store: st, CacheBytes: 256 << 20, CacheNoDisk: true,
		DefaultSize: 1 << 30, ImageRootLinger: linger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close(ctx) })
	img, big := sharedImage(t, n)
	root := imageRootID(img)
	use := func(id string) {
		t.Helper()
		if _, err := n.CreateVolume(ctx, CreateOptions{ID: id, Snapshot: img, Mode: RootShared}); err != nil {
			t.Fatal(err)
		}
		v, err := n.MountVolume(ctx, id, false)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := os.ReadFile(filepath.Join(v.Mountpoint, "big")); err != nil || !bytes.Equal(got, big) {
			t.Fatalf("%s: the big file: %v", id, err)
		}
		if err := n.DeleteVolume(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	mounted := func() (VolumeInfo, bool) {
		info, err := n.Volume(root)
		return info, err == nil && info.Mountpoint != ""
	}
	use("first")
	first, ok := mounted()
	if !ok {
		t.Fatal("the image root went with its last container; want it to linger")
	}
	read := first.Stats.BaseReadBytes
	use("second") // within the linger: the same mount, its page cache warm
	second, ok := mounted()
	if !ok || second.Created != first.Created || second.Mountpoint != first.Mountpoint {
		t.Fatalf("the second container's image root %+v; want the first's %+v, still mounted", second, first)
	}
	if again := second.Stats.BaseReadBytes - read; again >= int64(len(big)) {
		t.Fatalf("the second container read %d bytes of the image through slackerd; want the page cache's", again)
	}
	// The linger ends: the root goes.
	for deadline := time.Now().Add(linger + 10*time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := n.Volume(root); errors.Is(err, errdefs.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the image root is still there %v after its linger of %v", linger+10*time.Second, linger)
		}
	}
	// DropCaches unmounts an idle root at once; a root in use stays.
	use("third")
	if _, ok := mounted(); !ok {
		t.Fatal("no lingering root after the third container")
	}
	n.DropCaches(ctx, false)
	if _, err := n.Volume(root); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("after DropCaches, the idle image root: %v; want it gone", err)
	}
	if _, err := n.CreateVolume(ctx, CreateOptions{ID: "busy", Snapshot: img, Mode: RootShared}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.MountVolume(ctx, "busy", false); err != nil {
		t.Fatal(err)
	}
	n.DropCaches(ctx, true)
	if _, ok := mounted(); !ok {
		t.Fatal("DropCaches unmounted an image root a container uses")
	}
	if err := n.DeleteVolume(ctx, "busy"); err != nil {
		t.Fatal(err)
	}
	// A lingering root goes when the node closes, and is not there when it opens.
	if _, ok := mounted(); !ok {
		t.Fatal("no lingering root before the close")
	}
	if err := n.Close(ctx); err != nil {
		t.Fatal(err)
	}
	n2, err := Open(ctx, Config{Root: filepath.Join(dir, "node"), Store: st, CacheBytes: 256 << 20, CacheNoDisk: true,
		DefaultSize: 1 << 30, ImageRootLinger: linger})
	if err != nil {
		t.Fatal(err)
	}
	defer n2.Close(ctx)
	if _, err := n2.Volume(root); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("after a restart, the image root no container used: %v; want it gone", err)
	}
}

// TestLingeringRootWritesItsTrace: the start-up trace of a shared root's image is
// written when its last container goes, though the image root lingers and the
// start-up window has most of an hour to run; a node closed afterwards has it in
// the store, and the next node's container replays it.
func TestLingeringRootWritesItsTrace(t *testing.T) {
	requirePrivileged(t)
	testutil.RequireOverlay(t)
	ctx := context.Background()
	dir := t.TempDir()
	st, err := local.Open(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	open := func(name string) *Node {
		n, err := Open(ctx, Config{Root: filepath.Join(dir, name), Store: st, CacheBytes: 256 << 20,
			DefaultSize: 1 << 30, ImageRootLinger: time.Hour, StartupWindow: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close(ctx) })
		return n
	}
	n := open("node1")
	img, big := sharedImage(t, n)
	startReadingBig(t, n, "c1", img, big)
	if err := n.DeleteVolume(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	if vi, err := n.Volume(imageRootID(img)); err != nil || !vi.Idle {
		t.Fatalf("the image root after its last container: %+v %v; want it lingering, idle", vi, err)
	}
	tr := waitTrace(t, st, img) // while the image root lingers
	if tr.Bytes() < int64(len(big)) {
		t.Fatalf("trace of %d bytes; want at least the big file's %d", tr.Bytes(), len(big))
	}
	// And the file it read, whole, opened through the container's overlay.
	if len(tr.Files) != 1 || tr.Files[0].Path != "/big" || len(tr.Files[0].Ranges) == 0 ||
		tr.Files[0].Ranges[0][0] != 0 || tr.Files[0].Ranges[len(tr.Files[0].Ranges)-1][1] < int64(len(big)) {
		t.Fatalf("the trace's files %+v; want /big, all of it", tr.Files)
	}
	if err := n.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// The next node's image root, before its container reads anything, has the
	// file in its page cache: warmed from the trace.
	n2 := open("node2")
	if _, err := n2.CreateVolume(ctx, CreateOptions{ID: "c2", Snapshot: img, Mode: RootShared, Startup: true}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); n2.Stats().Prefetch.TracesReplayed == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the next node's container replayed no trace: %+v", n2.Stats().Prefetch)
		}
	}
	root, err := n2.Volume(imageRootID(img))
	if err != nil {
		t.Fatal(err)
	}
	pages := (len(big) + 4095) / 4096
	for deadline := time.Now().Add(10 * time.Second); testutil.ResidentPages(t, filepath.Join(root.Mountpoint, "big"), 0, -1) < pages; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of the big file's %d pages in the image root's page cache; want all, warmed from the trace",
				testutil.ResidentPages(t, filepath.Join(root.Mountpoint, "big"), 0, -1), pages)
		}
	}
}
