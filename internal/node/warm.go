package node

import (
	"context"
	"sync"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/prefetch"
)

// warmObject is the object WarmStore asks about: any name does, none is there.
var warmObject = digest.FromString("slacker: a connection opened ahead of a pull")

// warmTimeout bounds WarmStore's requests.
const warmTimeout = 10 * time.Second

// WarmStore opens connections to a remote store ahead of a pull, in the
// background: as many as a start-up replay has loads in flight, each by asking
// the store about an object that is not there (a HEAD, in S3). A pull's own
// requests to the registry take two round trips before it names the image
// (the connection, the manifest); meanwhile these connections are made, and the
// image's block map, its start-up trace, the image root's first reads and the
// replay's first loads then go out on open connections, not each a round trip
// later behind a new one. Nothing is done for a local store, nor while a
// warming is under way.
func (n *Node) WarmStore() {
	if n.localStore {
		return
	}
	n.prepareMu.Lock()
	defer n.prepareMu.Unlock()
	if n.closing.Load() || !n.warming.CompareAndSwap(false, true) {
		return
	}
	conns := prefetch.DefaultReplayParallel
	n.preparing.Add(1)
	go func() {
		defer n.preparing.Done()
		defer n.warming.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), warmTimeout)
		defer cancel()
		start := time.Now()
		var wg sync.WaitGroup
		for range conns {
			wg.Go(func() { n.cfg.Store.Stat(ctx, warmObject) }) // not found, as intended; any other answer opened a connection too
		}
		wg.Wait()
		n.log.Debug("store-warmed", "connections", conns, "took", time.Since(start))
	}()
}
