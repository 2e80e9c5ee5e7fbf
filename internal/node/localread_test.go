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
// (slackerd's default for a local store) reads the blocks it needs of the chunks
// from the store's own files, checked against the block checksums the store keeps
// with them: even the first read of a cold node loads no chunk whole (its misses
// are chunks read in place, counted as moved from the store), and the second,
// after a remount emptied ext4's page cache, with a memory tier too small to hold
// a chunk, misses nothing; both are right.
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
	misses := read()
	first := n2.Cache().Stats()
	if misses == 0 || first.StoreSums == 0 || first.PartialBytes < int64(len(want))/2 || first.InPlaceBytes == 0 ||
		first.InPlaceBytes+first.FetchedBytes < int64(len(want)) {
		t.Fatalf("first read of a cold node: %d misses; cache stats %+v: want it served by partial reads "+
			"of the store's files, checked against the store's checksums, the chunks counted as read in place (or loaded ahead whole)",
			misses, first)
	}
	if st := n2.Stats(); st.Fetch.FetchedBytes < first.InPlaceBytes {
		t.Fatalf("the node moved %d bytes from its store; want at least the %d read in place", st.Fetch.FetchedBytes, first.InPlaceBytes)
	}
	misses = read()
	second := n2.Cache().Stats()
	if first.SumChunks == 0 || misses != 0 || second.PartialBytes-first.PartialBytes < int64(len(want)) {
		t.Fatalf("second read: %d misses; cache stats after the first read %+v, after the second %+v: "+
			"want the second served by partial reads of the store's files", misses, first, second)
	}
}
