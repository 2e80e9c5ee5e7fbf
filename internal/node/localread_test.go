package node

import (
	"bytes"
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"

	"github.com/slacker-dev/slacker/internal/store/local"
)

// TestLocalStoreBlockReads: a node over a local directory store with no disk tier
// (slackerd's default for a local store) reads the blocks it needs of chunks it
// verified before from the store's own files: the second read of a file, after a
// remount emptied ext4's page cache and with a memory tier too small to hold a
// chunk, is served by partial reads, misses nothing, and is right.
func TestLocalStoreBlockReads(t *testing.T) {
	requirePrivileged(t)
	ctx := context.Background()
	dir := t.TempDir()
	st, err := local.Open(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	n := openNode(t, filepath.Join(dir, "node1"), st)
	t.Cleanup(func() { n.Close(ctx) })
	blank, err := n.MakeFilesystem(ctx, 256<<20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.CreateVolume(ctx, CreateOptions{ID: "a", Snapshot: blank.ID}); err != nil {
		t.Fatal(err)
	}
	a, err := n.MountVolume(ctx, "a", false)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, 4<<20)
	rand.Read(want)
	if err := os.WriteFile(filepath.Join(a.Mountpoint, "f"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	snap, err := n.SnapshotVolume(ctx, "a", SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}

	n2, err := Open(ctx, Config{Root: filepath.Join(dir, "node2"), Store: st, CacheNoDisk: true, CacheMemBytes: 1,
		DefaultSize: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n2.Close(ctx) })
	if _, err := n2.CreateVolume(ctx, CreateOptions{ID: "b", Snapshot: snap.ID}); err != nil {
		t.Fatal(err)
	}
	// read reads the file in a fresh mount and returns how many of the volume's
	// chunk reads missed the cache.
	read := func() (misses int64) {
		t.Helper()
		b, err := n2.MountVolume(ctx, "b", true)
		if err != nil {
			t.Fatal(err)
		}
		before, _ := n2.Volume("b")
		got, err := os.ReadFile(filepath.Join(b.Mountpoint, "f"))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("read through the node: err %v, right bytes %v", err, bytes.Equal(got, want))
		}
		after, _ := n2.Volume("b")
		if err := n2.UnmountVolume(ctx, "b"); err != nil {
			t.Fatal(err)
		}
		return after.Stats.CacheMisses - before.Stats.CacheMisses
	}
	if misses := read(); misses == 0 {
		t.Fatal("the first read of a cold node missed nothing")
	}
	first := n2.Cache().Stats()
	misses := read()
	second := n2.Cache().Stats()
	// (Readahead may still load chunks whole in the background: it skips only
	// chunks the cache holds in memory or in its disk tier.)
	if first.SumChunks == 0 || misses != 0 || second.PartialBytes-first.PartialBytes < int64(len(want)) {
		t.Fatalf("second read: %d misses; cache stats after the first read %+v, after the second %+v: "+
			"want the second served by partial reads of the store's files", misses, first, second)
	}
}
