package blockmap

import (
	"fmt"
	"math"
	"sort"

	"github.com/opencontainers/go-digest"
)

// A start-up layout (docs/design.md) gathers the bytes a container reads at
// start-up, scattered over many chunks, into few new chunks: a node that fetches
// them fetches little besides what it reads. PlanGathers says which bytes go
// together; the caller reads them, stores each gather as a chunk, and Regather
// points the map at the new chunks. The volume's content does not change.

// DenseShare is the share of a chunk's bytes that must be read for the chunk to
// stay as it is: fetching it whole then costs at most a third more than the read.
const DenseShare = 0.75

// Gather is one new chunk of a start-up layout: the data pieces of the map whose
// bytes, in order, make it.
type Gather struct {
	Pieces []Piece
	Size   int64
}

// PlanGathers plans a start-up layout of m. ranges are the byte ranges read at
// start-up ([start, end), block-aligned, sorted and disjoint). Data of m inside
// them is gathered into gathers of at most chunkSize bytes (a multiple of
// BlockSize), except where it lies in a chunk at least chunkSize large of which
// at least DenseShare is read (such a chunk is fetched whole anyway, with little
// waste, and in one request as a gather would be). The pieces are ordered by
// rank, the position of their chunk in the start-up trace (the order start-up
// first read them; a chunk rank does not name goes last), then by volume offset,
// so that the gathers a replay fetches first hold what start-up reads first; a
// nil rank is volume order. Holes are left out. The gathers hold every gathered
// byte once; a gather that would be one whole chunk of m is left out.
func PlanGathers(m *Map, ranges [][2]int64, chunkSize int64, rank map[digest.Digest]int) ([]Gather, error) {
	if chunkSize <= 0 || chunkSize%BlockSize != 0 {
		return nil, fmt.Errorf("gather: chunk size %d is not a positive multiple of %d", chunkSize, BlockSize)
	}
	var prev int64
	var pieces []Piece
	for i, r := range ranges {
		if r[0] < prev || r[1] <= r[0] || r[0]%BlockSize != 0 || r[1]%BlockSize != 0 {
			return nil, fmt.Errorf("gather: range %d [%d, %d) is empty, misaligned or out of order", i, r[0], r[1])
		}
		prev = r[1]
		for _, p := range m.Lookup(r[0], r[1]-r[0]) {
			if !p.Hole {
				pieces = append(pieces, p)
			}
		}
	}
	read := map[int64]int64{} // bytes read, by chunk index in m
	index := make(map[Chunk]int64, len(m.Chunks))
	for i, c := range m.Chunks {
		index[c] = int64(i)
	}
	for _, p := range pieces {
		read[index[p.Chunk]] += p.Length
	}
	kept := pieces[:0]
	for _, p := range pieces {
		if p.Chunk.Size >= chunkSize && float64(read[index[p.Chunk]]) >= DenseShare*float64(p.Chunk.Size) {
			continue
		}
		kept = append(kept, p)
	}
	pieces = kept
	if rank != nil {
		of := func(p Piece) int {
			if r, ok := rank[p.Chunk.Digest]; ok {
				return r
			}
			return math.MaxInt
		}
		sort.SliceStable(pieces, func(a, b int) bool { return of(pieces[a]) < of(pieces[b]) })
	}
	var out []Gather
	for _, p := range pieces {
		// Cut p where the current gather fills up.
		for p.Length > 0 {
			if len(out) == 0 || out[len(out)-1].Size == chunkSize {
				out = append(out, Gather{})
			}
			g := &out[len(out)-1]
			n := min(p.Length, chunkSize-g.Size)
			q := p
			q.Length = n
			g.Pieces = append(g.Pieces, q)
			g.Size += n
			p.Offset += n
			p.ChunkOffset += n
			p.Length -= n
		}
	}
	// A gather that is one whole chunk would store that chunk again: the chunk
	// stays (a layout of a laid-out image changes nothing).
	plan := out[:0]
	for _, g := range out {
		if !wholeChunk(g) {
			plan = append(plan, g)
		}
	}
	return plan, nil
}

// wholeChunk says whether g's pieces are all of one chunk's bytes, each once (in
// any order: a plan of another order would only store the chunk again, reshuffled).
func wholeChunk(g Gather) bool {
	c := g.Pieces[0].Chunk
	ps := make([]Piece, len(g.Pieces))
	copy(ps, g.Pieces)
	sort.Slice(ps, func(a, b int) bool { return ps[a].ChunkOffset < ps[b].ChunkOffset })
	var at int64
	for _, p := range ps {
		if p.Chunk != c || p.ChunkOffset != at {
			return false
		}
		at += p.Length
	}
	return at == c.Size
}

// Regather returns m with the bytes of each gather read from chunks[i], the new
// chunk made of gathers[i]'s pieces in order. The gathers must come from
// PlanGathers on m.
func Regather(m *Map, gathers []Gather, chunks []Chunk) (*Map, error) {
	if len(gathers) != len(chunks) {
		return nil, fmt.Errorf("regather: %d gathers, %d chunks", len(gathers), len(chunks))
	}
	var patches []Patch
	for i, g := range gathers {
		if chunks[i].Size != g.Size {
			return nil, fmt.Errorf("regather: chunk %d has %d bytes, its gather %d", i, chunks[i].Size, g.Size)
		}
		var at int64
		for _, p := range g.Pieces {
			patches = append(patches, Patch{Offset: p.Offset, Length: p.Length, Chunk: chunks[i], ChunkOffset: at})
			at += p.Length
		}
	}
	sort.Slice(patches, func(a, b int) bool { return patches[a].Offset < patches[b].Offset })
	return Overlay(m, patches)
}
