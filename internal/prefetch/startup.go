package prefetch

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/blockmap"
	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/runs"
	"github.com/slacker-dev/slacker/internal/trace"
)

// replayGroup is how many chunks of a trace go in one load where the store reads
// several per request (Cache.BatchLoads): a store that packs chunks serves each
// group with few requests.
const replayGroup = 8

// recorder notes the base chunks a Reader reads in its start-up window, in the
// order it first reads them, and the blocks it reads (for a start-up layout).
type recorder struct {
	until  atomic.Int64 // record until then (unix ns; 0: not recording)
	mu     sync.Mutex
	max    int
	seen   map[digest.Digest]bool
	chunks []blockmap.Chunk
	blocks *runs.Set
}

func (rec *recorder) start(window time.Duration, max int) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	rec.max, rec.seen, rec.blocks = max, map[digest.Digest]bool{}, runs.New()
	rec.until.Store(time.Now().Add(window).UnixNano())
}

// stop ends the recording: what was recorded stays.
func (rec *recorder) stop() { rec.until.Store(0) }

// record notes a read of n bytes at volume offset off, served by chunk c.
func (rec *recorder) record(c blockmap.Chunk, off, n int64) {
	// Off the lock: once the window has closed, a read pays one atomic load.
	if until := rec.until.Load(); until == 0 || time.Now().UnixNano() > until {
		return
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	start, end := off/BlockSize, (off+n+BlockSize-1)/BlockSize
	if rec.blocks.Len() < trace.MaxRuns || rec.blocks.Touches(start, end) {
		rec.blocks.Add(start, end)
	}
	if rec.seen[c.Digest] || len(rec.chunks) >= rec.max {
		return
	}
	rec.seen[c.Digest] = true
	rec.chunks = append(rec.chunks, c)
}

func (rec *recorder) recorded() ([]blockmap.Chunk, []runs.Run) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return slices.Clone(rec.chunks), rec.blocks.Runs()
}

// StartupFiles is the file side of a start-up trace, for a volume whose
// filesystem its caller mounted (node: a shared image root; package filetrace
// does the work). Its methods are called from background goroutines, each at most
// once per start.
type StartupFiles interface {
	// Record is called once the lookup knows whether the start records a trace:
	// on, keep noting the files it opens; off, stop (the files are noted from
	// the mount on, since the container may open some before the lookup is done).
	Record(on bool)
	// Files ends the recording and returns the files the start opened, each with
	// the ranges of it that blocks (what the start read of the volume, in
	// BlockSize blocks) hold; called when the trace is written.
	Files(blocks []runs.Run) []trace.File
	// Replay is called when the start replays a trace, as its chunks begin to
	// load, with the trace's files (none in a trace without them).
	Replay(files []trace.File)
}

// startup is a container root's start-up trace: replayed if the store has one for
// its snapshot, recorded (once) if it has none.
type startup struct {
	r        *Reader
	snapshot digest.Digest
	fallback []digest.Digest
	files    StartupFiles // nil: chunks only
	log      *slog.Logger

	mu      sync.Mutex
	missing bool // the store has no trace for the snapshot: record one
	written bool
	gone    bool // the volume was deleted or the node is closing: stop replaying
	timer   *time.Timer
}

// BeginStartup marks the reader's volume as a container root cloned from
// snapshot: its reads are recorded from now on for the engine's start-up window,
// and the store's trace of snapshot (or, while it has none, of the first of
// fallback that has one: the image's earlier layers, newest first) is looked up
// and replayed in the background. files, if not nil, records and replays the
// trace's files. It does nothing when the engine keeps no traces. Call it at most
// once, before the volume is read.
func (r *Reader) BeginStartup(snapshot digest.Digest, fallback []digest.Digest, files StartupFiles) {
	e := r.e
	if e.opts.Traces == nil || e.opts.StartupWindow < 0 || snapshot == "" {
		return
	}
	s := &startup{r: r, snapshot: snapshot, fallback: fallback, files: files,
		log: e.log.With("volume", r.volume, "snapshot", snapshot)}
	e.mu.Lock()
	r.startup = s
	e.mu.Unlock()
	r.rec.start(e.opts.StartupWindow, trace.MaxChunks)
	e.goBackground(&e.bg, s.lookup)
}

func (s *startup) lookup() {
	e := s.r.e
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	t, err := s.get(ctx, s.snapshot)
	if t != nil && t.Version == trace.Version {
		s.recordFiles(false)
		s.replay(s.log, t, start)
		return
	}
	old := t
	if old != nil {
		// A trace of an older version (no block runs): this start records one to
		// replace it, and replays it meanwhile.
		s.log.Info("startup-trace-upgrading", "version", old.Version)
		err = errdefs.ErrNotFound
	}
	if err != nil && !errors.Is(err, errdefs.ErrNotFound) && !errors.Is(err, trace.ErrMalformed) {
		// The store is away or refuses records: neither replay nor record.
		s.log.Warn("startup-trace-lookup-failed", "err", err)
		s.recordFiles(false)
		return
	}
	if errors.Is(err, trace.ErrMalformed) {
		s.log.Warn("startup-trace-invalid", "err", err, "action", "recording a new one")
	}
	s.mu.Lock()
	s.missing = true
	gone := s.gone
	if !gone {
		// Record until the window closes, or until the volume goes first.
		s.timer = time.AfterFunc(max(0, e.opts.StartupWindow-time.Since(start)), s.write)
		until := time.Now().Add(max(0, e.opts.StartupWindow-time.Since(start)))
		if e.opts.FirstStartAhead > 0 && e.opts.StoreRoundTrip != nil && old == nil {
			// Until a trace is replayed (a fallback's, below), load near the reads.
			s.r.first.begin(until)
		}
		if e.opts.FirstStartRanges != nil && old == nil {
			e.goBackground(&e.bg, func() { s.loadFirstRanges(until) })
		}
	}
	s.mu.Unlock()
	if gone { // the container was done before the lookup was
		s.write()
		return
	}
	s.log.Debug("startup-trace-recording", "window", e.opts.StartupWindow)
	s.recordFiles(true)
	if old != nil {
		s.replay(s.log, old, start)
		return
	}
	// Meanwhile, an earlier layer's trace is the best guess of what start-up reads.
	for _, f := range s.fallback {
		if f == s.snapshot {
			continue
		}
		if t, _ := s.get(ctx, f); t != nil {
			s.replay(s.log.With("trace_of", f), t, start)
			return
		}
	}
}

// recordFiles tells the file side, if any, whether this start records a trace.
func (s *startup) recordFiles(on bool) {
	if s.files != nil {
		s.files.Record(on)
	}
}

// get reads and decodes the trace of snapshot: the one fetched ahead, if any
// (FetchTraceAhead), else the store's.
func (s *startup) get(ctx context.Context, snapshot digest.Digest) (*trace.Trace, error) {
	b, err, ok := s.r.e.takeTraceAhead(ctx, snapshot)
	if !ok {
		b, err = s.r.e.opts.Traces.GetRef(ctx, trace.RefName(snapshot))
	}
	if err != nil {
		return nil, err
	}
	return trace.Decode(b)
}

// replay loads the trace's chunks into the cache in its order, at most
// ReplayParallel loads in flight (each a group where the store reads several
// chunks per request), within the replay budget. A narrow window keeps the
// trace's order in what arrives: the chunks start-up reads first come first,
// where as many loads as the store allows would share the link and arrive
// together; and it leaves the rest of the node's slots to the container's own
// reads of chunks the trace did not foresee.
func (s *startup) replay(log *slog.Logger, t *trace.Trace, start time.Time) {
	r, e := s.r, s.r.e
	r.ra.pause(max(0, e.opts.StartupWindow-time.Since(start)))
	r.first.stop()
	e.tracesReplayed.Add(1)
	if s.files != nil {
		e.goBackground(&e.bg, func() { s.files.Replay(t.Files) })
	}
	cs := t.BlockmapChunks()
	var total int64
	for i, c := range cs {
		if total+c.Size > e.opts.ReplayBudget {
			cs = cs[:i]
			break
		}
		total += c.Size
	}
	s.loadInOrder(cs, &e.replayed, time.Now().Add(e.opts.StartupWindow))
	log.Info("startup-trace-replayed", "chunks", len(cs), "bytes", total, "of_chunks", len(t.Chunks),
		"took", time.Since(start))
}

// loadInOrder loads cs into the cache in their order, ReplayParallel loads in
// flight (each a group of replayGroup chunks where the store reads several per
// request), counted in kind, until until or until the volume goes.
func (s *startup) loadInOrder(cs []blockmap.Chunk, kind *atomic.Int64, until time.Time) {
	r, e := s.r, s.r.e
	group := 1
	if e.cache.BatchLoads() {
		group = replayGroup
	}
	stop := func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.gone || time.Now().After(until)
	}
	var next atomic.Int64 // the next group to load
	var wg sync.WaitGroup
	for range min(e.opts.ReplayParallel, (len(cs)+group-1)/group) {
		wg.Go(func() {
			for !stop() {
				i := int(next.Add(1)-1) * group
				if i >= len(cs) || !e.loadNow(r, cs[i:min(i+group, len(cs))], kind) {
					return // done, or the engine is closing
				}
			}
		})
	}
	wg.Wait()
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
	chunks, blocks := s.r.rec.recorded()
	if len(chunks) == 0 {
		return
	}
	e := s.r.e
	e.goBackground(&e.bg, func() { s.put(chunks, blocks) })
}

func (s *startup) put(chunks []blockmap.Chunk, blocks []runs.Run) {
	e := s.r.e
	t := trace.New(s.snapshot, e.opts.StartupWindow, chunks)
	t.SetRuns(blocks)
	if s.files != nil {
		t.Files = s.files.Files(blocks)
	}
	b, err := trace.Encode(t)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err = e.opts.Traces.PutRef(ctx, trace.RefName(s.snapshot), b)
	}
	if err != nil {
		e.log.Warn("startup-trace-write-failed", "snapshot", s.snapshot, "err", err)
		return
	}
	e.tracesRecorded.Add(1)
	e.log.Info("startup-trace-recorded", "snapshot", s.snapshot, "chunks", len(t.Chunks), "bytes", t.Bytes(), "files", len(t.Files))
}

// end is called when the volume is deleted: the trace is written now if its
// window has not closed yet, and replay stops.
func (s *startup) end() {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.gone = true
	s.r.first.stop()
	if s.timer != nil {
		s.timer.Stop()
	}
	s.mu.Unlock()
	s.write()
}
