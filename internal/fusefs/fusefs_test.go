package fusefs_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/slacker-dev/slacker/internal/blockmap"
	"github.com/slacker-dev/slacker/internal/cache"
	"github.com/slacker-dev/slacker/internal/fetch"
	"github.com/slacker-dev/slacker/internal/fusefs"
	"github.com/slacker-dev/slacker/internal/mount"
	"github.com/slacker-dev/slacker/internal/prefetch"
	"github.com/slacker-dev/slacker/internal/store"
	"github.com/slacker-dev/slacker/internal/store/local"
	"github.com/slacker-dev/slacker/internal/testutil"
	"github.com/slacker-dev/slacker/internal/volume"
)

// TestExt4OnLoopOnFUSE writes files into ext4 on a loop device on a FUSE-served
// volume, snapshots it, clones the snapshot, and reads the files back.
func TestExt4OnLoopOnFUSE(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireFile(t, "/dev/fuse")
	testutil.RequireFile(t, "/dev/loop-control")
	testutil.RequireTool(t, "mkfs.ext4", "e2fsck")
	ctx := context.Background()
	dir := t.TempDir()
	st, err := local.Open(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := cache.Open(cache.Options{Dir: filepath.Join(dir, "cache"), MaxBytes: 256 << 20}, fetch.New(st, fetch.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	engine := prefetch.New(c, prefetch.Options{})
	t.Cleanup(func() { engine.Close(context.Background()) })
	fsys, err := fusefs.Mount(filepath.Join(dir, "fuse"), fusefs.Options{
		Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)),
		Debug:  os.Getenv("FUSEDEBUG") != "",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := fsys.Unmount(); err != nil {
			t.Error(err)
		}
	})
	os.Mkdir(filepath.Join(dir, "vols"), 0o700)
	const size = 512 << 20

	attachAndMount := func(t *testing.T, name string, v *volume.Volume) (string, func()) {
		file, err := fsys.Add(name, v, fusefs.FileOptions{})
		if err != nil {
			t.Fatal(err)
		}
		loop, err := mount.AttachLoop(file, mount.LoopOptions{DirectIO: os.Getenv("NODIO") == "", Autoclear: true})
		if err != nil {
			t.Fatal(err)
		}
		dev := loop.Path
		mnt := filepath.Join(dir, "mnt-"+name)
		err = mount.MountExt4(dev, mnt, false, "")
		loop.Close()
		if err != nil {
			t.Fatal(err)
		}
		done := false
		cleanup := func() {
			if done {
				return
			}
			done = true
			if _, err := mount.Unmount(mnt, 5*time.Second); err != nil {
				t.Error(err)
			}
			waitDetached(t, file) // autoclear detaches the device
			if out, err := mount.Fsck(ctx, file); err != nil {
				t.Errorf("%v\n%s", err, out)
			}
			fsys.Remove(name)
		}
		t.Cleanup(cleanup)
		return mnt, cleanup
	}

	blank, err := volume.Create(filepath.Join(dir, "vols", "blank"), "", nil, size, nil)
	if err != nil {
		t.Fatal(err)
	}
	file, err := fsys.Add("blank", blank, fusefs.FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := mount.Mkfs(ctx, file, mount.MkfsOptions{}); err != nil {
		t.Fatal(err)
	}
	fsys.Remove("blank")
	empty, err := blank.Snapshot(ctx, st, volume.SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("empty ext4 of %d MiB: %d bytes of data in %d chunks, map %d bytes",
		size>>20, empty.Map.DataSize(), len(empty.Map.Chunks), empty.EncodedMapLen)

	// Clone, write files, snapshot.
	a, err := volume.Create(filepath.Join(dir, "vols", "a"), empty.ID, empty.Map, size, engine.Open("test", empty.Map))
	if err != nil {
		t.Fatal(err)
	}
	mntA, doneA := attachAndMount(t, "a", a)
	files := map[string][]byte{}
	for i, n := range []int{0, 1, 4095, 4096, 100000, 3 << 20} {
		b := make([]byte, n)
		rand.Read(b)
		name := filepath.Join("d", string(rune('a'+i)))
		os.MkdirAll(filepath.Join(mntA, "d"), 0o755)
		if err := os.WriteFile(filepath.Join(mntA, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
		files[name] = b
	}
	if err := os.Symlink("d/a", filepath.Join(mntA, "link")); err != nil {
		t.Fatal(err)
	}
	doneA()
	snapA, err := a.Snapshot(ctx, st, volume.SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("snapshot after writing files: %d bytes examined, %d uploaded in %d chunks", snapA.DeltaBytes, snapA.NewBytes, snapA.NewChunks)

	// Clone that snapshot (on a cold cache) and read the files back.
	b, err := volume.Create(filepath.Join(dir, "vols", "b"), snapA.ID, snapA.Map, size, engine.Open("test", snapA.Map))
	if err != nil {
		t.Fatal(err)
	}
	mntB, _ := attachAndMount(t, "b", b)
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(mntB, name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s differs after snapshot and clone", name)
		}
	}
	if target, err := os.Readlink(filepath.Join(mntB, "link")); err != nil || target != "d/a" {
		t.Fatalf("symlink: %q, %v", target, err)
	}
	if ok, _ := store.Exists(ctx, st, snapA.ID); !ok {
		t.Fatal("snapshot map not in the store")
	}
	_ = blockmap.BlockSize
}

// waitDetached waits until no loop device uses file (autoclear runs asynchronously).
func waitDetached(t *testing.T, file string) {
	for i := 0; i < 100; i++ {
		loops, _ := mount.ListLoops()
		busy := false
		for _, l := range loops {
			if l.BackingFile == file {
				busy = true
			}
		}
		if !busy {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Errorf("loop device still attached to %s", file)
}

// TestConcurrentDirectIOThroughLoop submits many O_DIRECT 4 KiB writes and reads at
// once to a loop device (direct I/O) on a clone of a snapshot: with async direct I/O
// the loop device passes them to the volume concurrently, including copy-on-write
// of neighbouring blocks of one chunk. Every block must read back as written last,
// through the loop device and from the volume itself.
func TestConcurrentDirectIOThroughLoop(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireFile(t, "/dev/fuse")
	testutil.RequireFile(t, "/dev/loop-control")
	ctx := context.Background()
	dir := t.TempDir()
	st, err := local.Open(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := cache.Open(cache.Options{Dir: filepath.Join(dir, "cache"), MaxBytes: 64 << 20}, fetch.New(st, fetch.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	engine := prefetch.New(c, prefetch.Options{})
	t.Cleanup(func() { engine.Close(context.Background()) })
	fsys, err := fusefs.Mount(filepath.Join(dir, "fuse"), fusefs.Options{
		Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := fsys.Unmount(); err != nil {
			t.Error(err)
		}
	})
	os.Mkdir(filepath.Join(dir, "vols"), 0o700)
	const size, blocks = 8 << 20, 8 << 20 / 4096

	// A base snapshot of random data, written straight into a volume.
	want := make([]byte, size)
	rand.Read(want)
	base, err := volume.Create(filepath.Join(dir, "vols", "base"), "", nil, size, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := base.WriteAt(ctx, want, 0); err != nil {
		t.Fatal(err)
	}
	snap, err := base.Snapshot(ctx, st, volume.SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	v, err := volume.Create(filepath.Join(dir, "vols", "clone"), snap.ID, snap.Map, size, engine.Open("test", snap.Map))
	if err != nil {
		t.Fatal(err)
	}
	file, err := fsys.Add("clone", v, fusefs.FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	loop, err := mount.AttachLoop(file, mount.LoopOptions{DirectIO: true, Autoclear: true})
	if err != nil {
		t.Fatal(err)
	}
	dev, err := os.OpenFile(loop.Path, os.O_RDWR|syscall.O_DIRECT, 0)
	loop.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		dev.Close()
		waitDetached(t, file)
		fsys.Remove("clone")
	})

	// 32 writers, each owning the blocks b with b%32 == w (so neighbours in a chunk
	// belong to different writers), writing each of its blocks twice in random
	// order, while 32 readers read random blocks.
	const writers = 32
	var wg sync.WaitGroup
	errs := make(chan error, 2*writers)
	for w := 0; w < writers; w++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			buf := aligned(4096)
			var mine []int
			for b := w; b < blocks; b += writers {
				mine = append(mine, b, b)
			}
			mrand.Shuffle(len(mine), func(i, j int) { mine[i], mine[j] = mine[j], mine[i] })
			for _, b := range mine {
				rand.Read(buf)
				if _, err := dev.WriteAt(buf, int64(b)*4096); err != nil {
					errs <- err
					return
				}
				copy(want[b*4096:], buf) // only this writer touches block b
			}
		}()
		go func() {
			defer wg.Done()
			buf := aligned(4096)
			for i := 0; i < 200; i++ {
				if _, err := dev.ReadAt(buf, int64(mrand.IntN(blocks))*4096); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got := aligned(size)
	if _, err := dev.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	direct := make([]byte, size)
	if _, err := v.ReadAt(ctx, direct, 0); err != nil {
		t.Fatal(err)
	}
	for b := 0; b < blocks; b++ {
		w := want[b*4096 : (b+1)*4096]
		if !bytes.Equal(got[b*4096:(b+1)*4096], w) || !bytes.Equal(direct[b*4096:(b+1)*4096], w) {
			t.Fatalf("block %d differs from its last write", b)
		}
	}
}

// aligned returns n bytes aligned to 4 KiB (O_DIRECT buffers).
func aligned(n int) []byte {
	b := make([]byte, n+4096)
	off := int(-uintptr(unsafe.Pointer(&b[0])) & 4095)
	return b[off : off+n]
}

// TestErrnoThroughFUSE checks the kernel's view of the error translation: a write
// past the end of a volume file fails with ENOSPC (errdefs.ErrOutOfRange from the
// volume, classified by Errno), and the bytes inside still read back.
func TestErrnoThroughFUSE(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireFile(t, "/dev/fuse")
	dir := t.TempDir()
	fsys, err := fusefs.Mount(filepath.Join(dir, "fuse"), fusefs.Options{Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := fsys.Unmount(); err != nil {
			t.Error(err)
		}
	})
	const size = 1 << 20
	v, err := volume.Create(filepath.Join(dir, "vol"), "", nil, size, nil)
	if err != nil {
		t.Fatal(err)
	}
	path, err := fsys.Add("v", v, fusefs.FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fsys.Remove("v") })
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	block := bytes.Repeat([]byte("s"), 4096)
	if _, err := f.WriteAt(block, size-4096); err != nil {
		t.Fatalf("write of the last block: %v", err)
	}
	if _, err := f.WriteAt(block, size); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write past the end: %v, want ENOSPC", err)
	}
	got := make([]byte, 4096)
	if _, err := f.ReadAt(got, size-4096); err != nil || !bytes.Equal(got, block) {
		t.Fatalf("read of the last block: %v, %q...", err, got[:8])
	}
}

// fakeVolume answers every read with 0xEE and counts the reads it gets.
type fakeVolume struct {
	size  int64
	reads atomic.Int64
}

func (v *fakeVolume) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	v.reads.Add(1)
	for i := range p {
		p[i] = 0xEE
	}
	return len(p), nil
}
func (v *fakeVolume) WriteAt(ctx context.Context, p []byte, off int64) (int, error) {
	return len(p), nil
}
func (v *fakeVolume) Zero(ctx context.Context, off, n int64) error { return nil }
func (v *fakeVolume) Sync(ctx context.Context) error               { return nil }
func (v *fakeVolume) Size() int64                                  { return v.size }

// TestPassthrough: a volume file added with a backing file is read by the kernel
// from that file (FUSE passthrough): the bytes are the backing file's, the volume
// sees no read, and the file cannot be opened for writing. After Remove, the
// open file still reads the backing file's bytes.
func TestPassthrough(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireFile(t, "/dev/fuse")
	dir := t.TempDir()
	fsys, err := fusefs.Mount(filepath.Join(dir, "fuse"), fusefs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := fsys.Unmount(); err != nil {
			t.Error(err)
		}
	})
	want := make([]byte, 1<<20)
	rand.Read(want)
	bpath := filepath.Join(dir, "backing")
	if err := os.WriteFile(bpath, want, 0o400); err != nil {
		t.Fatal(err)
	}
	backing, err := os.Open(bpath)
	if err != nil {
		t.Fatal(err)
	}
	v := &fakeVolume{size: int64(len(want))}
	path, err := fsys.Add("img", v, fusefs.FileOptions{Backing: backing})
	if err != nil {
		t.Fatal(err)
	}
	backing.Close() // the file system keeps a descriptor of its own
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) || v.reads.Load() != 0 {
		t.Fatalf("read through passthrough: equal %v, %d reads reached the volume; want the backing file's bytes and none",
			bytes.Equal(got, want), v.reads.Load())
	}
	if _, err := os.OpenFile(path, os.O_RDWR, 0); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("open for writing: %v, want EROFS", err)
	}
	open, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	if err := fsys.Remove("img"); err != nil {
		t.Fatal(err)
	}
	got = make([]byte, 4096)
	if _, err := open.ReadAt(got, 8192); err != nil || !bytes.Equal(got, want[8192:8192+4096]) || v.reads.Load() != 0 {
		t.Fatalf("read of the open file after Remove: %v, equal %v, %d reads reached the volume",
			err, bytes.Equal(got, want[8192:8192+4096]), v.reads.Load())
	}
}
