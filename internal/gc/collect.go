package gc

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/opencontainers/go-digest"
	"golang.org/x/sync/errgroup"

	"github.com/slacker-dev/slacker/internal/blockmap"
	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/store"
	"github.com/slacker-dev/slacker/internal/trace"
)

// errCollecting: another collection holds the store (errdefs.ErrBusy).
var errCollecting = errdefs.New(errdefs.ErrBusy, "another garbage collection is running on this store")

// DefaultGrace is the grace period unless told otherwise.
const DefaultGrace = time.Hour

// Root is a snapshot something names.
type Root struct {
	Snapshot digest.Digest
	From     string // who names it, for messages ("name debian:bookworm")
}

// Options configure Collect.
type Options struct {
	// Roots are the named snapshots (local names, registry references). Leases
	// add theirs.
	Roots []Root
	// Grace: objects younger than this are never deleted, and young block maps
	// keep their chunks. Negative is refused; zero keeps nothing for its age.
	Grace time.Duration
	// DryRun finds the garbage and deletes nothing.
	DryRun bool
	// Skew allows for clocks of nodes and collector to differ when judging a
	// lease's expiry (zero: one minute; negative: none).
	Skew   time.Duration
	Logger *slog.Logger
	// Progress, if set, is told how far each phase has come: "list" (objects
	// listed; total 0, not known until the end), "mark" (roots whose snapshots
	// were read, of the roots), "sweep" (candidates deleted or spared, of them).
	// It is called often; it must be quick.
	Progress func(phase string, done, total int64)

	now       func() time.Time
	beforeDel func() // test hook: called before each batch of deletions
}

// Missing is an object something names that the store does not have.
type Missing struct {
	Object digest.Digest
	From   string
}

// LeaseSummary describes a lease the collector read.
type LeaseSummary struct {
	Node      string    `json:"node"`
	Host      string    `json:"host,omitempty"`
	Updated   time.Time `json:"updated"`
	Expires   time.Time `json:"expires"`
	Expired   bool      `json:"expired"`
	Snapshots int       `json:"snapshots"`
	Uploads   int       `json:"uploads"`
}

// Report says what a collection found and did.
type Report struct {
	Epoch        int64          `json:"epoch,omitempty"`
	DryRun       bool           `json:"dry_run,omitempty"`
	Objects      int            `json:"objects"`
	Bytes        int64          `json:"bytes"`
	Snapshots    int            `json:"snapshots_live"` // block maps reached
	Live         int            `json:"live"`           // objects reachable
	LiveBytes    int64          `json:"live_bytes"`
	Young        int            `json:"young"` // unreachable, kept for their age
	YoungBytes   int64          `json:"young_bytes"`
	Uploading    int            `json:"uploading"` // unreachable, kept for an upload in progress
	Deleted      int            `json:"deleted"`   // (would be, in a dry run)
	DeletedBytes int64          `json:"deleted_bytes"`
	Missing      []Missing      `json:"missing,omitempty"`
	Leases       []LeaseSummary `json:"leases,omitempty"`
	Took         time.Duration  `json:"took"`
}

type collector struct {
	st   store.Store
	refs store.Refs
	o    Options
	log  *slog.Logger
	now  time.Time

	objs    map[digest.Digest]store.Info
	marked  map[digest.Digest]bool
	maps    map[digest.Digest]bool // snapshots already walked
	leased  map[digest.Digest]bool // chunks of uploads in progress
	missing map[digest.Digest]string
	deleted map[digest.Digest]bool
	rep     *Report

	owner    string
	mu       sync.Mutex // guards lastBeat, lost
	lastBeat time.Time
	lost     error
}

// Collect deletes the store's garbage (see the package documentation) and
// reports. It refuses a store without records, and a store another collection
// holds. It stops without deleting anything it cannot prove to be garbage: an
// unreadable lease or named block map is an error, not a guess.
func Collect(ctx context.Context, st store.Store, o Options) (*Report, error) {
	start := time.Now()
	refs, err := Refs(st)
	if err != nil {
		return nil, err
	}
	if o.Grace < 0 {
		return nil, fmt.Errorf("grace period %v is negative", o.Grace)
	}
	switch {
	case o.Skew == 0:
		o.Skew = time.Minute
	case o.Skew < 0:
		o.Skew = 0
	}
	if o.now == nil {
		o.now = time.Now
	}
	c := &collector{st: st, refs: refs, o: o, log: o.Logger, now: o.now(), objs: map[digest.Digest]store.Info{},
		marked: map[digest.Digest]bool{}, maps: map[digest.Digest]bool{}, leased: map[digest.Digest]bool{},
		missing: map[digest.Digest]string{}, rep: &Report{DryRun: o.DryRun}}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if !o.DryRun {
		if err := c.claim(ctx); err != nil {
			return nil, err
		}
		hctx, stop := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan struct{})
		go func() { defer close(done); c.heartbeat(hctx) }()
		defer func() {
			stop()
			<-done
			c.release(context.WithoutCancel(ctx))
		}()
	}
	if err := c.run(ctx); err != nil {
		return c.rep, err
	}
	c.rep.Took = time.Since(start)
	return c.rep, nil
}

func (c *collector) run(ctx context.Context) error {
	// List first: an object stored after this is not a candidate at all.
	err := c.st.List(ctx, func(i store.Info) error {
		c.objs[i.Digest] = i
		c.rep.Objects++
		c.rep.Bytes += i.StoredBytes()
		c.progress("list", int64(c.rep.Objects), 0)
		return nil
	})
	if err != nil {
		return fmt.Errorf("list the store: %w", err)
	}
	c.progress("list", int64(c.rep.Objects), int64(c.rep.Objects))
	if err := c.readLeases(ctx, true); err != nil {
		return err
	}
	c.progress("mark", 0, int64(len(c.o.Roots)))
	for i, r := range c.o.Roots {
		if err := c.markSnapshot(ctx, r.Snapshot, r.From); err != nil {
			return err
		}
		c.progress("mark", int64(i+1), int64(len(c.o.Roots)))
	}
	if err := c.markYoungMaps(ctx); err != nil {
		return err
	}
	var cands []digest.Digest
	for d, info := range c.objs {
		switch {
		case c.marked[d]:
			c.rep.Live++
			c.rep.LiveBytes += info.StoredBytes()
		case c.young(info):
			c.rep.Young++
			c.rep.YoungBytes += info.StoredBytes()
		case c.leased[d]:
			c.rep.Uploading++
		default:
			cands = append(cands, d)
		}
	}
	sort.Slice(cands, func(i, j int) bool { return cands[i] < cands[j] })
	for d, from := range c.missing {
		c.rep.Missing = append(c.rep.Missing, Missing{Object: d, From: from})
	}
	sort.Slice(c.rep.Missing, func(i, j int) bool { return c.rep.Missing[i].Object < c.rep.Missing[j].Object })
	if err := c.sweep(ctx, cands); err != nil {
		return err
	}
	return c.sweepTraces(ctx)
}

// sweepTraces removes the start-up traces (package trace) of the snapshots this
// collection deleted. A trace is only a hint, so one left behind by a failure here
// costs nothing but its record.
func (c *collector) sweepTraces(ctx context.Context) error {
	if c.o.DryRun || len(c.deleted) == 0 {
		return nil
	}
	r := c.refs
	var gone []string
	err := r.ListRefs(ctx, trace.RefPrefix, func(name string) error {
		if d, ok := trace.SnapshotOf(name); ok && c.deleted[d] {
			gone = append(gone, name)
		}
		return nil
	})
	if err != nil {
		c.log.Warn("gc-traces-not-swept", "err", err)
		return nil
	}
	for _, name := range gone {
		if err := r.DeleteRef(ctx, name); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			c.log.Warn("gc-trace-not-deleted", "record", name, "err", err)
		}
	}
	return nil
}

// progress tells Options.Progress how far a phase has come.
func (c *collector) progress(phase string, done, total int64) {
	if c.o.Progress != nil {
		c.o.Progress(phase, done, total)
	}
}

func (c *collector) young(i store.Info) bool {
	return i.ModTime.IsZero() || c.now.Sub(i.ModTime) < c.o.Grace
}

// readLeases marks what live leases hold. The first read also fills the report.
func (c *collector) readLeases(ctx context.Context, first bool) error {
	recs, err := ReadLeases(ctx, c.refs)
	if err != nil {
		return err
	}
	now := c.o.now()
	for _, r := range recs {
		if r.Err != nil {
			return fmt.Errorf("lease %s is unreadable, so what it protects is unknown (remove the record if its node is gone for good): %w", r.Name, r.Err)
		}
		l := r.Lease
		live := l.Live(now, c.o.Skew)
		if first {
			ups := 0
			for _, u := range l.Uploads {
				ups += len(u.Chunks)
			}
			c.rep.Leases = append(c.rep.Leases, LeaseSummary{Node: l.Node, Host: l.Host, Updated: l.Updated, Expires: l.Expires,
				Expired: !live, Snapshots: len(l.Snapshots), Uploads: len(l.Uploads)})
			if !live {
				c.log.Info("gc-lease-expired", "node", l.Node, "host", l.Host, "expired", l.Expires)
			}
		}
		if !live {
			continue
		}
		for _, u := range l.Uploads {
			for _, d := range u.Chunks {
				c.leased[d] = true
			}
		}
		for _, s := range l.Snapshots {
			if err := c.markSnapshot(ctx, s, "lease of node "+l.Node); err != nil {
				return err
			}
		}
	}
	return nil
}

// markSnapshot marks a block map and every chunk it names.
func (c *collector) markSnapshot(ctx context.Context, id digest.Digest, from string) error {
	if c.maps[id] {
		return nil
	}
	if err := store.CheckDigest(id); err != nil {
		return fmt.Errorf("%s names snapshot %q: %w", from, id, err)
	}
	c.maps[id] = true
	info, ok := c.objs[id]
	if !ok {
		// Stored after the listing (then it is young and kept), or missing.
		if _, err := c.st.Stat(ctx, id); errors.Is(err, errdefs.ErrNotFound) {
			c.missing[id] = from
			return nil
		} else if err != nil {
			return fmt.Errorf("snapshot %s (%s): %w", id, from, err)
		}
	}
	b, err := store.ReadAllSized(ctx, c.st, id, sizeOr(info, ok))
	if err != nil {
		return fmt.Errorf("snapshot %s (%s) cannot be read, so the chunks it names are unknown (run `slacker check`): %w", id, from, err)
	}
	m, err := blockmap.Decode(b)
	if err != nil {
		return fmt.Errorf("snapshot %s (%s) is not a valid block map, so the chunks it names are unknown: %w", id, from, err)
	}
	c.marked[id] = true
	c.rep.Snapshots++
	for _, ch := range m.Chunks {
		c.marked[ch.Digest] = true
		if _, ok := c.objs[ch.Digest]; !ok {
			if _, seen := c.missing[ch.Digest]; !seen {
				if ok, err := store.Exists(ctx, c.st, ch.Digest); err != nil {
					return fmt.Errorf("chunk %s of snapshot %s: %w", ch.Digest, id, err)
				} else if !ok {
					c.missing[ch.Digest] = "snapshot " + id.String() + " (" + from + ")"
				}
			}
		}
	}
	return nil
}

func sizeOr(i store.Info, ok bool) int64 {
	if !ok || (i.Stored != 0 && i.Stored == i.Size) {
		return -1 // unknown, or perhaps a compressed object listed by its stored size
	}
	return i.Size
}

// markYoungMaps treats every young block map as a root: a snapshot just written
// is not named yet (its image is being converted or committed), and the old chunks
// it reuses must outlive it.
func (c *collector) markYoungMaps(ctx context.Context) error {
	var young []digest.Digest
	for d, info := range c.objs {
		if c.young(info) && !c.marked[d] && info.Size >= int64(len(blockmap.Magic)) {
			young = append(young, d)
		}
	}
	sort.Slice(young, func(i, j int) bool { return young[i] < young[j] })
	// Read their first bytes in parallel (a remote store pays a round trip each).
	isMap := make([]bool, len(young))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i, d := range young {
		g.Go(func() error {
			hdr, err := c.st.GetRange(gctx, d, 0, int64(len(blockmap.Magic)))
			if errors.Is(err, errdefs.ErrNotFound) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("read young object %s: %w", d, err)
			}
			isMap[i] = bytes.Equal(hdr, []byte(blockmap.Magic))
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	for i, d := range young {
		if !isMap[i] {
			continue
		}
		if err := c.markSnapshot(ctx, d, "young snapshot"); err != nil {
			// A young object that looks like a map and is not one keeps only itself.
			c.log.Warn("gc-young-map-unreadable", "object", d, "err", err)
		}
	}
	return nil
}

const batchSize = 256

// sweep deletes candidates in batches. Before each batch it checks that it still
// holds the store, and reads leases again: a snapshot put to use or an upload
// registered since the first read saves its objects.
func (c *collector) sweep(ctx context.Context, cands []digest.Digest) error {
	total, done := int64(len(cands)), int64(0)
	c.progress("sweep", 0, total)
	for len(cands) > 0 {
		n := min(batchSize, len(cands))
		batch := cands[:n]
		cands = cands[n:]
		if c.o.beforeDel != nil {
			c.o.beforeDel()
		}
		if !c.o.DryRun {
			if err := c.holding(); err != nil {
				return err
			}
		}
		if err := c.readLeases(ctx, false); err != nil {
			return err
		}
		for _, d := range batch {
			if c.marked[d] || c.leased[d] {
				c.rep.Uploading++ // saved by a lease read during the sweep
				continue
			}
			size := c.objs[d].StoredBytes()
			if !c.o.DryRun {
				err := c.st.Delete(ctx, d)
				if errors.Is(err, errdefs.ErrNotFound) {
					continue
				}
				if err != nil {
					return fmt.Errorf("delete %s: %w", d, err)
				}
			}
			c.rep.Deleted++
			c.rep.DeletedBytes += size
			if c.deleted == nil {
				c.deleted = map[digest.Digest]bool{}
			}
			c.deleted[d] = true
		}
		done += int64(n)
		c.progress("sweep", done, total)
		c.log.Debug("gc-batch", "deleted", c.rep.Deleted, "left", len(cands))
	}
	return nil
}

func (c *collector) claim(ctx context.Context) error {
	s, err := ReadState(ctx, c.refs)
	if err != nil {
		if noRecords(err) {
			return ErrNoRecords
		}
		return err
	}
	now := c.o.now()
	if s.Active(now) {
		return fmt.Errorf("%w (epoch %d, on %s pid %d, since %s; a collection that died is ignored after %v)",
			errCollecting, s.Epoch, s.Host, s.PID, s.Started.Format(time.RFC3339), StaleAfter)
	}
	if s.Running {
		c.log.Warn("gc-took-over", "epoch", s.Epoch, "host", s.Host, "pid", s.PID, "heartbeat", s.Heartbeat)
	}
	b := make([]byte, 8)
	rand.Read(b)
	c.owner = hex.EncodeToString(b)
	host, _ := os.Hostname()
	ns := State{Epoch: s.Epoch + 1, Running: true, Owner: c.owner, Host: host, PID: os.Getpid(), Started: now, Heartbeat: now}
	if err := writeState(ctx, c.refs, ns); err != nil {
		return err
	}
	got, err := ReadState(ctx, c.refs)
	if err != nil {
		return err
	}
	if got.Owner != c.owner {
		return fmt.Errorf("%w (epoch %d, on %s pid %d, started at the same moment)", errCollecting, got.Epoch, got.Host, got.PID)
	}
	c.rep.Epoch = ns.Epoch
	c.lastBeat = now
	c.log.Info("gc-started", "epoch", ns.Epoch)
	return nil
}

// heartbeat refreshes the state record while the collection runs.
func (c *collector) heartbeat(ctx context.Context) {
	t := time.NewTicker(StaleAfter / 8)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s, err := ReadState(ctx, c.refs)
		if err == nil && s.Owner != c.owner {
			c.mu.Lock()
			c.lost = fmt.Errorf("%w: the gc record was taken over (epoch %d, %s)", errCollecting, s.Epoch, s.Host)
			c.mu.Unlock()
			return
		}
		if err != nil {
			continue
		}
		now := c.o.now()
		s.Heartbeat = now
		if writeState(ctx, c.refs, s) == nil {
			c.mu.Lock()
			c.lastBeat = now
			c.mu.Unlock()
		}
	}
}

// holding fails if the collection may no longer count as running to others: the
// record was taken over, or its heartbeat is old enough that uploads may have
// stopped waiting for it.
func (c *collector) holding() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lost != nil {
		return c.lost
	}
	if age := c.o.now().Sub(c.lastBeat); age > StaleAfter/2 {
		return fmt.Errorf("%w: this collection could not refresh its record for %v; stopped before deleting more", errCollecting, age.Round(time.Second))
	}
	return nil
}

func (c *collector) release(ctx context.Context) {
	s, err := ReadState(ctx, c.refs)
	if err != nil || s.Owner != c.owner {
		return
	}
	s.Running, s.Finished, s.Heartbeat = false, c.o.now(), c.o.now()
	if err := writeState(ctx, c.refs, s); err != nil {
		c.log.Error("gc-release-failed", "err", err)
	}
	c.log.Info("gc-finished", "epoch", s.Epoch, "deleted", c.rep.Deleted)
}
