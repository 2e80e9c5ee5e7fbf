package prefetch

import (
	"cmp"
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/blockmap"
	"github.com/slacker-dev/slacker/internal/cache"
	"github.com/slacker-dev/slacker/internal/store"
)

// Cache is what prefetch needs from the node's chunk cache (*cache.Cache has it).
type Cache interface {
	// ReadChunk fills p with bytes [off, off+len(p)) of chunk c, verified, and
	// says where the chunk came from.
	ReadChunk(ctx context.Context, c blockmap.Chunk, p []byte, off int64) (cache.Origin, error)
	// Cached reports whether the cache holds c.
	Cached(c blockmap.Chunk) bool
	// Load brings chunks into the cache and waits for them, calling fn once per
	// distinct chunk (never concurrently) with where it came from or why not.
	Load(ctx context.Context, cs []blockmap.Chunk, fn func(c blockmap.Chunk, o cache.Origin, err error))
	// BatchLoads reports whether a Load of several chunks saves requests.
	BatchLoads() bool
}

// DefaultStartupWindow is how long after a container root is made its reads
// count as start-up reads.
const DefaultStartupWindow = 30 * time.Second

// DefaultMaxReadahead bounds what is fetched ahead of a sequential reader: 16 MiB
// keeps a 1 Gbit/s link with a 50 ms round trip busy (its bandwidth-delay product
// is 6 MB; docs/BENCHMARKS.md) and is a quarter of the default memory tier.
const DefaultMaxReadahead = 16 << 20

// DefaultFirstStartAhead is what a start with no trace to replay loads after each
// of its reads, for its start-up window, when its store is FirstStartMinRoundTrip
// or more away (Options.FirstStartAhead; docs/design.md, "A first start reads
// near what it read").
const DefaultFirstStartAhead = 1 << 20

// FirstStartMinRoundTrip is the store round trip from which a first start loads
// near its reads. Nearer, a miss costs less than the bytes loaded near it do: at
// 1 Gbit/s and 1 ms (a store that answers in 2-3 ms) the loads made first runs
// slower, at 20 ms they took a third off them (docs/design.md).
const FirstStartMinRoundTrip = 5 * time.Millisecond

// DefaultReplayParallel bounds the loads one start-up trace replay has in flight:
// 4 MiB of 256 KiB chunks (16 MiB of a laid-out image's 1 MiB chunks), which
// keeps a 1 Gbit/s link with a few ms of round trip busy, while the trace's first
// chunks arrive first (with every chunk requested at once, all arrive together at
// the end) and the container's own reads of chunks the trace did not foresee find
// free slots (docs/design.md, "Replaying a trace: a window, in order").
const DefaultReplayParallel = 16

// Options configure an Engine. Zero values take the defaults given.
type Options struct {
	// Slots bounds the background loads at once (64): enough to keep a sequential
	// reader's readahead window (16 MiB of 256 KiB chunks) in flight.
	Slots int
	// MaxReadahead bounds what is fetched ahead of a sequential reader
	// (DefaultMaxReadahead).
	MaxReadahead int64
	// Traces is where start-up traces are kept (the store's records). Nil: no
	// trace is recorded or replayed.
	Traces store.Refs
	// StartupWindow is how long a container root's reads are recorded as its
	// image's start-up trace (DefaultStartupWindow); negative: no traces.
	StartupWindow time.Duration
	// ReplayParallel bounds the loads one trace replay has in flight
	// (DefaultReplayParallel).
	ReplayParallel int
	// ReplayBudget bounds the bytes one trace replay loads ahead (64 MiB), so
	// that a replay cannot evict what it loaded before the container reads it.
	ReplayBudget int64
	// FirstStartAhead is what a container root whose image has no start-up
	// trace yet loads after each read of its base, for its start-up window
	// (DefaultFirstStartAhead; negative: nothing), when StoreRoundTrip says the
	// store is at least FirstStartMinRoundTrip away. What a program reads next
	// is mostly near what it read: the files of one package lie together.
	FirstStartAhead int64
	// StoreRoundTrip estimates the store's round trip (fetch.Fetcher.RoundTrip;
	// 0: not known yet). Nil: a first start never loads near its reads.
	StoreRoundTrip func() time.Duration
	// FirstStartRanges returns the [start, end) byte ranges of a base that a
	// start with no trace to replay loads as it begins, whatever program it
	// runs, when StoreRoundTrip says the store is at least
	// FirstStartMinRoundTrip away, given a reader of the base (the node gives a
	// filesystem's inode tables in use: package ext4meta). Nil, or an error: none.
	FirstStartRanges func(base io.ReaderAt, size int64) ([][2]int64, error)
	Logger           *slog.Logger
}

// Stats are the node's counters of fetching ahead.
type Stats struct {
	ReadaheadChunks int64 `json:"readahead_chunks"` // chunks fetched ahead of sequential readers
	ReplayedChunks  int64 `json:"replayed_chunks"`  // chunks fetched by start-up trace replays
	// FirstStartChunks are chunks fetched for starts that had no trace to
	// replay: near their reads (Options.FirstStartAhead) and the ranges every
	// start reads (Options.FirstStartRanges).
	FirstStartChunks int64 `json:"first_start_chunks"`
	FetchedBytes     int64 `json:"fetched_bytes"`   // bytes all three moved from the store
	Busy             int64 `json:"busy"`            // loads not started: every slot was busy
	TracesReplayed   int64 `json:"traces_replayed"` // start-up traces replayed
	TracesRecorded   int64 `json:"traces_recorded"` // start-up traces written to the store
}

// Engine runs the node's background loads. Safe for concurrent use.
type Engine struct {
	cache Cache
	opts  Options
	log   *slog.Logger
	slots chan struct{}

	mu      sync.Mutex // guards closed, readers, and loads.Add against Close
	closed  bool
	readers map[*Reader]struct{}
	loads   sync.WaitGroup                // background loads
	bg      sync.WaitGroup                // start-up trace lookups, replays and writes
	ahead   map[digest.Digest]*traceAhead // traces fetched ahead of their start (guarded by mu)

	readahead, replayed, firstStart, fetched, busy, tracesReplayed, tracesRecorded atomic.Int64
}

// New returns an Engine loading into c.
func New(c Cache, opts Options) *Engine {
	opts.Slots = cmp.Or(max(opts.Slots, 0), 64)
	opts.MaxReadahead = cmp.Or(max(opts.MaxReadahead, 0), DefaultMaxReadahead)
	opts.StartupWindow = cmp.Or(opts.StartupWindow, DefaultStartupWindow)
	opts.ReplayBudget = cmp.Or(max(opts.ReplayBudget, 0), 64<<20)
	opts.ReplayParallel = cmp.Or(max(opts.ReplayParallel, 0), DefaultReplayParallel)
	opts.FirstStartAhead = cmp.Or(opts.FirstStartAhead, DefaultFirstStartAhead)
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Engine{cache: c, opts: opts, log: log, slots: make(chan struct{}, opts.Slots), readers: map[*Reader]struct{}{},
		ahead: map[digest.Digest]*traceAhead{}}
}

// Stats returns the engine's counters.
func (e *Engine) Stats() Stats {
	return Stats{ReadaheadChunks: e.readahead.Load(), ReplayedChunks: e.replayed.Load(), FirstStartChunks: e.firstStart.Load(),
		FetchedBytes: e.fetched.Load(),
		Busy:         e.busy.Load(), TracesReplayed: e.tracesReplayed.Load(), TracesRecorded: e.tracesRecorded.Load()}
}

// Close stops every replay and recording, writing what each recording has so far
// as its snapshot's trace (a container root whose volume outlives slackerd, as a
// containerd container's does until containerd collects its snapshot, would
// otherwise leave none); waits up to a bound for trace lookups and writes under
// way, then for the background loads (each bounded by the fetcher's deadlines).
// Readers still read after Close, without fetching ahead.
func (e *Engine) Close(ctx context.Context) {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return
	}
	var ss []*startup
	for r := range e.readers {
		ss = append(ss, r.startup)
	}
	e.mu.Unlock()
	for _, s := range ss {
		s.end() // its write is background work, waited for below
	}
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	done := make(chan struct{})
	go func() { e.bg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	case <-time.After(30 * time.Second):
	}
	e.loads.Wait()
}

// goBackground runs fn as background work counted in wg, unless the engine is
// closed.
func (e *Engine) goBackground(wg *sync.WaitGroup, fn func()) bool {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return false
	}
	wg.Add(1)
	e.mu.Unlock()
	go func() {
		defer wg.Done()
		fn()
	}()
	return true
}

// load starts background loads of the chunks of cs the cache lacks, on behalf of
// r, counting each chunk fetched in kind. It never queues work or blocks: with
// every slot busy it stops. It returns how many of the leading chunks of cs are
// cached or on their way.
func (e *Engine) load(r *Reader, cs []blockmap.Chunk, kind *atomic.Int64) int {
	account := e.accountFor(r, kind)
	if len(cs) > 1 && e.cache.BatchLoads() {
		// One batch, one slot: a store that packs chunks serves them with few requests.
		var todo []blockmap.Chunk
		seen := map[digest.Digest]bool{}
		for _, c := range cs {
			if !seen[c.Digest] && !e.cache.Cached(c) {
				seen[c.Digest] = true
				todo = append(todo, c)
			}
		}
		if len(todo) == 0 {
			return len(cs)
		}
		if !e.start(func() { e.cache.Load(context.Background(), todo, account) }) {
			return 0
		}
		return len(cs)
	}
	for i, c := range cs {
		if e.cache.Cached(c) {
			continue
		}
		if !e.start(func() { e.cache.Load(context.Background(), []blockmap.Chunk{c}, account) }) {
			return i
		}
	}
	return len(cs)
}

// loadNow loads cs on behalf of r in the calling goroutine, counting each chunk
// fetched in kind, once a slot is free; false if the engine closed first.
func (e *Engine) loadNow(r *Reader, cs []blockmap.Chunk, kind *atomic.Int64) bool {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return false
	}
	e.loads.Add(1)
	e.mu.Unlock()
	defer e.loads.Done()
	e.slots <- struct{}{}
	defer func() { <-e.slots }()
	// Load reports a chunk it holds already at once, as a hit: nothing is counted.
	e.cache.Load(context.Background(), cs, e.accountFor(r, kind))
	return true
}

// accountFor returns a Cache.Load callback that counts what a load for r fetched.
func (e *Engine) accountFor(r *Reader, kind *atomic.Int64) func(blockmap.Chunk, cache.Origin, error) {
	return func(c blockmap.Chunk, o cache.Origin, err error) {
		if err != nil || o.Hit() {
			return
		}
		kind.Add(1)
		e.fetched.Add(c.Size)
		r.fetched.Add(c.Size)
	}
}

// start runs fn in a free slot, or reports that none is free.
func (e *Engine) start(fn func()) bool {
	select {
	case e.slots <- struct{}{}:
	default:
		e.busy.Add(1)
		return false
	}
	if !e.goBackground(&e.loads, func() {
		defer func() { <-e.slots }()
		fn()
	}) {
		<-e.slots
		return false
	}
	return true
}
