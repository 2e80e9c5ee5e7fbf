package node

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/store"
	"github.com/slacker-dev/slacker/internal/store/local"
	"github.com/slacker-dev/slacker/internal/testutil"
)

// TestVolumeReadahead: with Config.VolumeReadahead, the loop device of every
// mounted volume, read-write and read-only, reads ahead that much; without it,
// DefaultVolumeReadahead. A loop device keeps the readahead its previous user
// set, so each device is set to 2.5 MiB after its check: the next mount, most
// often of the same device, must not inherit it.
func TestVolumeReadahead(t *testing.T) {
	requirePrivileged(t)
	ctx := context.Background()
	for _, ra := range []int64{0, 16 << 10} {
		dir := t.TempDir()
		st, err := local.Open(filepath.Join(dir, "store"))
		if err != nil {
			t.Fatal(err)
		}
		n, err := Open(ctx, Config{Root: filepath.Join(dir, "node"), Store: st, CacheBytes: 256 << 20, DefaultSize: 1 << 30,
			VolumeReadahead: ra, Logger: testLogger()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close(ctx) })
		blank, err := n.MakeFilesystem(ctx, 64<<20)
		if err != nil {
			t.Fatal(err)
		}
		for i, readOnly := range []bool{false, true, false, true} {
			id := fmt.Sprintf("v%d", i)
			if _, err := n.CreateVolume(ctx, CreateOptions{ID: id, Snapshot: blank.ID}); err != nil {
				t.Fatal(err)
			}
			v, err := n.MountVolume(ctx, id, readOnly)
			if err != nil {
				t.Fatal(err)
			}
			setting := filepath.Join("/sys/block", filepath.Base(v.Device), "queue", "read_ahead_kb")
			b, err := os.ReadFile(setting)
			if err != nil {
				t.Fatal(err)
			}
			kb, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			want := ra >> 10
			if ra == 0 {
				want = DefaultVolumeReadahead >> 10
			}
			if kb != want {
				t.Errorf("readahead %d, read-only %v: %s reads ahead %d KiB, want %d", ra, readOnly, v.Device, kb, want)
			}
			if err := os.WriteFile(setting, []byte("2560"), 0); err != nil {
				t.Fatal(err)
			}
			if err := n.UnmountVolume(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// remoteStore is a local store seen as a remote one: without ObjectFiles, a read
// fetches its chunks, as it does an S3 or registry store's.
type remoteStore struct {
	store.Store
	store.Refs
}

// TestStartupReadahead: on a node whose store is remote, a start's volume (the
// image root of a shared root, a block clone) reads ahead StartupReadahead from
// its mount until its start-up window closes, and the volume readahead from
// then on; a volume made for no start keeps the volume readahead, and so does
// every volume of a node with a local store, or with the start-up readahead
// off.
func TestStartupReadahead(t *testing.T) {
	requirePrivileged(t)
	testutil.RequireOverlay(t)
	ctx := context.Background()
	dir := t.TempDir()
	st, err := local.Open(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	readahead := func(dev string) int64 {
		t.Helper()
		b, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(dev), "queue", "read_ahead_kb"))
		if err != nil {
			t.Fatal(err)
		}
		kb, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return kb << 10
	}
	const window = 2 * time.Second
	var img digest.Digest
	for i, tc := range []struct {
		name    string
		remote  bool
		mode    RootMode
		setting int64 // Config.StartupReadahead
		want    int64 // during the window
	}{
		{"remote, shared root", true, RootShared, 0, DefaultStartupReadahead},
		{"remote, block clone, 64 KiB", true, RootBlock, 64 << 10, 64 << 10},
		{"remote, off", true, RootShared, -1, DefaultVolumeReadahead},
		{"local store", false, RootShared, 0, DefaultVolumeReadahead},
	} {
		var s store.Store = st
		if tc.remote {
			s = remoteStore{st, st}
		}
		n, err := Open(ctx, Config{Root: filepath.Join(dir, fmt.Sprint("node", i)), Store: s, CacheBytes: 256 << 20,
			DefaultSize: 1 << 30, StartupWindow: window, StartupReadahead: tc.setting, RootMode: tc.mode, Logger: testLogger(),
			ReplayReadahead: -1}) // the cases share a store: a later one replays an earlier one's trace (TestReplayReadahead)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close(ctx) })
		if img == "" {
			img, _ = sharedImage(t, n)
		}
		mounted := time.Now()
		if _, err := n.CreateVolume(ctx, CreateOptions{ID: "c", Snapshot: img, Mode: tc.mode, Startup: true}); err != nil {
			t.Fatal(err)
		}
		v, err := n.MountVolume(ctx, "c", false)
		if err != nil {
			t.Fatal(err)
		}
		dev := v.Device
		if tc.mode == RootShared {
			root, err := n.Volume(imageRootID(img))
			if err != nil {
				t.Fatal(err)
			}
			dev = root.Device
		}
		if got := readahead(dev); got != tc.want {
			t.Errorf("%s: the start's volume reads ahead %d KiB, want %d", tc.name, got>>10, tc.want>>10)
		}
		// A volume made for no start: the volume readahead.
		if _, err := n.CreateVolume(ctx, CreateOptions{ID: "plain", Snapshot: img}); err != nil {
			t.Fatal(err)
		}
		pv, err := n.MountVolume(ctx, "plain", true)
		if err != nil {
			t.Fatal(err)
		}
		if got := readahead(pv.Device); got != DefaultVolumeReadahead {
			t.Errorf("%s: a volume made for no start reads ahead %d KiB, want %d", tc.name, got>>10, DefaultVolumeReadahead>>10)
		}
		if tc.want != DefaultVolumeReadahead {
			// The window closes: the volume readahead comes back.
			for readahead(dev) != DefaultVolumeReadahead {
				if time.Since(mounted) > window+10*time.Second {
					t.Fatalf("%s: %s still reads ahead %d KiB %v after its mount, the window being %v",
						tc.name, dev, readahead(dev)>>10, time.Since(mounted).Round(time.Millisecond), window)
				}
				time.Sleep(50 * time.Millisecond)
			}
			if since := time.Since(mounted); since < window {
				t.Errorf("%s: the volume readahead came back %v after the mount, before the window closed (%v)", tc.name, since, window)
			}
		}
		for _, id := range []string{"c", "plain"} {
			if err := n.DeleteVolume(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
		if err := n.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReplayReadahead: on a node whose store is remote, a start that replays
// its image's trace reads ahead ReplayReadahead (by default
// DefaultReplayReadahead) from then until its start-up window closes, when the
// volume readahead comes back; with the replay readahead off, it keeps the
// start-up readahead throughout the window.
func TestReplayReadahead(t *testing.T) {
	requirePrivileged(t)
	testutil.RequireOverlay(t)
	ctx := context.Background()
	readahead := func(dev string) int64 {
		t.Helper()
		b, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(dev), "queue", "read_ahead_kb"))
		if err != nil {
			t.Fatal(err)
		}
		kb, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return kb << 10
	}
	const window = 3 * time.Second
	for _, tc := range []struct {
		name    string
		mode    RootMode
		setting int64 // Config.ReplayReadahead
		want    int64 // once the replay began
	}{
		{"shared root", RootShared, 0, DefaultReplayReadahead},
		{"block clone, 4 KiB", RootBlock, 4 << 10, 4 << 10},
		{"shared root, off", RootShared, -1, DefaultStartupReadahead},
	} {
		dir := t.TempDir()
		st, err := local.Open(filepath.Join(dir, "store"))
		if err != nil {
			t.Fatal(err)
		}
		open := func(name string) *Node {
			n, err := Open(ctx, Config{Root: filepath.Join(dir, name), Store: remoteStore{st, st}, CacheBytes: 256 << 20,
				DefaultSize: 1 << 30, StartupWindow: window, ReplayReadahead: tc.setting, RootMode: tc.mode, Logger: testLogger()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { n.Close(ctx) })
			return n
		}
		// The first start records the trace: its container reads the big file.
		n := open("node1")
		img, big := sharedImage(t, n)
		if _, err := n.CreateVolume(ctx, CreateOptions{ID: "c", Snapshot: img, Mode: tc.mode, Startup: true}); err != nil {
			t.Fatal(err)
		}
		v, err := n.MountVolume(ctx, "c", false)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := os.ReadFile(filepath.Join(v.Mountpoint, "big")); err != nil || !bytes.Equal(got, big) {
			t.Fatalf("%s: the big file: %v", tc.name, err)
		}
		if err := n.DeleteVolume(ctx, "c"); err != nil {
			t.Fatal(err)
		}
		waitTrace(t, st, img)
		if err := n.Close(ctx); err != nil {
			t.Fatal(err)
		}

		// The next node's start replays it.
		n2 := open("node2")
		mounted := time.Now()
		if _, err := n2.CreateVolume(ctx, CreateOptions{ID: "c", Snapshot: img, Mode: tc.mode, Startup: true}); err != nil {
			t.Fatal(err)
		}
		v, err = n2.MountVolume(ctx, "c", false)
		if err != nil {
			t.Fatal(err)
		}
		dev := v.Device
		if tc.mode == RootShared {
			root, err := n2.Volume(imageRootID(img))
			if err != nil {
				t.Fatal(err)
			}
			dev = root.Device
		}
		for deadline := time.Now().Add(10 * time.Second); n2.Stats().Prefetch.TracesReplayed == 0; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the next node's start replayed no trace: %+v", tc.name, n2.Stats().Prefetch)
			}
		}
		for deadline := time.Now().Add(window / 2); readahead(dev) != tc.want && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		if got := readahead(dev); got != tc.want && time.Since(mounted) < window {
			t.Errorf("%s: the replaying start's volume reads ahead %d KiB, want %d", tc.name, got>>10, tc.want>>10)
		}
		// The window closes: the volume readahead comes back.
		for readahead(dev) != DefaultVolumeReadahead {
			if time.Since(mounted) > window+10*time.Second {
				t.Fatalf("%s: %s still reads ahead %d KiB %v after its mount, the window being %v",
					tc.name, dev, readahead(dev)>>10, time.Since(mounted).Round(time.Millisecond), window)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err := n2.DeleteVolume(ctx, "c"); err != nil {
			t.Fatal(err)
		}
		if tc.setting == 0 {
			recordingWhileReplaying(t, n2, st, img, tc.mode, open)
		}
		if err := n2.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// recordingWhileReplaying: a change of img (a commit) has no trace yet, so a
// cold node's start of it replays img's trace, given as a fallback, while it
// records its own: it keeps the start-up readahead, which decides what its
// trace holds.
func recordingWhileReplaying(t *testing.T, n *Node, st *local.Store, img digest.Digest, mode RootMode, open func(string) *Node) {
	t.Helper()
	ctx := context.Background()
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
	if err := n.DeleteVolume(ctx, "change"); err != nil {
		t.Fatal(err)
	}
	n3 := open("node3")
	if _, err := n3.CreateVolume(ctx, CreateOptions{ID: "c3", Snapshot: img2.ID, Mode: mode, Startup: true,
		StartupFallback: []digest.Digest{img2.ID, img}}); err != nil {
		t.Fatal(err)
	}
	v, err := n3.MountVolume(ctx, "c3", false)
	if err != nil {
		t.Fatal(err)
	}
	dev := v.Device
	if mode == RootShared {
		root, err := n3.Volume(imageRootID(img2.ID))
		if err != nil {
			t.Fatal(err)
		}
		dev = root.Device
	}
	for deadline := time.Now().Add(10 * time.Second); n3.Stats().Prefetch.TracesReplayed == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the change's start replayed no trace: %+v", n3.Stats().Prefetch)
		}
	}
	time.Sleep(300 * time.Millisecond) // a replay readahead would be set by now
	b, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(dev), "queue", "read_ahead_kb"))
	if err != nil {
		t.Fatal(err)
	}
	if kb := strings.TrimSpace(string(b)); kb != strconv.Itoa(DefaultStartupReadahead>>10) {
		t.Errorf("a start that records its trace while it replays its parent's reads ahead %s KiB, want the start-up readahead, %d",
			kb, DefaultStartupReadahead>>10)
	}
	if err := n3.DeleteVolume(ctx, "c3"); err != nil {
		t.Fatal(err)
	}
	if err := n3.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
