package prefetch

import (
	"context"
	"io"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/blockmap"
)

// firstRangesTimeout bounds the reading of what Options.FirstStartRanges needs
// (a filesystem's superblock and descriptors: a chunk or two).
const firstRangesTimeout = 10 * time.Second

// baseAt reads a Reader's base through the cache for a hint: the reads are not
// the volume's (neither counted nor recorded in its trace), though what they
// fetch stays in the cache for the volume's own.
type baseAt struct {
	ctx context.Context
	r   *Reader
}

func (b baseAt) ReadAt(p []byte, off int64) (int, error) {
	size := b.r.base.Size
	if off < 0 || off >= size {
		return 0, io.EOF
	}
	n := int(min(int64(len(p)), size-off))
	clear(p[:n])
	for _, pc := range b.r.base.Lookup(off, int64(n)) {
		if pc.Hole {
			continue
		}
		if _, err := b.r.e.cache.ReadChunk(b.ctx, pc.Chunk, p[pc.Offset-off:pc.Offset-off+pc.Length], pc.ChunkOffset); err != nil {
			return 0, err
		}
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// loadFirstRanges loads the chunks of the ranges Options.FirstStartRanges names
// in the reader's base (for a filesystem, its inode tables in use), in volume
// order as a trace's replay loads (loadInOrder), within the replay budget, while
// the start lasts and the store is FirstStartMinRoundTrip or more away: a start
// with no trace to replay opens files, and each open of a file whose inode lies
// in a part of the table not yet fetched would otherwise wait for it, one
// dependent fetch after another (docs/design.md, "A first start loads the inode
// tables").
func (s *startup) loadFirstRanges(until time.Time) {
	r, e := s.r, s.r.e
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), firstRangesTimeout)
	ranges, err := e.opts.FirstStartRanges(baseAt{ctx: ctx, r: r}, r.base.Size)
	cancel()
	if err != nil {
		s.log.Debug("first-start-ranges-unknown", "err", err)
		return
	}
	// Asked after the ranges' reads, which may have fetched and so measured:
	// nearer than FirstStartMinRoundTrip, a first start gained nothing from
	// these loads (HelloBench at 1 ms) and a small one fetched more for them.
	if e.opts.StoreRoundTrip == nil || e.opts.StoreRoundTrip() < FirstStartMinRoundTrip {
		return
	}
	var cs []blockmap.Chunk
	var total int64
	seen := map[digest.Digest]bool{}
collect:
	for _, rg := range ranges {
		if rg[0] < 0 || rg[1] <= rg[0] {
			continue
		}
		for _, pc := range r.base.Lookup(rg[0], rg[1]-rg[0]) {
			if pc.Hole || seen[pc.Chunk.Digest] {
				continue
			}
			if total+pc.Chunk.Size > e.opts.ReplayBudget {
				break collect
			}
			seen[pc.Chunk.Digest] = true
			total += pc.Chunk.Size
			cs = append(cs, pc.Chunk)
		}
	}
	s.loadInOrder(cs, &e.firstStart, until)
	s.log.Info("first-start-ranges-loaded", "ranges", len(ranges), "chunks", len(cs), "bytes", total, "took", time.Since(start))
}
