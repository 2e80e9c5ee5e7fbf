package node

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/slacker-dev/slacker/internal/store/local"
	"github.com/slacker-dev/slacker/internal/testutil"
)

// PrepareImage, as a pull asks it, mounts the image's root and replays its
// start-up trace before any container exists: the trace's chunks are cached and
// its file is in the root's page cache. The image's container then stands on that
// root, taking over the hold (one user, not two); once it goes, the root lingers.
// A prepared root no container takes is let go after PrepareHold (it lingers). A
// node whose containers get block clones prepares nothing.
func TestPrepareImage(t *testing.T) {
	requirePrivileged(t)
	testutil.RequireOverlay(t)
	ctx := context.Background()
	dir := t.TempDir()
	st, err := local.Open(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	open := func(name string, mode RootMode, hold time.Duration) *Node {
		n, err := Open(ctx, Config{Root: filepath.Join(dir, name), Store: st, CacheBytes: 256 << 20, DefaultSize: 1 << 30,
			ImageRootLinger: time.Hour, StartupWindow: time.Hour, PrepareHold: hold, RootMode: mode, Logger: testLogger()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close(ctx) })
		return n
	}
	// A first node records the image's trace: its container reads the big file.
	n := open("node1", RootShared, 0)
	img, big := sharedImage(t, n)
	startReadingBig(t, n, "c1", img, big)
	if err := n.DeleteVolume(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	tr := waitTrace(t, st, img)
	n.Close(ctx)

	// A cold node prepares the image: no container, yet the trace is replayed
	// and the file warmed.
	n2 := open("node2", RootShared, time.Hour)
	n2.PrepareImage(img)
	pages := (len(big) + 4095) / 4096
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		root, err := n2.Volume(imageRootID(img))
		if err == nil && root.Mountpoint != "" && cachedOf(n2, tr) == len(tr.Chunks) &&
			testutil.ResidentPages(t, filepath.Join(root.Mountpoint, "big"), 0, -1) == pages {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("prepared image: root %+v (%v), %d of the trace's %d chunks cached", root, err, cachedOf(n2, tr), len(tr.Chunks))
		}
	}
	if vi, err := n2.Volume(imageRootID(img)); err != nil || vi.Idle {
		t.Fatalf("a prepared root: %+v %v; want it held for its container, not idle", vi, err)
	}
	n2.PrepareImage(img) // twice: still one hold
	time.Sleep(50 * time.Millisecond)
	users := func(n *Node) (int, bool) {
		n.imagesMu.Lock()
		ir := n.images[img]
		n.imagesMu.Unlock()
		ir.mu.Lock()
		defer ir.mu.Unlock()
		return ir.users, ir.held.Load()
	}
	if u, held := users(n2); u != 1 || !held {
		t.Fatalf("prepared twice: %d users, held %v; want 1, held", u, held)
	}
	if _, err := n2.CreateVolume(ctx, CreateOptions{ID: "c2", Snapshot: img, Mode: RootShared, Startup: true}); err != nil {
		t.Fatal(err)
	}
	if u, held := users(n2); u != 1 || held {
		t.Fatalf("the container took the prepared root: %d users, held %v; want 1, not held", u, held)
	}
	c2 := mountRO(t, n2, "c2")
	if got, err := os.ReadFile(filepath.Join(c2.Mountpoint, "big")); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("c2: the big file: %v", err)
	}
	if err := n2.DeleteVolume(ctx, "c2"); err != nil {
		t.Fatal(err)
	}
	if vi, err := n2.Volume(imageRootID(img)); err != nil || !vi.Idle {
		t.Fatalf("the image root after its container: %+v %v; want it lingering, idle", vi, err)
	}

	// Prepared, never used: let go after the hold, then lingering.
	n3 := open("node3", RootShared, 2*time.Second)
	n3.PrepareImage(img)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if vi, err := n3.Volume(imageRootID(img)); err == nil && vi.Mountpoint != "" {
			if vi.Idle {
				t.Fatal("a root just prepared is idle")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("node3 prepared no root")
		}
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		vi, err := n3.Volume(imageRootID(img))
		if err == nil && vi.Idle {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a prepared root no container took: %+v %v; want it lingering, idle, after the hold", vi, err)
		}
	}

	// Block clones: nothing to prepare.
	n4 := open("node4", RootBlock, time.Hour)
	n4.PrepareImage(img)
	time.Sleep(200 * time.Millisecond)
	if _, err := n4.Volume(imageRootID(img)); err == nil {
		t.Fatal("a node of block clones mounted an image root to prepare")
	}
}
