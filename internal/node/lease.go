package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/opencontainers/go-digest"
	"golang.org/x/sync/errgroup"

	"github.com/slacker-dev/slacker/internal/atomicfile"
	"github.com/slacker-dev/slacker/internal/blockmap"
	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/gc"
	"github.com/slacker-dev/slacker/internal/store"
)

// LeaseConfig configures the node's lease in the store (package gc explains
// leases). A store without records (store.Refs) gets no lease.
type LeaseConfig struct {
	Interval time.Duration // between refreshes (1m)
	TTL      time.Duration // how long a lease protects after its last refresh (24h)
	// Roots list the snapshots in use on the node besides the bases of its volumes:
	// the images named on it, the layers containerd and Docker hold.
	Roots []RootSource
	// Hold keeps each snapshot the node writes in its lease this long (1h): a
	// conversion or commit names it, or clones it, a moment later.
	Hold time.Duration
}

// A RootSource lists snapshots in use on the node that no volume clones (an
// image is only its snapshot until a container runs it). An error keeps the
// lease's last list in force: a source that cannot be read must not let its
// snapshots be collected.
type RootSource func(ctx context.Context) ([]digest.Digest, error)

// RecordRoots is the RootSource of a directory of JSON records (files ending in
// .json), each naming at most one snapshot, found by snapshotOf ("" for none).
// A record removed while it is read is skipped; one that cannot be read or
// decoded fails the listing. A missing directory lists nothing.
func RecordRoots(dir, what string, snapshotOf func(record []byte) (digest.Digest, error)) RootSource {
	return func(ctx context.Context) ([]digest.Digest, error) {
		ents, err := os.ReadDir(dir)
		if os.IsNotExist(err) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s records: %w", what, err)
		}
		var out []digest.Digest
		for _, e := range ents {
			if !strings.HasSuffix(e.Name(), ".json") {
				continue
			}
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if os.IsNotExist(err) {
				continue // removed meanwhile
			}
			var d digest.Digest
			if err == nil {
				d, err = snapshotOf(b)
			}
			if err != nil {
				return nil, fmt.Errorf("%s record %s: %w", what, e.Name(), err)
			}
			if d != "" {
				out = append(out, d)
			}
		}
		return out, nil
	}
}

// leaser keeps the node's lease.
type leaser struct {
	n      *Node
	refs   store.Refs
	cfg    LeaseConfig
	name   string // node ID
	log    *slog.Logger
	kick   chan struct{}
	stop   chan struct{}
	done   chan struct{}
	wmu    sync.Mutex // serializes writes
	mu     sync.Mutex // guards uploads, roots
	ups    map[string]gc.Upload
	roots  []digest.Digest // last roots read
	recent map[digest.Digest]time.Time
}

// nodeID returns the node's stable ID, made on first use.
func nodeID(root string) (string, error) {
	p := filepath.Join(root, "node-id")
	if b, err := os.ReadFile(p); err == nil {
		if id := strings.TrimSpace(string(b)); id != "" {
			return id, nil
		}
	}
	b := make([]byte, 8)
	rand.Read(b)
	id := hex.EncodeToString(b)
	if err := atomicfile.WriteFile(p, []byte(id+"\n"), 0o600); err != nil {
		return "", err
	}
	return id, nil
}

func startLeaser(n *Node) (*leaser, error) {
	refs, ok := n.cfg.Store.(store.Refs)
	if !ok {
		n.log.Warn("lease-unsupported", "reason", "the store keeps no records; it cannot be garbage collected safely")
		return nil, nil
	}
	id, err := nodeID(n.cfg.Root)
	if err != nil {
		return nil, fmt.Errorf("node ID: %w", err)
	}
	cfg := n.cfg.Lease
	if cfg.Interval <= 0 {
		cfg.Interval = time.Minute
	}
	if cfg.TTL <= 0 {
		cfg.TTL = 24 * time.Hour
	}
	if cfg.Hold <= 0 {
		cfg.Hold = time.Hour
	}
	l := &leaser{n: n, refs: refs, cfg: cfg, name: id, log: n.log, kick: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{}), ups: map[string]gc.Upload{},
		recent: map[digest.Digest]time.Time{}}
	go l.loop()
	return l, nil
}

func (l *leaser) loop() {
	defer close(l.done)
	ctx := context.Background()
	t := time.NewTicker(l.cfg.Interval)
	defer t.Stop()
	for {
		if err := l.write(ctx); err != nil {
			if errors.Is(err, errdefs.ErrUnsupported) {
				l.log.Warn("lease-unsupported", "err", err)
				return
			}
			l.log.Warn("lease-refresh-failed", "node", l.name, "err", err)
		}
		select {
		case <-l.stop:
			return
		case <-t.C:
		case <-l.kick:
		}
	}
}

// poke asks for a prompt refresh (the set of volumes changed).
func (l *leaser) poke() {
	if l == nil {
		return
	}
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

func (l *leaser) close() {
	if l == nil {
		return
	}
	close(l.stop)
	<-l.done
}

// write writes the lease as the node stands now. A lease lives on when the node
// stops: its volumes stay on disk and are mounted again at the next start.
func (l *leaser) write(ctx context.Context) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	snaps := map[digest.Digest]bool{}
	for _, b := range l.n.bases() {
		snaps[b] = true
	}
	if len(l.cfg.Roots) > 0 {
		var roots []digest.Digest
		var err error
		for _, src := range l.cfg.Roots {
			var rs []digest.Digest
			if rs, err = src(ctx); err != nil {
				break
			}
			roots = append(roots, rs...)
		}
		l.mu.Lock()
		if err != nil {
			l.log.Warn("lease-roots-unreadable", "err", err, "action", "keeping the last roots read")
		} else {
			l.roots = roots
		}
		roots = l.roots
		l.mu.Unlock()
		for _, r := range roots {
			snaps[r] = true
		}
	}
	host, _ := os.Hostname()
	now := time.Now().UTC()
	lease := &gc.Lease{Node: l.name, Host: host, PID: os.Getpid(), Updated: now, Expires: now.Add(l.cfg.TTL)}
	l.mu.Lock()
	for _, u := range l.ups {
		lease.Uploads = append(lease.Uploads, u)
	}
	for id, t := range l.recent {
		if now.Sub(t) > l.cfg.Hold {
			delete(l.recent, id)
		} else {
			snaps[id] = true
		}
	}
	l.mu.Unlock()
	for s := range snaps {
		lease.Snapshots = append(lease.Snapshots, s)
	}
	sort.Slice(lease.Snapshots, func(i, j int) bool { return lease.Snapshots[i] < lease.Snapshots[j] })
	sort.Slice(lease.Uploads, func(i, j int) bool { return lease.Uploads[i].ID < lease.Uploads[j].ID })
	timeout := l.n.cfg.Fetch.Attempt
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return gc.PutLease(ctx, l.refs, lease)
}

// upload is the lease side of one snapshot being written.
type upload struct {
	l     *leaser
	id    string
	fence *gc.Fence
}

// beginUpload lists the chunks in the lease, writes it, and takes the fence.
func (l *leaser) beginUpload(ctx context.Context, volumeID string, chunks []blockmap.Chunk) (*upload, error) {
	b := make([]byte, 8)
	rand.Read(b)
	u := gc.Upload{ID: hex.EncodeToString(b), Volume: volumeID, Started: time.Now().UTC()}
	for _, c := range chunks {
		u.Chunks = append(u.Chunks, c.Digest)
	}
	l.mu.Lock()
	l.ups[u.ID] = u
	l.mu.Unlock()
	up := &upload{l: l, id: u.ID}
	if err := l.write(ctx); err != nil {
		up.end("")
		return nil, fmt.Errorf("lease the chunks of the snapshot: %w", err)
	}
	f, err := gc.NewFence(ctx, l.refs)
	if err != nil {
		up.end("")
		return nil, fmt.Errorf("read the garbage collector's state: %w", err)
	}
	up.fence = f
	return up, nil
}

// clear lists the map about to be written with the upload's chunks, refreshes the
// lease, and reports whether the chunks must be checked again because a collection
// ran since they were checked.
func (u *upload) clear(ctx context.Context, mapID digest.Digest) (again bool, err error) {
	u.l.mu.Lock()
	up := u.l.ups[u.id]
	if !slices.Contains(up.Chunks, mapID) {
		up.Chunks = append(up.Chunks, mapID)
		u.l.ups[u.id] = up
	}
	u.l.mu.Unlock()
	if err := u.l.write(ctx); err != nil {
		return false, fmt.Errorf("refresh the lease before writing the map: %w", err)
	}
	ok, err := u.fence.Clear(ctx)
	if err != nil {
		return false, err
	}
	if !ok {
		u.l.log.Warn("snapshot-rechecking-chunks", "upload", u.id, "reason", "a garbage collection ran during the upload")
	}
	return !ok, nil
}

// end removes the upload from the lease at its next refresh; the map written, if
// any, is held in its place.
func (u *upload) end(written digest.Digest) {
	u.l.mu.Lock()
	if written != "" {
		u.l.recent[written] = time.Now().UTC()
	}
	delete(u.l.ups, u.id)
	u.l.mu.Unlock()
	u.l.poke()
}

// bases returns the base snapshots of the node's volumes. It takes no volume's
// lock: it runs while a snapshot holds one.
func (n *Node) bases() []digest.Digest {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []digest.Digest
	for _, x := range n.vols {
		if x.shared != nil {
			out = append(out, x.shared.image)
		} else if b := x.v.Meta().Base; b != "" {
			out = append(out, b)
		}
	}
	return out
}

// Stored reports whether the store still holds snapshot id's block map: the node
// keeps maps it has read, and a garbage collection may have removed one since.
func (n *Node) Stored(ctx context.Context, id digest.Digest) (bool, error) {
	return store.Exists(ctx, n.fetcher.Bounded(), id)
}

// checkBase verifies that every chunk of a volume's base is still in the store,
// after a collection ran during an upload: a node whose lease expired (stopped for
// longer than its TTL) may have lost them, and a map naming them must not be
// written.
func (n *Node) checkBase(ctx context.Context, base *blockmap.Map, baseID digest.Digest) error {
	st := n.fetcher.Bounded()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for _, c := range base.Chunks {
		g.Go(func() error {
			ok, err := store.Exists(gctx, st, c.Digest)
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("chunk %s of the base snapshot %s is no longer in the store (collected while this node's lease had expired?): %w",
					c.Digest, baseID, errdefs.ErrNotFound)
			}
			return nil
		})
	}
	return g.Wait()
}

// Store returns the node's store, as configured (with its records).
func (n *Node) Store() store.Store { return n.cfg.Store }
