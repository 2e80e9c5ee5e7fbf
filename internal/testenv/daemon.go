package testenv

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/slacker-dev/slacker/internal/api"
	"github.com/slacker-dev/slacker/internal/daemon"
	"github.com/slacker-dev/slacker/internal/fetch"
	"github.com/slacker-dev/slacker/internal/mount"
	"github.com/slacker-dev/slacker/internal/node"
	"github.com/slacker-dev/slacker/internal/store"
	"github.com/slacker-dev/slacker/internal/store/local"
	"github.com/slacker-dev/slacker/internal/testutil"
	"github.com/slacker-dev/slacker/internal/volume"
)

// RequirePrivileged needs root, FUSE, loop devices and e2fsprogs.
func RequirePrivileged(t testing.TB) {
	t.Helper()
	testutil.RequireRoot(t)
	testutil.RequireFile(t, "/dev/fuse")
	testutil.RequireFile(t, "/dev/loop-control")
	testutil.RequireTool(t, "mkfs.ext4", "e2fsck")
}

// Daemon is an in-process slackerd.
type Daemon struct {
	Client    *api.Client
	Node      *node.Node
	StateRoot string // like slackerd's --root
	StoreDir  string
	Socket    string
}

// DaemonOptions configure StartDaemon.
type DaemonOptions struct {
	// StoreDir shares a store with other daemons; empty makes a fresh one.
	StoreDir   string
	CacheBytes int64
	// CacheMemBytes bounds the cache's memory tier (64 MiB if zero).
	CacheMemBytes int64
	Size          int64 // default size of blank filesystems (1 GiB)
	// WrapStore, if set, wraps the store the node uses (e.g. in a faultstore).
	WrapStore func(store.Store) store.Store
	Fetch     fetch.Options    // the node's fetch options (defaults if zero)
	Lease     node.LeaseConfig // the node's lease in the store (defaults if zero)
	Logger    *slog.Logger     // the node's logger (none if nil)
}

// StartDaemon starts a node and its API server in this process.
func StartDaemon(t testing.TB, o DaemonOptions) *Daemon {
	t.Helper()
	RequirePrivileged(t)
	root := t.TempDir()
	if o.StoreDir == "" {
		o.StoreDir = filepath.Join(root, "store")
	}
	if o.CacheBytes == 0 {
		o.CacheBytes = 1 << 30
	}
	if o.Size == 0 {
		o.Size = 1 << 30
	}
	st, err := local.Open(o.StoreDir)
	if err != nil {
		t.Fatal(err)
	}
	var nst store.Store = st
	if o.WrapStore != nil {
		nst = o.WrapStore(st)
	}
	ctx := context.Background()
	n, err := node.Open(ctx, node.Config{Root: filepath.Join(root, "node"), Store: nst, CacheBytes: o.CacheBytes,
		CacheMemBytes: o.CacheMemBytes, DefaultSize: o.Size, Fetch: o.Fetch, Lease: o.Lease, Logger: o.Logger})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(root, "slackerd.sock")
	srv := daemon.New(n, daemon.Options{StateRoot: root, Store: "local:" + o.StoreDir, ChunkSize: volume.DefaultChunkSize})
	done := make(chan error, 1)
	go func() { done <- srv.Serve(sock) }()
	d := &Daemon{Client: api.NewClient(sock), Node: n, StateRoot: root, StoreDir: o.StoreDir, Socket: sock}
	t.Cleanup(func() {
		srv.Shutdown(context.Background())
		<-done
		if err := n.Close(context.Background()); err != nil {
			t.Errorf("close node: %v", err)
		}
		CheckNoMounts(t, root)
	})
	for i := 0; ; i++ {
		if _, err := d.Client.Info(ctx); err == nil {
			break
		} else if i > 200 {
			t.Fatalf("slackerd did not answer: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return d
}

// CheckNoMounts fails the test if anything is still mounted under dir or a loop
// device is backed by a file under it, and cleans it up.
func CheckNoMounts(t testing.TB, dir string) {
	t.Helper()
	ms, _ := mount.Mounts(dir)
	for _, m := range ms {
		t.Errorf("left mounted: %s (%s)", m.Target, m.FSType)
		mount.Unmount(m.Target, time.Second)
	}
	loops, _ := mount.ListLoops()
	for _, l := range loops {
		if rel, err := filepath.Rel(dir, l.BackingFile); err == nil && filepath.IsLocal(rel) {
			t.Errorf("left attached: %s -> %s", l.Path, l.BackingFile)
			mount.DetachLoop(l.Path)
		}
	}
}

// waitSocket waits until a daemon answers on sock.
func waitSocket(ctx context.Context, sock string) error {
	c := api.NewClient(sock)
	for {
		_, err := c.Info(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(10 * time.Millisecond):
		}
	}
}
