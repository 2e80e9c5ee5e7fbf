package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/slacker-dev/slacker/internal/api"
	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/fetch"
	"github.com/slacker-dev/slacker/internal/mount"
	"github.com/slacker-dev/slacker/internal/store"
	"github.com/slacker-dev/slacker/internal/store/faultstore"
	"github.com/slacker-dev/slacker/internal/testenv"
)

// logBuffer collects a daemon's JSON log lines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// lines returns the log lines holding every one of the words.
func (l *logBuffer) lines(words ...string) []string {
	var out []string
	for _, line := range strings.Split(l.String(), "\n") {
		ok := line != ""
		for _, w := range words {
			ok = ok && strings.Contains(line, w)
		}
		if ok {
			out = append(out, line)
		}
	}
	return out
}

func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// readDirect reads a whole file with O_DIRECT, so that every byte comes from the
// volume (through the loop device and FUSE), not from the guest's page cache.
func readDirect(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_DIRECT, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := (fi.Size() + 4095) &^ 4095
	buf := alignedBuffer(int(size))
	n := 0
	for n < len(buf) {
		k, err := unix.Pread(int(f.Fd()), buf[n:], int64(n))
		if err != nil {
			return nil, err
		}
		if k == 0 {
			break
		}
		n += k
	}
	if int64(n) < fi.Size() {
		return nil, fmt.Errorf("%s: read %d of %d bytes", path, n, fi.Size())
	}
	return buf[:fi.Size()], nil
}

func alignedBuffer(n int) []byte {
	b := make([]byte, n+4096)
	off := 0
	if r := int(uintptrOf(b) % 4096); r != 0 {
		off = 4096 - r
	}
	return b[off : off+n : off+n]
}

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func writeSynced(t *testing.T, path string, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// faultNode is an in-process slackerd whose store is wrapped in a faultstore, with a
// short fetch bound, and a volume cloned from a snapshot holding files of random
// content that the node has never read (a cold cache).
type faultNode struct {
	d     *testenv.Daemon
	fs    *faultstore.Store
	log   *logBuffer
	vol   api.Volume
	files map[string][]byte
}

const faultMaxWait = 2 * time.Second

func startFaultNode(t *testing.T, nfiles int) *faultNode {
	t.Helper()
	fn := &faultNode{}
	return fn.start(t, nfiles, func(s store.Store) store.Store {
		fn.fs = faultstore.New(s)
		return fn.fs
	})
}

// start starts the node on the store wrap returns.
func (fn *faultNode) start(t *testing.T, nfiles int, wrap func(store.Store) store.Store) *faultNode {
	t.Helper()
	ctx := context.Background()
	fn.log, fn.files = &logBuffer{}, map[string][]byte{}
	fn.d = testenv.StartDaemon(t, testenv.DaemonOptions{
		Size:      256 << 20,
		WrapStore: wrap,
		Fetch:     fetch.Options{MaxWait: faultMaxWait, Attempt: 500 * time.Millisecond, Backoff: 10 * time.Millisecond, MaxBackoff: 200 * time.Millisecond},
		Logger:    fn.log.logger(),
	})
	c := fn.d.Client
	blank, err := c.Mkfs(ctx, api.MkfsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	src, err := c.CreateVolume(ctx, api.CreateVolumeRequest{ID: "src", Snapshot: blank.ID, Mount: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := range nfiles {
		name := fmt.Sprintf("file%02d", i)
		fn.files[name] = randomBytes(t, 2<<20+i*4096)
		writeSynced(t, filepath.Join(src.Mountpoint, name), fn.files[name])
	}
	if err := c.UnmountVolume(ctx, "src"); err != nil {
		t.Fatal(err)
	}
	snap, err := c.SnapshotVolume(ctx, "src", api.SnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteVolume(ctx, "src"); err != nil {
		t.Fatal(err)
	}
	if err := c.DropCaches(ctx, true); err != nil { // the snapshot seeded the cache
		t.Fatal(err)
	}
	if fn.vol, err = c.CreateVolume(ctx, api.CreateVolumeRequest{ID: "v", Snapshot: snap.ID, Mount: true}); err != nil {
		t.Fatal(err)
	}
	return fn
}

func (fn *faultNode) path(name string) string { return filepath.Join(fn.vol.Mountpoint, name) }

// check reads name and compares it with what was written.
func (fn *faultNode) check(t *testing.T, name string) {
	t.Helper()
	got, err := readDirect(fn.path(name))
	if err != nil {
		t.Fatalf("read %s: %v", name, err)
	}
	if !bytes.Equal(got, fn.files[name]) {
		t.Fatalf("read %s: wrong content", name)
	}
}

// coldFrom is the first file no test reads whole before its fault: reading file00
// whole warms the chunks after it (sequential readahead), so cold reads go further.
const coldFrom = 4

// checkBlock reads one 4 KiB block from the middle of name with O_DIRECT (a random
// read: no readahead) and compares it with what was written.
func (fn *faultNode) checkBlock(name string) error {
	want := fn.files[name]
	off := int64(len(want)/2) &^ 4095
	f, err := os.OpenFile(fn.path(name), os.O_RDONLY|syscall.O_DIRECT, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := alignedBuffer(4096)
	if _, err := unix.Pread(int(f.Fd()), buf, off); err != nil {
		return err
	}
	if !bytes.Equal(buf, want[off:off+4096]) {
		return fmt.Errorf("%s at %d: wrong bytes", name, off)
	}
	return nil
}

// checkAll reads every file whole.
func (fn *faultNode) checkAll(t *testing.T) {
	t.Helper()
	for name := range fn.files {
		fn.check(t, name)
	}
}

// fsck unmounts the volume and checks its filesystem.
func (fn *faultNode) fsck(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	if err := fn.d.Client.UnmountVolume(ctx, "v"); err != nil {
		t.Fatal(err)
	}
	if out, err := mount.Fsck(ctx, fn.vol.File); err != nil {
		t.Fatalf("filesystem not clean: %v\n%s", err, out)
	}
}

// TestStoreGoneMidRun takes the store away from a node with a mounted volume, in
// each way a store can go (refusing, hanging, cutting transfers, serving damaged
// bytes): data already read keeps working, writes and fsyncs keep working, cold reads
// fail with EIO after the configured bound with a clear log line, and when the store
// is back the same reads work, without restarting anything. Every fsynced write is
// present and the filesystem is clean.
func TestStoreGoneMidRun(t *testing.T) {
	faults := []struct {
		name  string
		fault faultstore.Fault
	}{
		{"refused", faultstore.Fault{Err: errdefs.ErrUnavailable}},
		{"hung", faultstore.Fault{Hang: true}},
		{"cut transfers", faultstore.Fault{Cut: true}},
		{"damaged bytes", faultstore.Fault{Corrupt: true}},
	}
	fn := startFaultNode(t, len(faults)+coldFrom)
	fn.check(t, "file00") // warm: the guest's metadata and file00 have been read
	writeSynced(t, fn.path("before"), []byte("written before the outage"))
	fn.files["before"] = []byte("written before the outage")
	for i, tc := range faults {
		t.Run(tc.name, func(t *testing.T) {
			cold := fmt.Sprintf("file%02d", i+coldFrom)
			remove := fn.fs.Inject(tc.fault)
			defer remove()
			fn.check(t, "file00") // already read: served from the node cache
			during := randomBytes(t, 1<<20)
			writeSynced(t, fn.path("during-"+cold), during)
			fn.files["during-"+cold] = during

			failed := len(fn.log.lines(`"chunk-fetch-failed"`))
			if err := fn.checkBlock(cold); !errors.Is(err, syscall.EIO) {
				t.Fatalf("cold read with the store gone: %v, want EIO", err)
			}
			if len(fn.log.lines(`"chunk-fetch-failed"`)) == failed || len(fn.log.lines(`"volume-io-error"`, `"volume":"v"`)) == 0 {
				t.Fatalf("no chunk-fetch-failed and volume-io-error log lines:\n%s", fn.log.String())
			}
			remove() // the store is back
			if err := fn.checkBlock(cold); err != nil {
				t.Fatalf("the same read once the store is back: %v", err)
			}
		})
	}
	fn.checkAll(t)
	fn.fsck(t)
}

// TestSnapshotWithStoreGone commits a mounted, written volume while the store
// refuses, hangs or cuts uploads: the snapshot fails within the bound with an
// "unavailable" error, the filesystem is thawed (the guest keeps writing), and once
// the store is back the same snapshot succeeds and holds every fsynced write.
func TestSnapshotWithStoreGone(t *testing.T) {
	faults := []struct {
		name  string
		fault faultstore.Fault
	}{
		{"refused", faultstore.Fault{Ops: faultstore.OpPut | faultstore.OpStat, Err: errdefs.ErrUnavailable}},
		{"hung", faultstore.Fault{Ops: faultstore.OpPut | faultstore.OpStat, Hang: true}},
		{"cut uploads", faultstore.Fault{Ops: faultstore.OpPut, Cut: true}},
	}
	ctx := context.Background()
	for _, tc := range faults {
		t.Run(tc.name, func(t *testing.T) {
			fn := startFaultNode(t, 1)
			c := fn.d.Client
			fn.files["new"] = randomBytes(t, 3<<20)
			writeSynced(t, fn.path("new"), fn.files["new"])

			fn.fs.Inject(tc.fault)
			_, err := c.SnapshotVolume(ctx, "v", api.SnapshotRequest{})
			if !errors.Is(err, errdefs.ErrUnavailable) {
				t.Fatalf("snapshot with the store gone: %v, want an unavailable error", err)
			}
			// Thawed: the guest writes and fsyncs.
			fn.files["after"] = randomBytes(t, 64<<10)
			writeSynced(t, fn.path("after"), fn.files["after"])

			fn.fs.Clear()
			snap, err := c.SnapshotVolume(ctx, "v", api.SnapshotRequest{})
			if err != nil {
				t.Fatalf("snapshot once the store is back: %v", err)
			}
			clone, err := c.CreateVolume(ctx, api.CreateVolumeRequest{ID: "clone", Snapshot: snap.ID, Mount: true, ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			for name, want := range fn.files {
				got, err := readDirect(filepath.Join(clone.Mountpoint, name))
				if err != nil || !bytes.Equal(got, want) {
					t.Fatalf("snapshot's %s: %v", name, err)
				}
			}
			if err := c.DeleteVolume(ctx, "clone"); err != nil {
				t.Fatal(err)
			}
			fn.fsck(t)
		})
	}
}
