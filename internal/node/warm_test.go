package node

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/prefetch"
	"github.com/slacker-dev/slacker/internal/store"
	"github.com/slacker-dev/slacker/internal/store/local"
)

// remoteLike is a local store that does not offer its files (as a remote store
// does not), counting the Stats asked of it; each Stat waits for release.
type remoteLike struct {
	store.Store
	stats   atomic.Int64
	release chan struct{}
}

func (r *remoteLike) Stat(ctx context.Context, d digest.Digest) (store.Info, error) {
	r.stats.Add(1)
	select {
	case <-r.release:
	case <-ctx.Done():
	}
	return r.Store.Stat(ctx, d)
}

// TestWarmStore: a pull's warming asks a remote store about one absent object on
// as many requests as a replay has loads in flight, at once; a second warming
// while the first is under way asks nothing; a local store is never asked.
func TestWarmStore(t *testing.T) {
	requirePrivileged(t)
	ctx := context.Background()
	dir := t.TempDir()
	st, err := local.Open(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	rs := &remoteLike{Store: st, release: make(chan struct{})}
	n, err := Open(ctx, Config{Root: filepath.Join(dir, "node"), Store: rs, CacheBytes: 64 << 20, DefaultSize: 1 << 30, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close(context.Background()) })
	before := rs.stats.Load() // whatever Open asked
	n.WarmStore()
	deadline := time.Now().Add(5 * time.Second)
	for rs.stats.Load()-before < prefetch.DefaultReplayParallel && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	n.WarmStore() // under way: nothing more
	time.Sleep(50 * time.Millisecond)
	if got := rs.stats.Load() - before; got != prefetch.DefaultReplayParallel {
		t.Fatalf("a warming asked %d times, want %d, all at once", got, prefetch.DefaultReplayParallel)
	}
	close(rs.release)
	for n.warming.Load() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n.warming.Load() {
		t.Fatal("the warming did not end")
	}

	// A local store (its files read in place) is not warmed.
	ln, _ := newNode(t)
	ln.WarmStore()
	if ln.warming.Load() {
		t.Fatal("a node with a local store warmed it")
	}
}
