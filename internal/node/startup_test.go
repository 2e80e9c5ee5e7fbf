package node

import (
	"bytes"
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/store/local"
	"github.com/slacker-dev/slacker/internal/testutil"
	"github.com/slacker-dev/slacker/internal/trace"
)

// TestStartupTraceRecordedAndReplayed runs a "container" (a clone marked Startup
// that reads one file) on a node: the node records the chunks it read as the
// snapshot's start-up trace in the store. A second node with a cold cache, cloning
// the snapshot for a container, prefetches those chunks before anything reads
// them, and the reads that follow are cache hits with the right bytes. A clone not
// marked Startup neither records nor replays.
func TestStartupTraceRecordedAndReplayed(t *testing.T) {
	requirePrivileged(t)
	ctx := context.Background()
	dir := t.TempDir()
	st, err := local.Open(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	n := openNode(t, filepath.Join(dir, "node1"), st)
	t.Cleanup(func() { n.Close(ctx) })

	// An image: a small file read at start-up and a big one that is not.
	startupFile := make([]byte, 3<<20)
	rand.Read(startupFile)
	other := make([]byte, 16<<20)
	rand.Read(other)
	img := buildImage(t, n, func(root string) {
		if err := os.WriteFile(filepath.Join(root, "startup"), startupFile, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "other"), other, 0o644); err != nil {
			t.Fatal(err)
		}
	})

	// A plain clone records nothing.
	if _, err := n.CreateVolume(ctx, CreateOptions{ID: "plain", Snapshot: img}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.MountVolume(ctx, "plain", true); err != nil {
		t.Fatal(err)
	}
	if err := n.DeleteVolume(ctx, "plain"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if _, err := st.GetRef(ctx, trace.RefName(img)); err == nil {
		t.Fatal("a clone not marked Startup recorded a trace")
	}

	// The first container: reads the start-up file, exits (its volume is deleted).
	run := func(n *Node, id string) VolumeInfo {
		t.Helper()
		if _, err := n.CreateVolume(ctx, CreateOptions{ID: id, Snapshot: img, Startup: true}); err != nil {
			t.Fatal(err)
		}
		return mountRO(t, n, id)
	}
	c1 := run(n, "c1")
	if got, err := os.ReadFile(filepath.Join(c1.Mountpoint, "startup")); err != nil || !bytes.Equal(got, startupFile) {
		t.Fatalf("read in c1: %v", err)
	}
	if err := n.DeleteVolume(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	tr := waitTrace(t, st, img)
	if tr.Snapshot != img || tr.Bytes() < int64(len(startupFile)) || tr.Bytes() >= int64(len(startupFile)+len(other)) {
		t.Fatalf("trace of %d chunks, %d bytes: want the start-up file (%d bytes) and metadata, not the other file",
			len(tr.Chunks), tr.Bytes(), len(startupFile))
	}
	// And the file it opened, from the block clone's own mount, all of it read.
	if len(tr.Files) != 1 || tr.Files[0].Path != "/startup" || len(tr.Files[0].Ranges) == 0 ||
		tr.Files[0].Ranges[len(tr.Files[0].Ranges)-1][1] < int64(len(startupFile)) {
		t.Fatalf("the trace's files %+v; want /startup, all of it", tr.Files)
	}

	// A second node, cold, in each container root mode: the clone's chunks arrive
	// before anyone reads them. (A shared root mounts its image as it is made, so
	// the mount's own reads may come before the replay; the start-up's may not.)
	for _, mode := range []RootMode{RootBlock, RootShared} {
		n2 := openNode(t, filepath.Join(dir, "node2-"+string(mode)), st)
		t.Cleanup(func() { n2.Close(ctx) })
		if _, err := n2.CreateVolume(ctx, CreateOptions{ID: "c2", Snapshot: img, Startup: true, Mode: mode}); err != nil {
			t.Fatal(err)
		}
		cached := func() int { return cachedOf(n2, tr) }
		for deadline := time.Now().Add(10 * time.Second); cached() < len(tr.Chunks); {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d of the trace's %d chunks cached (%d replayed)", mode, cached(), len(tr.Chunks), n2.Stats().Prefetch.ReplayedChunks)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if n2.Stats().Prefetch.ReplayedChunks == 0 {
			t.Fatalf("%s: the trace was not replayed", mode)
		}
		c2 := mountRO(t, n2, "c2")
		before, _ := n2.Volume("c2")
		// The mount is warmed from the trace's files: the start-up file is in its
		// page cache before the container reads it.
		path, pages := filepath.Join(c2.Mountpoint, "startup"), (len(startupFile)+4095)/4096
		for deadline := time.Now().Add(10 * time.Second); testutil.ResidentPages(t, path, 0, -1) < pages; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d of the start-up file's %d pages in c2's page cache; want all, warmed from the trace",
					mode, testutil.ResidentPages(t, path, 0, -1), pages)
			}
		}
		if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, startupFile) {
			t.Fatalf("%s: read in c2: %v", mode, err)
		}
		info, _ := n2.Volume("c2")
		if misses := info.Stats.CacheMisses - before.Stats.CacheMisses; misses != 0 {
			t.Fatalf("%s: c2's start-up reads missed the cache %d times after the replay", mode, misses)
		}
		if err := n2.DeleteVolume(ctx, "c2"); err != nil {
			t.Fatal(err)
		}
	}

	// A change to the image (a commit) has no trace yet: a cold node replays its
	// parent's, given as a fallback, and records one of its own.
	if _, err := n.CreateVolume(ctx, CreateOptions{ID: "change", Snapshot: img}); err != nil {
		t.Fatal(err)
	}
	cv, err := n.MountVolume(ctx, "change", false)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cv.Mountpoint, "new"), []byte("a change"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := n.UnmountVolume(ctx, "change"); err != nil {
		t.Fatal(err)
	}
	img2, err := n.SnapshotVolume(ctx, "change", SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n3 := openNode(t, filepath.Join(dir, "node3"), st)
	t.Cleanup(func() { n3.Close(ctx) })
	if _, err := n3.CreateVolume(ctx, CreateOptions{ID: "c3", Snapshot: img2.ID, Startup: true,
		StartupFallback: []digest.Digest{img2.ID, img}}); err != nil {
		t.Fatal(err)
	}
	// Its parent's trace's chunks arrive before the container reads (fetched by the
	// replay, or by the warm-up of the image root from the trace's files, whichever
	// comes first: the bytes are the same).
	cachedOn3 := func() int { return cachedOf(n3, tr) }
	for deadline := time.Now().Add(10 * time.Second); cachedOn3() < len(tr.Chunks); {
		if time.Now().After(deadline) {
			t.Fatalf("the change's clone has %d of its parent's trace's %d chunks (%+v)", cachedOn3(), len(tr.Chunks), n3.Stats().Prefetch)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n3.Stats().Prefetch.TracesReplayed == 0 {
		t.Fatal("the change's clone replayed no trace")
	}
	c3 := mountRO(t, n3, "c3")
	if got, err := os.ReadFile(filepath.Join(c3.Mountpoint, "new")); err != nil || string(got) != "a change" {
		t.Fatalf("read the change in c3: %q %v", got, err)
	}
	if err := n3.DeleteVolume(ctx, "c3"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		if _, err := st.GetRef(ctx, trace.RefName(img2.ID)); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the change's own trace was not recorded")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func mountRO(t *testing.T, n *Node, id string) VolumeInfo {
	t.Helper()
	v, err := n.MountVolume(context.Background(), id, true)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// cachedOf counts the chunks of tr that n's cache holds.
func cachedOf(n *Node, tr *trace.Trace) int {
	k := 0
	for _, c := range tr.BlockmapChunks() {
		if n.Cache().Cached(c) {
			k++
		}
	}
	return k
}
