package prefetch

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/opencontainers/go-digest"
	"golang.org/x/sync/errgroup"

	"github.com/slacker-dev/slacker/internal/blockmap"
	"github.com/slacker-dev/slacker/internal/runs"
)

// BlockSize is the unit in which base reads are recorded (ReadStats.BaseReadRuns).
const BlockSize = blockmap.BlockSize

// MaxReadRuns bounds the runs of base blocks read that a Reader records (about 16
// bytes each), so a volume read at random cannot grow its record without bound.
var MaxReadRuns = 16384

// ReadStats are a Reader's counters since it was opened: what its volume read of
// the base snapshot, and what those reads, and the loads made ahead for them, moved.
type ReadStats struct {
	BaseReadBytes int64 `json:"base_read_bytes"` // bytes read from the base snapshot (not holes)
	FetchedBytes  int64 `json:"fetched_bytes"`   // bytes fetched from the store for this volume
	CacheHits     int64 `json:"cache_hits"`      // chunk reads served by the node cache
	CacheMisses   int64 `json:"cache_misses"`    // chunk reads that fetched from the store
	// BaseReadRuns are the blocks read from the base snapshot, as sorted, disjoint
	// half-open runs of block numbers [start, end) (BlockSize units): which of the
	// image a container read, e.g. to compare two runs. At most MaxReadRuns runs are
	// kept; BaseReadRunsTruncated says that later reads were not recorded.
	BaseReadRuns          [][2]int64 `json:"base_read_runs,omitempty"`
	BaseReadRunsTruncated bool       `json:"base_read_runs_truncated,omitempty"`
}

// Reader reads one volume's base snapshot and fetches ahead of it. Safe for
// concurrent use.
type Reader struct {
	e      *Engine
	base   *blockmap.Map
	volume string

	ra    readahead
	first firstStart

	baseRead, fetched, hits, misses atomic.Int64

	runsMu    sync.Mutex
	baseReads *runs.Set // blocks read from the base (ReadStats.BaseReadRuns)
	truncated bool      // baseReads reached MaxReadRuns

	rec     recorder
	startup *startup // nil unless BeginStartup found traces to record or replay (guarded by e.mu)
}

// Open returns the Reader of a volume (named volume in log lines) whose base is
// the snapshot base (nil: a blank volume, which reads as zeros). Close it when the
// volume goes.
func (e *Engine) Open(volume string, base *blockmap.Map) *Reader {
	if base == nil {
		base = blockmap.Empty(0)
	}
	r := &Reader{e: e, base: base, volume: volume, baseReads: runs.New()}
	e.mu.Lock()
	e.readers[r] = struct{}{}
	e.mu.Unlock()
	return r
}

// Close ends the reader's fetching ahead: a replay stops, and a start-up trace
// being recorded is written now, as the container it records is gone.
func (r *Reader) Close() {
	r.e.mu.Lock()
	delete(r.e.readers, r)
	s := r.startup
	r.e.mu.Unlock()
	s.end()
}

// EndStartup ends the start-up the reader records or replays, as Close does, while
// the reader goes on serving reads: a shared image root whose last container is
// gone lingers, but the start it recorded is over. Its trace is written now, not
// when the window closes or the root goes (which a daemon stopped meanwhile never
// reaches). Reads after it are not recorded.
func (r *Reader) EndStartup() {
	r.e.mu.Lock()
	s := r.startup
	r.e.mu.Unlock()
	if s != nil {
		r.rec.stop()
	}
	s.end()
}

// Stats returns the reader's counters.
func (r *Reader) Stats() ReadStats {
	st := ReadStats{BaseReadBytes: r.baseRead.Load(), FetchedBytes: r.fetched.Load(),
		CacheHits: r.hits.Load(), CacheMisses: r.misses.Load()}
	r.runsMu.Lock()
	defer r.runsMu.Unlock()
	if n := r.baseReads.Len(); n > 0 {
		st.BaseReadRuns = make([][2]int64, 0, n)
		for _, x := range r.baseReads.Runs() {
			st.BaseReadRuns = append(st.BaseReadRuns, [2]int64{x.Start, x.End})
		}
	}
	st.BaseReadRunsTruncated = r.truncated
	return st
}

// ReadAt fills p with the base snapshot's bytes at off (holes and anything past the
// base's end read as zeros). A read spanning several chunks reads them in parallel.
func (r *Reader) ReadAt(ctx context.Context, p []byte, off int64) error {
	clear(p)
	pieces := r.base.Lookup(off, int64(len(p)))
	data := 0
	for _, pc := range pieces {
		if !pc.Hole {
			data++
		}
	}
	// One read is one access for readahead, however many chunks it spans.
	for i := len(pieces) - 1; i >= 0; i-- {
		if !pieces[i].Hole {
			r.readahead(off, pieces[i])
			break
		}
	}
	read := func(ctx context.Context, pc blockmap.Piece) error {
		o, err := r.e.cache.ReadChunk(ctx, pc.Chunk, p[pc.Offset-off:pc.Offset-off+pc.Length], pc.ChunkOffset)
		if err != nil {
			return fmt.Errorf("read base at %d: %w", pc.Offset, err)
		}
		r.baseRead.Add(pc.Length)
		r.recordRead(pc.Offset, pc.Length)
		r.rec.record(pc.Chunk, pc.Offset, pc.Length)
		if o.Hit() {
			r.hits.Add(1)
		} else {
			r.misses.Add(1)
			r.fetched.Add(pc.Chunk.Size)
		}
		return nil
	}
	if data <= 1 {
		for _, pc := range pieces {
			if !pc.Hole {
				return read(ctx, pc)
			}
		}
		return nil
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, pc := range pieces {
		if !pc.Hole {
			g.Go(func() error { return read(gctx, pc) })
		}
	}
	return g.Wait()
}

// recordRead records that the blocks covering [off, off+n) were read from the
// base, until MaxReadRuns runs are recorded.
func (r *Reader) recordRead(off, n int64) {
	r.runsMu.Lock()
	defer r.runsMu.Unlock()
	if r.truncated {
		return
	}
	start, end := off/BlockSize, (off+n+BlockSize-1)/BlockSize
	if r.baseReads.Len() >= MaxReadRuns && !r.baseReads.Touches(start, end) {
		r.truncated = true
		return
	}
	r.baseReads.Add(start, end)
}

// chunksAfter returns up to n distinct chunks of the extents at or after off (but
// skip), in order, and for each the end of the extent where it was found.
func chunksAfter(m *blockmap.Map, off int64, n int, skip digest.Digest) ([]blockmap.Chunk, []int64) {
	var out []blockmap.Chunk
	var reach []int64
	seen := map[int]bool{}
	i := sort.Search(len(m.Extents), func(i int) bool { return m.Extents[i].End() > off })
	for ; i < len(m.Extents) && len(out) < n; i++ {
		e := m.Extents[i]
		if seen[e.Chunk] || m.Chunks[e.Chunk].Digest == skip {
			continue
		}
		seen[e.Chunk] = true
		out = append(out, m.Chunks[e.Chunk])
		reach = append(reach, e.End())
	}
	return out, reach
}
