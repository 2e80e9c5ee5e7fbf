package prefetch

import (
	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/blockmap"
)

// DefaultFileAhead bounds what LoadFile loads ahead of one file: the whole of
// most files a start opens (libraries, interpreters, modules), the head of a big
// one.
const DefaultFileAhead = 8 << 20

// DefaultFilesAhead bounds what LoadFile loads ahead for one volume in all, so
// that a start that opens many big files and reads little of each cannot fetch
// a large share of its image.
const DefaultFilesAhead = 64 << 20

// LoadFile loads ahead, in the background, the chunks under a file the volume's
// start has just opened, so that its reads of the file find them on their way
// rather than fetching one chunk at a time as each read misses. ranges are the
// file's bytes on the volume (its extents, in the file's order), of which the
// first FileAhead bytes are taken, within the volume's FilesAhead. It starts
// what the engine's free slots take and never waits: a chunk left out is read
// as it would have been without it.
func (r *Reader) LoadFile(ranges [][2]int64) {
	budget := r.e.opts.FileAhead
	var cs []blockmap.Chunk
	seen := map[digest.Digest]bool{}
	for _, rg := range ranges {
		if budget <= 0 {
			break
		}
		n := min(rg[1]-rg[0], budget)
		budget -= n
		for _, p := range r.base.Lookup(rg[0], n) {
			if p.Hole || seen[p.Chunk.Digest] || r.e.cache.Cached(p.Chunk) {
				continue
			}
			seen[p.Chunk.Digest] = true
			cs = append(cs, p.Chunk)
		}
	}
	var size int64
	for i, c := range cs {
		size += c.Size
		if r.filesAhead.Load()+size > r.e.opts.FilesAhead {
			cs = cs[:i]
			break
		}
	}
	if len(cs) == 0 {
		return
	}
	took := r.e.load(r, cs, &r.e.opened)
	for _, c := range cs[:took] {
		r.filesAhead.Add(c.Size)
	}
}
