package prefetch

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/blockmap"
)

// readahead is a Reader's view of its reader's stream.
type readahead struct {
	mu     sync.Mutex
	start  int64        // where the stream began
	end    int64        // end of the stream: the furthest base read that followed the last
	streak int          // consecutive base reads that followed one another
	ahead  int64        // end of what was last requested ahead of the stream
	paused atomic.Int64 // no readahead before this time (unix ns; see pause)
}

// pause turns readahead off for d (a start-up trace's replay already loads what
// the reader will read; readahead would only fetch past it).
func (ra *readahead) pause(d time.Duration) {
	ra.paused.Store(time.Now().Add(d).UnixNano())
}

// maxFirstStartChunks bounds the chunks a first start remembers having loaded
// ahead (a digest each; 4 GiB of 256 KiB chunks): past it, it loads no more ahead.
const maxFirstStartChunks = 1 << 14

// firstStart is a Reader's loading near its reads while its start has no trace to
// replay (Options.FirstStartAhead).
type firstStart struct {
	until     atomic.Int64 // load near reads until then (unix ns; 0: not at all)
	mu        sync.Mutex
	requested map[digest.Digest]bool // chunks loaded ahead, or found cached
}

// begin turns loading near reads on until the deadline.
func (fs *firstStart) begin(until time.Time) {
	fs.mu.Lock()
	if fs.requested == nil {
		fs.requested = map[digest.Digest]bool{}
	}
	fs.mu.Unlock()
	fs.until.Store(until.UnixNano())
}

// stop turns it off.
func (fs *firstStart) stop() { fs.until.Store(0) }

// nearRead is called before each read of the base that ends at end in chunk
// skip, while the reader's start records a trace because there was none to
// replay: the other chunks of the next FirstStartAhead bytes of the base are
// loaded in the background, each once. A first start's reads are dependent (a
// directory, then an inode, then the file; a library, then the next it links),
// each a round trip to the store when it misses, and most land near an earlier
// one: the files of a package were unpacked together, and lie together in the
// image (docs/design.md, "A first start reads near what it read").
func (r *Reader) nearRead(end int64, skip digest.Digest) {
	fs := &r.first
	if until := fs.until.Load(); until == 0 || time.Now().UnixNano() > until {
		return
	}
	// Asked at each read: the estimate settles as the start's own reads come in.
	if r.e.opts.StoreRoundTrip() < FirstStartMinRoundTrip {
		return
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	var cs []blockmap.Chunk
	for _, pc := range r.base.Lookup(end, r.e.opts.FirstStartAhead) {
		d := pc.Chunk.Digest
		if pc.Hole || d == skip || fs.requested[d] || slices.ContainsFunc(cs, func(c blockmap.Chunk) bool { return c.Digest == d }) {
			continue
		}
		if len(fs.requested)+len(cs) >= maxFirstStartChunks {
			break
		}
		cs = append(cs, pc.Chunk)
	}
	if len(cs) == 0 {
		return
	}
	// Remember only what the engine took: the rest is asked for again at the
	// next read near it.
	took := r.e.load(r, cs, &r.e.firstStart)
	for _, c := range cs[:took] {
		fs.requested[c.Digest] = true
	}
}

// readahead is called before each read of the base, from off to the end of its
// last piece pc. When reads follow one another through the volume, the chunks
// that come next are requested in the background (cache hits included, so the
// window moves on with the reader rather than stopping where the last one ended):
// the window doubles with each read in sequence, up to MaxReadahead, but is never
// more than the stream has read so far (at least a chunk), so that many small
// reads (a guest reading ahead 16 KiB) draw no more than a few large ones; it is
// topped up whenever less than half of it lies ahead of the reader. A random reader
// fetches nothing extra, nor does one that reads backwards. Reads that run
// concurrently may arrive a little out of order: a read up to a chunk behind the
// stream's end, or up to a chunk past it, leaves the stream as it is or moves
// it on; only a read that moves the end on counts towards the window.
func (r *Reader) readahead(off int64, pc blockmap.Piece) {
	ra := &r.ra
	if time.Now().UnixNano() < ra.paused.Load() {
		return
	}
	size := max(pc.Chunk.Size, BlockSize)
	end := pc.Offset + pc.Length
	r.nearRead(end, pc.Chunk.Digest)
	ra.mu.Lock()
	defer ra.mu.Unlock()
	near := ra.end > 0 && off >= ra.end-size && off <= ra.end+size
	switch {
	case near && end > ra.end: // the stream moves on
		ra.streak++
		ra.end = end
	case near:
		// Behind the stream's end: a late piece of it (concurrent reads arrive out
		// of order), or a reader going backwards (page faults through a mapped
		// file do): neither moves the stream on, nor breaks it.
		return
	default:
		ra.streak, ra.start, ra.end, ra.ahead = 0, off, end, 0
	}
	if ra.streak < 2 { // a stream starts at the third read in sequence
		return
	}
	window := min(int64(1)<<min(ra.streak-1, 20), max(2, r.e.opts.MaxReadahead/size)) // chunks
	window = max(1, min(window, (ra.end-ra.start)/size))
	if ra.ahead-ra.end > window*size/2 {
		return // enough is on its way
	}
	from := max(ra.ahead, ra.end)
	next, reach := chunksAfter(r.base, from, int(window-max(0, (ra.ahead-ra.end)/size)), pc.Chunk.Digest)
	if len(next) == 0 {
		return
	}
	// Count as requested only what the engine took: the rest is asked for again
	// at the next read.
	if took := r.e.load(r, next, &r.e.readahead); took > 0 && reach[took-1] > ra.ahead {
		ra.ahead = reach[took-1]
	}
}
