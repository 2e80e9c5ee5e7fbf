package filetrace

import (
	"bytes"
	"context"
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"golang.org/x/sys/unix"

	"github.com/slacker-dev/slacker/internal/mount"
	"github.com/slacker-dev/slacker/internal/runs"
	"github.com/slacker-dev/slacker/internal/testutil"
	"github.com/slacker-dev/slacker/internal/trace"
)

// image is a read-only ext4 on a loop device, mounted at lower, under an overlay
// mounted at merged (as a shared image root stands under a container's root).
type image struct {
	lower, merged string
	files         map[string][]byte
}

func newImage(t *testing.T) *image {
	t.Helper()
	testutil.RequireRoot(t)
	testutil.RequireFile(t, "/dev/loop-control")
	testutil.RequireTool(t, "mkfs.ext4")
	testutil.RequireOverlay(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	im := &image{lower: filepath.Join(dir, "lower"), merged: filepath.Join(dir, "merged"), files: map[string][]byte{}}
	for name, size := range map[string]int{"bin/tool": 64 << 10, "lib/big": 1 << 20, "lib/small": 100, "etc/passwd": 10} {
		b := make([]byte, size)
		rand.Read(b)
		im.files["/"+name] = b
		os.MkdirAll(filepath.Join(src, filepath.Dir(name)), 0o755)
		if err := os.WriteFile(filepath.Join(src, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// What a trace must never open for reading, or read outside the root through.
	if err := os.Symlink("/etc/passwd", filepath.Join(src, "escape")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(src, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(filepath.Join(src, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(dir, "img")
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-b", "4096", "-d", src, img, "64M").CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v: %s", err, out)
	}
	loop, err := mount.AttachLoop(img, mount.LoopOptions{ReadOnly: true, Autoclear: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { loop.Close() }) // autoclear: detached once unmounted and closed
	if err := mount.MountExt4(loop.Path, im.lower, true, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(im.lower, 0) })
	for _, d := range []string{"upper", "work"} {
		os.MkdirAll(filepath.Join(dir, d), 0o755)
	}
	if err := mount.MountOverlay(mount.OverlaySpec{Lower: []string{im.lower}, Upper: filepath.Join(dir, "upper"),
		Work: filepath.Join(dir, "work")}, im.merged); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(im.merged, 0) })
	return im
}

// extentsOf returns the extents of a file of the image.
func (im *image) extentsOf(t *testing.T, name string) []Extent {
	t.Helper()
	f, err := os.Open(filepath.Join(im.lower, name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	exts, err := Extents(int(f.Fd()), 100)
	if err != nil || len(exts) == 0 {
		t.Fatalf("extents of %s: %v, %v", name, exts, err)
	}
	return exts
}

// blocksOf returns the volume blocks holding bytes [off, end) of a file.
func (im *image) blocksOf(t *testing.T, set *runs.Set, name string, off, end int64) {
	t.Helper()
	for _, e := range im.extentsOf(t, name) {
		a, b := max(off, e.Logical), min(end, e.Logical+e.Length)
		if a < b {
			p := e.Physical + a - e.Logical
			set.Add(p/4096, (p+b-a+4095)/4096)
		}
	}
}

// evict drops a file's pages from the page cache.
func evict(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
}

// A start reads files through a container's overlay; the recorder on the image
// root below it lists them in the order they were opened, each with the byte
// ranges of it the start's blocks hold (a part of a big file, not all of it).
// Warm then reads exactly those ranges into the page cache of a cold image root,
// and refuses what is not a regular file under the root: a symlink out of it, a
// FIFO, a device node, a path that is not there.
func TestRecordThroughOverlayThenWarm(t *testing.T) {
	im := newImage(t)
	rec, err := Record(im.lower)
	if err != nil {
		t.Fatal(err)
	}
	read := func(name string, off, n int64) {
		t.Helper()
		f, err := os.Open(filepath.Join(im.merged, name))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		b := make([]byte, n)
		if _, err := f.ReadAt(b, off); err != nil || !bytes.Equal(b, im.files[name][off:off+n]) {
			t.Fatalf("read %s: %v", name, err)
		}
	}
	read("/bin/tool", 0, 64<<10)
	read("/lib/big", 256<<10, 8<<10)
	read("/lib/small", 0, 100)
	os.Stat(filepath.Join(im.merged, "etc/passwd")) // not opened: not recorded
	time.Sleep(100 * time.Millisecond)              // events are read asynchronously

	// The blocks the start read, as the chunk trace records them.
	blocks := runs.New()
	im.blocksOf(t, blocks, "/bin/tool", 0, 64<<10)
	im.blocksOf(t, blocks, "/lib/big", 256<<10, 264<<10)
	im.blocksOf(t, blocks, "/lib/small", 0, 100)
	files := rec.Files(blocks.Runs(), 4096)
	want := []trace.File{
		{Path: "/bin/tool", Ranges: [][2]int64{{0, 64 << 10}}},
		{Path: "/lib/big", Ranges: [][2]int64{{256 << 10, 264 << 10}}},
		{Path: "/lib/small", Ranges: [][2]int64{{0, 4096}}},
	}
	if !slices.EqualFunc(files, want, func(a, b trace.File) bool { return a.Path == b.Path && slices.Equal(a.Ranges, b.Ranges) }) {
		t.Fatalf("recorded %v, want %v", files, want)
	}
	tr := trace.New(digestOf("image"), time.Minute, nil)
	tr.Files = files
	if _, err := trace.Encode(tr); err != nil {
		t.Fatalf("the recorded files do not make a valid trace: %v", err)
	}

	for name := range im.files {
		evict(t, filepath.Join(im.lower, name))
	}
	if n := testutil.ResidentPages(t, filepath.Join(im.lower, "lib/big"), 0, 1<<20); n != 0 {
		t.Skipf("the page cache kept %d pages after FADV_DONTNEED", n)
	}
	bad := []trace.File{{Path: "/escape", Ranges: [][2]int64{{0, 10}}}, {Path: "/fifo", Ranges: [][2]int64{{0, 10}}},
		{Path: "/null", Ranges: [][2]int64{{0, 10}}}, {Path: "/missing"}}
	st, err := Warm(context.Background(), im.lower, append(slices.Clone(files), bad...), 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := (WarmStats{Files: 3, Bytes: 64<<10 + 8<<10 + 100, Skipped: 4}); st != want {
		t.Fatalf("warm: %+v, want %+v", st, want)
	}
	for _, c := range []struct {
		name          string
		off, end, min int64
		max           int
	}{
		{"bin/tool", 0, 64 << 10, 16, 16},
		{"lib/big", 256 << 10, 264 << 10, 2, 2},
		{"lib/big", 0, 256 << 10, 0, 0}, // nothing ahead of or past the range
		{"lib/big", 264 << 10, 1 << 20, 0, 0},
	} {
		if n := testutil.ResidentPages(t, filepath.Join(im.lower, c.name), c.off, c.end); int64(n) < c.min || n > c.max {
			t.Errorf("%s [%d, %d): %d pages in the page cache after the warm-up, want %d to %d", c.name, c.off, c.end, n, c.min, c.max)
		}
	}
	if n := testutil.ResidentPages(t, filepath.Join(im.lower, "etc/passwd"), 0, 10); n != 0 {
		t.Errorf("the symlink's target in the image was read")
	}
}

// A file opened again and again while watched (a server's page, opened for every
// request) costs the kernel one event, not one per open: the watcher ignores a
// file once it has seen it, through the overlay as through the root.
func TestWatchIgnoresFilesSeen(t *testing.T) {
	im := newImage(t)
	reported := make(chan string, 16)
	w, err := Watch(im.lower, func(path string, fd int) { reported <- path })
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	const opens = 300
	for i := range opens {
		root := im.merged
		if i%2 == 1 {
			root = im.lower
		}
		f, err := os.Open(filepath.Join(root, "lib/small"))
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	// Events are read in order: once the next file is reported, every event of
	// the opens before it has been read.
	f, err := os.Open(filepath.Join(im.merged, "etc/passwd"))
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	var got []string
	for len(got) < 2 {
		select {
		case p := <-reported:
			got = append(got, p)
		case <-time.After(10 * time.Second):
			t.Fatalf("reported %v, then nothing for 10 s", got)
		}
	}
	if !slices.Equal(got, []string{"/lib/small", "/etc/passwd"}) {
		t.Fatalf("reported %v", got)
	}
	// The first open's event, and the few made before its file was ignored.
	if n := w.events.Load(); n > 10 {
		t.Fatalf("%d opens of one file made %d events: the file was not ignored once seen", opens, n)
	}
}

// Warm stops when its context ends.
func TestWarmStops(t *testing.T) {
	im := newImage(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	st, err := Warm(ctx, im.lower, []trace.File{{Path: "/bin/tool", Ranges: [][2]int64{{0, 4096}}}}, 1)
	if err == nil || st.Files != 0 {
		t.Fatalf("warm with an ended context: %+v, %v", st, err)
	}
}

func TestFileRanges(t *testing.T) {
	exts := []Extent{{Logical: 0, Physical: 40960, Length: 8192}, {Logical: 8192, Physical: 409600, Length: 16384}}
	for _, c := range []struct {
		blocks []runs.Run
		want   [][2]int64
	}{
		{nil, nil},
		{[]runs.Run{{Start: 0, End: 10}}, nil}, // before the file
		{[]runs.Run{{Start: 10, End: 12}}, [][2]int64{{0, 8192}}},                                        // its first extent
		{[]runs.Run{{Start: 11, End: 12}, {Start: 100, End: 101}}, [][2]int64{{4096, 12288}}},            // both, meeting: merged
		{[]runs.Run{{Start: 102, End: 200}}, [][2]int64{{16384, 24576}}},                                 // the end of the second
		{[]runs.Run{{Start: 5, End: 11}, {Start: 101, End: 102}}, [][2]int64{{0, 4096}, {12288, 16384}}}, // apart
	} {
		if got := fileRanges(exts, c.blocks, 4096); !slices.Equal(got, c.want) {
			t.Errorf("blocks %v: %v, want %v", c.blocks, got, c.want)
		}
	}
}

func FuzzEachEvent(f *testing.F) {
	ev := make([]byte, metaSize)
	ev[0] = byte(metaSize) // event_len
	ev[4] = unix.FANOTIFY_METADATA_VERSION
	f.Add(append(slices.Clone(ev), ev...))
	f.Add([]byte{})
	f.Add(ev[:10])
	f.Fuzz(func(t *testing.T, b []byte) {
		n := 0
		eachEvent(b, func(fd int) { n++ })
		if n > len(b)/metaSize {
			t.Fatalf("%d events from %d bytes", n, len(b))
		}
	})
}

func digestOf(s string) digest.Digest { return digest.FromString(s) }
