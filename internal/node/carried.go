package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/blockmap"
	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/store"
)

// carriedCheckTimeout bounds the background check that a carried map's snapshot
// is in the store.
const carriedCheckTimeout = 30 * time.Second

// CarryMap takes the block map of snapshot id from a pull that read it with the
// image's manifest (the Slacker layer carries it; docs/format.md), instead of
// fetching it from the store: over a link with a 20 ms round trip, a round trip
// less before the pull returns. The map is verified against its ID (it is the
// snapshot's, whoever sent it) and decoded; it is kept as a fetched one is, and
// the snapshot's start-up trace is fetched ahead (FetchTraceAhead).
//
// What a lookup in the store also told, that the snapshot is still there, is
// checked in the background: if the store no longer has it, the map is
// forgotten, so that a container made after that fails as it would have after a
// lookup ("not in the store"); one made before the check answers fails on its
// first missing chunk, as with a map kept from an earlier pull. The caller
// passes only maps from manifests that name this node's store (a map pushed from
// another store is looked up there, where NotInStore says what to do).
func (n *Node) CarryMap(ctx context.Context, id digest.Digest, b []byte) error {
	if err := store.CheckDigest(id); err != nil {
		return fmt.Errorf("snapshot %q: %w", id, errdefs.ErrInvalid)
	}
	if err := store.Verify(id, b); err != nil {
		return fmt.Errorf("carried block map of snapshot %s: %w", id, err)
	}
	m, err := blockmap.Decode(b)
	if err != nil {
		return fmt.Errorf("snapshot %s: %w", id, err)
	}
	n.FetchTraceAhead(id)
	n.log.Info("map-carried", "snapshot", id, "bytes", len(b))
	n.mapsMu.Lock()
	_, known := n.maps[id]
	if !known {
		n.maps[id] = m
	}
	n.mapsMu.Unlock()
	path := filepath.Join(n.cfg.Root, "maps", id.Encoded())
	if !known {
		mapFiles.WriteFile(path, b, 0o600) // as mapOf: a failed write only means fetching it again
	}
	n.prepareMu.Lock()
	defer n.prepareMu.Unlock()
	if n.closing.Load() {
		return nil
	}
	n.preparing.Add(1)
	go func() {
		defer n.preparing.Done()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), carriedCheckTimeout)
		defer cancel()
		ok, err := n.Stored(ctx, id)
		switch {
		case err != nil: // the store is away: the map stays, as a kept one does
			n.log.Warn("carried-map-unchecked", "snapshot", id, "err", err)
		case !ok:
			n.log.Warn("carried-map-not-in-store", "snapshot", id,
				"err", "the pulled image's snapshot is not in the store (garbage collected?); its map is forgotten")
			n.mapsMu.Lock()
			delete(n.maps, id)
			n.mapsMu.Unlock()
			os.Remove(path)
		}
	}()
	return nil
}

// EncodedMap returns the encoded block map of snapshot id (Map's, encoded again:
// the encoding is canonical, so these are the bytes whose digest is id).
func (n *Node) EncodedMap(ctx context.Context, id digest.Digest) ([]byte, error) {
	m, err := n.Map(ctx, id)
	if err != nil {
		return nil, err
	}
	b, err := blockmap.Encode(m)
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", id, err)
	}
	if err := store.Verify(id, b); err != nil {
		return nil, fmt.Errorf("snapshot %s: its map encodes to other bytes: %w", id, err)
	}
	return b, nil
}
