package node

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/blockmap"
	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/store"
	"github.com/slacker-dev/slacker/internal/trace"
)

// DefaultStartupWindow is how long after a container's clone is made its reads
// count as start-up reads.
const DefaultStartupWindow = 30 * time.Second

// replayGroup is how many chunks of a trace go in one prefetch: groups keep the
// order of the trace (what start-up reads first arrives first) while several are
// in flight at once, and a store with batch reads serves each group with few
// requests.
const replayGroup = 8

// startup is a container volume's start-up trace: replayed if the store has one
// for its snapshot, recorded (once) if it has none.
type startup struct {
	n        *Node
	x        *vol
	snapshot digest.Digest
	fallback []digest.Digest
	refs     store.Refs
	window   time.Duration

	mu      sync.Mutex
	missing bool // the store has no trace for the snapshot: record one
	written bool
	gone    bool // the volume was deleted: stop replaying
	timer   *time.Timer
}

// startStartup begins the start-up trace of a new container volume x, a clone of
// snapshot: its reads are recorded from now on, and the store's trace (if any) is
// looked up and replayed in the background.
func (n *Node) startStartup(x *vol, snapshot digest.Digest, fallback []digest.Digest) *startup {
	refs, ok := n.cfg.Store.(store.Refs)
	if !ok || n.cfg.StartupWindow < 0 || snapshot == "" {
		return nil
	}
	s := &startup{n: n, x: x, snapshot: snapshot, fallback: fallback, refs: refs, window: n.cfg.StartupWindow}
	x.v.RecordStartup(s.window, trace.MaxChunks)
	n.bg.Add(1)
	go func() {
		defer n.bg.Done()
		s.lookup()
	}()
	return s
}

func (s *startup) lookup() {
	log := s.n.log.With("volume", s.x.rec.ID, "snapshot", s.snapshot)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	t, err := s.get(ctx, s.snapshot)
	if t != nil {
		s.replay(log, t, start)
		return
	}
	if err != nil && !errors.Is(err, errdefs.ErrNotFound) && !errors.Is(err, trace.ErrMalformed) {
		// The store is away or refuses records: neither replay nor record.
		log.Warn("startup-trace-lookup-failed", "err", err)
		return
	}
	if errors.Is(err, trace.ErrMalformed) {
		log.Warn("startup-trace-invalid", "err", err, "action", "recording a new one")
	}
	s.mu.Lock()
	s.missing = true
	gone := s.gone
	if !gone {
		// Record until the window closes, or until the volume goes first.
		s.timer = time.AfterFunc(max(0, s.window-time.Since(start)), s.write)
	}
	s.mu.Unlock()
	if gone { // the container was done before the lookup was
		s.write()
		return
	}
	log.Debug("startup-trace-recording", "window", s.window)
	// Meanwhile, an earlier layer's trace is the best guess of what start-up reads.
	for _, f := range s.fallback {
		if f == s.snapshot {
			continue
		}
		if t, _ := s.get(ctx, f); t != nil {
			s.replay(log.With("trace_of", f), t, start)
			return
		}
	}
}

// get reads and decodes the trace of snapshot.
func (s *startup) get(ctx context.Context, snapshot digest.Digest) (*trace.Trace, error) {
	b, err := s.refs.GetRef(ctx, trace.RefName(snapshot))
	if err != nil {
		return nil, err
	}
	return trace.Decode(b)
}

// replay prefetches the trace's chunks into the cache in its order, a group at a
// time, as fast as the cache takes them, within the cache's budget.
func (s *startup) replay(log *slog.Logger, t *trace.Trace, start time.Time) {
	// The trace knows what start-up reads: readahead would fetch past it.
	s.x.v.PauseReadahead(max(0, s.window-time.Since(start)))
	cs := t.BlockmapChunks()
	budget := s.n.replayBudget()
	var total int64
	for i, c := range cs {
		if total+c.Size > budget {
			cs = cs[:i]
			break
		}
		total += c.Size
	}
	fetched := func(n int64) { s.x.v.AddFetched(n) }
	deadline := time.Now().Add(s.window)
	for i := 0; i < len(cs); {
		s.mu.Lock()
		gone := s.gone
		s.mu.Unlock()
		if gone || time.Now().After(deadline) {
			return
		}
		g := cs[i:min(i+replayGroup, len(cs))]
		took := s.n.cache.Prefetch(g, fetched)
		i += took
		if took < len(g) {
			time.Sleep(time.Millisecond) // every prefetch slot is busy
		}
	}
	log.Info("startup-trace-replayed", "chunks", len(cs), "bytes", total, "of_chunks", len(t.Chunks),
		"lookup_and_issue", time.Since(start))
}

// write stores the recorded trace, once, if the store had none.
func (s *startup) write() {
	s.mu.Lock()
	if !s.missing || s.written {
		s.mu.Unlock()
		return
	}
	s.written = true
	s.mu.Unlock()
	chunks := s.x.v.StartupChunks()
	if len(chunks) == 0 {
		return
	}
	s.n.bg.Add(1)
	go func() {
		defer s.n.bg.Done()
		s.put(chunks)
	}()
}

func (s *startup) put(chunks []blockmap.Chunk) {
	t := trace.New(s.snapshot, s.window, chunks)
	b, err := trace.Encode(t)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err = s.refs.PutRef(ctx, trace.RefName(s.snapshot), b)
	}
	if err != nil {
		s.n.log.Warn("startup-trace-write-failed", "snapshot", s.snapshot, "err", err)
		return
	}
	s.n.log.Info("startup-trace-recorded", "snapshot", s.snapshot, "chunks", len(t.Chunks), "bytes", t.Bytes())
}

// end is called when the volume is deleted: the trace is written now if its
// window has not closed yet, and replay stops.
func (s *startup) end() {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.gone = true
	if s.timer != nil {
		s.timer.Stop()
	}
	s.mu.Unlock()
	s.write()
}

// stop ends replay and recording without writing (the node is closing).
func (s *startup) stop() {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.gone, s.written = true, true
	if s.timer != nil {
		s.timer.Stop()
	}
	s.mu.Unlock()
}

// replayBudget bounds what one replay may prefetch: half the disk tier when there
// is one, else half the memory tier (more could evict what it fetched before the
// container reads it).
func (n *Node) replayBudget() int64 {
	if n.cfg.CacheNoDisk {
		mem := n.cfg.CacheMemBytes
		if mem <= 0 {
			mem = 64 << 20 // the cache's default
		}
		return max(mem/2, 1<<20)
	}
	return max(n.cfg.CacheBytes/2, 1<<20)
}
