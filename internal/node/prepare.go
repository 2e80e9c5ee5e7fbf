package node

import (
	"context"
	"fmt"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/store"
)

// DefaultPrepareHold is how long a root PrepareImage made waits for its container
// before it is left to linger as any idle root: the start-up window, so that a
// start recorded from the preparation is recorded whole.
const DefaultPrepareHold = 30 * time.Second

// FetchTraceAhead has the start-up trace of snapshot fetched in the background,
// ahead of a start expected soon (a pull names the snapshot), so that the start's
// replay need not wait a round trip for it (prefetch.Engine.FetchTraceAhead).
func (n *Node) FetchTraceAhead(snapshot digest.Digest) {
	if store.CheckDigest(snapshot) == nil {
		n.prefetch.FetchTraceAhead(snapshot)
	}
}

// PrepareImage readies the image snapshot, in the background, for a container
// expected soon (its image was just pulled): in the shared root mode, it mounts
// the image's root and begins the start-up as a container's would, so that its
// trace is replayed (and the files warmed) from the pull on, not from the
// container's creation; the container then finds the root mounted and its
// start-up data on its way. The root is held for the container for
// Config.PrepareHold, then lingers as an idle root does. It does nothing in the
// block root mode (each container's clone is its own), nor when idle roots do
// not linger (the root would go at once). A failure is logged: the container
// makes its root itself.
func (n *Node) PrepareImage(snapshot digest.Digest) {
	if n.cfg.RootMode != RootShared || n.cfg.ImageRootLinger <= 0 {
		return
	}
	n.prepareMu.Lock()
	defer n.prepareMu.Unlock()
	if n.closing.Load() {
		return
	}
	n.preparing.Add(1)
	go func() {
		defer n.preparing.Done()
		if err := n.prepareImage(context.Background(), snapshot); err != nil {
			n.log.Warn("image-prepare-failed", "snapshot", snapshot, "err", err)
		}
	}()
}

// prepareImage mounts snapshot's image root and holds it (PrepareImage).
func (n *Node) prepareImage(ctx context.Context, snapshot digest.Digest) error {
	if err := n.checkShared(); err != nil {
		return err
	}
	// A root prepared before is taken over as a container takes it: one hold,
	// renewed.
	ir, err := n.acquireImage(ctx, snapshot, true, nil, true)
	if err != nil {
		return fmt.Errorf("prepare %s: %w", snapshot, err)
	}
	ir.mu.Lock()
	ir.holds++
	gen := ir.holds
	ir.hold = time.AfterFunc(n.cfg.PrepareHold, func() { n.dropHold(snapshot, ir, gen) })
	ir.mu.Unlock()
	n.log.Info("image-prepared", "snapshot", snapshot, "hold", n.cfg.PrepareHold)
	return nil
}

// endHoldLocked ends ir's hold, if it has one, without releasing its use.
// ir.mu is held.
func (ir *imageRoot) endHoldLocked() {
	if !ir.held.Load() {
		return
	}
	ir.held.Store(false)
	if ir.hold != nil {
		ir.hold.Stop()
		ir.hold = nil
	}
}

// dropHold releases the hold of generation gen on ir, if no container took it
// over: the root then lingers as an idle root does.
func (n *Node) dropHold(snapshot digest.Digest, ir *imageRoot, gen uint64) {
	ir.mu.Lock()
	if !ir.held.Load() || ir.holds != gen {
		ir.mu.Unlock()
		return
	}
	ir.endHoldLocked()
	ir.mu.Unlock()
	n.log.Info("image-prepare-unused", "snapshot", snapshot)
	n.releaseImage(context.Background(), snapshot, ir)
}

// imageHeld reports whether snapshot's image root is held for a container
// PrepareImage expects.
func (n *Node) imageHeld(snapshot digest.Digest) bool {
	n.imagesMu.Lock()
	ir := n.images[snapshot]
	n.imagesMu.Unlock()
	return ir != nil && ir.held.Load()
}
