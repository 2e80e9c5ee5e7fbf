package node

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/slacker-dev/slacker/internal/blockmap"
	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/mount"
	"github.com/slacker-dev/slacker/internal/store/local"
	"github.com/slacker-dev/slacker/internal/testutil"
)

// testLogger is the node's log in tests: to stderr with SLACKER_TEST_LOG set, else
// none.
func testLogger() *slog.Logger {
	if os.Getenv("SLACKER_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return nil
}

func openNode(t *testing.T, root string, st *local.Store) *Node {
	t.Helper()
	n, err := Open(context.Background(), Config{Root: root, Store: st, CacheBytes: 256 << 20, DefaultSize: 1 << 30, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// newNode opens a node on a new local store, both in a temporary directory, and
// closes it at the end of the test.
func newNode(t *testing.T) (*Node, *local.Store) {
	t.Helper()
	dir := t.TempDir()
	st, err := local.Open(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	n := openNode(t, filepath.Join(dir, "node"), st)
	t.Cleanup(func() { n.Close(context.Background()) })
	return n, st
}

func requirePrivileged(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireFile(t, "/dev/fuse")
	testutil.RequireFile(t, "/dev/loop-control")
	testutil.RequireTool(t, "mkfs.ext4", "e2fsck")
}

// TestCloneSnapshotClone writes files into a clone of a blank filesystem, snapshots
// it, clones the snapshot on a node with a cold cache, and compares every file.
func TestCloneSnapshotClone(t *testing.T) {
	requirePrivileged(t)
	ctx := context.Background()
	dir := t.TempDir()
	st, err := local.Open(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	n := openNode(t, filepath.Join(dir, "node1"), st)
	t.Cleanup(func() { n.Close(ctx) })

	blank, err := n.MakeFilesystem(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if vs := n.Volumes(); len(vs) != 0 {
		t.Fatalf("mkfs left volumes behind: %+v", vs)
	}
	a, err := n.CreateVolume(ctx, CreateOptions{ID: "a", Snapshot: blank.ID})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.CreateVolume(ctx, CreateOptions{ID: "a", Snapshot: blank.ID}); !errors.Is(err, errdefs.ErrExists) {
		t.Fatalf("second create of a: %v", err)
	}
	a, err = n.MountVolume(ctx, "a", false)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for i, size := range []int{0, 10, 4096, 5000, 1 << 20, 16 << 20} {
		b := make([]byte, size)
		rand.Read(b)
		name := filepath.Join("dir", string(rune('a'+i)))
		os.MkdirAll(filepath.Join(a.Mountpoint, "dir"), 0o755)
		if err := os.WriteFile(filepath.Join(a.Mountpoint, name), b, 0o640); err != nil {
			t.Fatal(err)
		}
		files[name] = b
	}
	// Snapshot while mounted: the filesystem is frozen, then thawed.
	snap, err := n.SnapshotVolume(ctx, "a", SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(a.Mountpoint, "after"), []byte("not in the snapshot"), 0o644); err != nil {
		t.Fatalf("write after a snapshot of a mounted volume (thaw failed?): %v", err)
	}
	if err := n.UnmountVolume(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if out, err := mount.Fsck(ctx, a.File); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}

	// A second node with its own (cold) cache, sharing the store.
	n2 := openNode(t, filepath.Join(dir, "node2"), st)
	t.Cleanup(func() { n2.Close(ctx) })
	b, err := n2.CreateVolume(ctx, CreateOptions{ID: "b", Snapshot: snap.ID})
	if err != nil {
		t.Fatal(err)
	}
	if b, err = n2.MountVolume(ctx, "b", true); err != nil {
		t.Fatal(err)
	}
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(b.Mountpoint, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s differs in the clone of the snapshot (err %v)", name, err)
		}
		fi, _ := os.Stat(filepath.Join(b.Mountpoint, name))
		if fi.Mode().Perm() != 0o640 {
			t.Fatalf("%s mode %v", name, fi.Mode())
		}
	}
	if _, err := os.Stat(filepath.Join(b.Mountpoint, "after")); !os.IsNotExist(err) {
		t.Fatalf("a write made after the snapshot is in it: %v", err)
	}
	info, _ := n2.Volume("b")
	if info.Stats.FetchedBytes == 0 || info.Stats.FetchedBytes > snap.Map.DataSize() {
		t.Fatalf("clone fetched %d bytes of a %d-byte snapshot", info.Stats.FetchedBytes, snap.Map.DataSize())
	}
	if err := n2.DeleteVolume(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node2", "volumes", "b")); !os.IsNotExist(err) {
		t.Fatal("deleted volume's directory remains")
	}
	if ms, _ := mount.Mounts(dir); len(ms) != 2 { // the two FUSE mounts
		t.Fatalf("mounts after delete: %+v", ms)
	}
}

// TestReopenRemountsAndReconciles closes a node with a mounted volume and opens it
// again: the volume is mounted again, with its data.
func TestReopenRemountsAndReconciles(t *testing.T) {
	requirePrivileged(t)
	ctx := context.Background()
	dir := t.TempDir()
	st, _ := local.Open(filepath.Join(dir, "store"))
	n := openNode(t, filepath.Join(dir, "node"), st)
	blank, err := n.MakeFilesystem(ctx, 256<<20)
	if err != nil {
		n.Close(ctx)
		t.Fatal(err)
	}
	if _, err := n.CreateVolume(ctx, CreateOptions{ID: "c", Snapshot: blank.ID}); err != nil {
		t.Fatal(err)
	}
	v, err := n.MountVolume(ctx, "c", false)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(v.Mountpoint, "f"), []byte("kept"), 0o644)
	if err := n.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if ms, _ := mount.Mounts(dir); len(ms) != 0 {
		t.Fatalf("mounts after Close: %+v", ms)
	}
	n = openNode(t, filepath.Join(dir, "node"), st)
	t.Cleanup(func() { n.Close(ctx) })
	v, err = n.Volume("c")
	if err != nil || v.Mountpoint == "" {
		t.Fatalf("volume not mounted again: %+v, %v", v, err)
	}
	if b, err := os.ReadFile(filepath.Join(v.Mountpoint, "f")); err != nil || string(b) != "kept" {
		t.Fatalf("file after reopen: %q, %v", b, err)
	}
}

// TestStoredMap: a pull's map is fetched from the store, or, when the node kept it
// from an earlier pull, checked against the store, which may have lost it since.
func TestStoredMap(t *testing.T) {
	requirePrivileged(t)
	ctx := context.Background()
	n, st := newNode(t)

	enc, err := blockmap.Encode(blockmap.Empty(1 << 30))
	if err != nil {
		t.Fatal(err)
	}
	id := blockmap.ID(enc)
	if _, err := n.StoredMap(ctx, id); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("map of a snapshot not in the store: %v", err)
	}
	if err := st.Put(ctx, id, int64(len(enc)), bytes.NewReader(enc)); err != nil {
		t.Fatal(err)
	}
	m, err := n.StoredMap(ctx, id)
	if err != nil || m.Size != 1<<30 {
		t.Fatalf("map fetched from the store: %v, %v", m, err)
	}
	if err := st.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := n.StoredMap(ctx, id); !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), "no longer in the store") {
		t.Fatalf("kept map of a snapshot the store lost: %v", err)
	}
	if m, err := n.Map(ctx, id); err != nil || m.Size != 1<<30 {
		t.Fatalf("Map of the kept map: %v, %v", m, err)
	}
}
