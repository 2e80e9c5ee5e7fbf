package blockmap

import (
	"fmt"
	"sort"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/errdefs"
)

// BlockSize is the unit of every offset and length in a map, in bytes.
const BlockSize = 4096

// MaxSize bounds a map's virtual size (1 PiB), so a decoder never trusts a huge value.
const MaxSize = 1 << 50

// ErrMalformed is wrapped by every Decode and validation error (errdefs.ErrInvalid).
var ErrMalformed = errdefs.New(errdefs.ErrInvalid, "malformed block map")

// Chunk is a content-addressed object holding Size bytes.
type Chunk struct {
	Digest digest.Digest
	Size   int64
}

// Extent maps Length bytes of the volume at Offset to the bytes of chunk Chunk (an
// index into Map.Chunks) starting at ChunkOffset.
type Extent struct {
	Offset      int64
	Length      int64
	Chunk       int
	ChunkOffset int64
}

// End returns the first byte after the extent.
func (e Extent) End() int64 { return e.Offset + e.Length }

// Map is a decoded block map. Extents are sorted by Offset and never overlap.
// A Map is immutable once built; methods never modify it.
type Map struct {
	Size    int64
	Chunks  []Chunk
	Extents []Extent
}

// Empty returns a map of size bytes that reads as all zeros.
func Empty(size int64) *Map { return &Map{Size: size} }

// Validate checks every rule of the format. Decode and Encode call it.
func (m *Map) Validate() error {
	if m.Size < 0 || m.Size > MaxSize || m.Size%BlockSize != 0 {
		return fmt.Errorf("%w: size %d is not a multiple of %d in [0, %d]", ErrMalformed, m.Size, BlockSize, int64(MaxSize))
	}
	for i, c := range m.Chunks {
		if c.Size <= 0 || c.Size%BlockSize != 0 || c.Size > MaxSize {
			return fmt.Errorf("%w: chunk %d (%s) has size %d", ErrMalformed, i, c.Digest, c.Size)
		}
		if err := c.Digest.Validate(); err != nil || c.Digest.Algorithm() != digest.SHA256 {
			return fmt.Errorf("%w: chunk %d has digest %q", ErrMalformed, i, c.Digest)
		}
	}
	var prevEnd int64
	for i, e := range m.Extents {
		switch {
		case e.Length <= 0:
			return fmt.Errorf("%w: extent %d at %d has length %d", ErrMalformed, i, e.Offset, e.Length)
		case e.Offset%BlockSize != 0 || e.Length%BlockSize != 0 || e.ChunkOffset%BlockSize != 0:
			return fmt.Errorf("%w: extent %d at %d is not aligned to %d", ErrMalformed, i, e.Offset, BlockSize)
		case e.Offset < prevEnd:
			return fmt.Errorf("%w: extent %d at %d overlaps or precedes the previous one ending at %d", ErrMalformed, i, e.Offset, prevEnd)
		case e.Offset > m.Size || e.Length > m.Size-e.Offset:
			return fmt.Errorf("%w: extent %d [%d, %d) is outside the %d-byte volume", ErrMalformed, i, e.Offset, e.Offset+e.Length, m.Size)
		case e.Chunk < 0 || e.Chunk >= len(m.Chunks):
			return fmt.Errorf("%w: extent %d names chunk %d of %d", ErrMalformed, i, e.Chunk, len(m.Chunks))
		case e.ChunkOffset < 0 || e.ChunkOffset > m.Chunks[e.Chunk].Size || e.Length > m.Chunks[e.Chunk].Size-e.ChunkOffset:
			return fmt.Errorf("%w: extent %d reads [%d, %d) of chunk %s, which has %d bytes", ErrMalformed, i,
				e.ChunkOffset, e.ChunkOffset+e.Length, m.Chunks[e.Chunk].Digest, m.Chunks[e.Chunk].Size)
		}
		prevEnd = e.End()
	}
	return nil
}

// Piece is part of a read: Length bytes at volume offset Offset, either a hole
// (Hole, reads as zeros) or bytes [ChunkOffset, ChunkOffset+Length) of Chunk.
type Piece struct {
	Offset      int64
	Length      int64
	Hole        bool
	Chunk       Chunk
	ChunkOffset int64
}

// Lookup returns the pieces covering [off, off+length), in order, holes included.
// The range is clipped to the map's size.
func (m *Map) Lookup(off, length int64) []Piece {
	if off < 0 {
		length += off
		off = 0
	}
	if off+length > m.Size {
		length = m.Size - off
	}
	if length <= 0 {
		return nil
	}
	end := off + length
	i := sort.Search(len(m.Extents), func(i int) bool { return m.Extents[i].End() > off })
	var out []Piece
	pos := off
	for ; i < len(m.Extents) && m.Extents[i].Offset < end; i++ {
		e := m.Extents[i]
		if e.Offset > pos {
			out = append(out, Piece{Offset: pos, Length: e.Offset - pos, Hole: true})
			pos = e.Offset
		}
		stop := min(e.End(), end)
		out = append(out, Piece{
			Offset:      pos,
			Length:      stop - pos,
			Chunk:       m.Chunks[e.Chunk],
			ChunkOffset: e.ChunkOffset + (pos - e.Offset),
		})
		pos = stop
	}
	if pos < end {
		out = append(out, Piece{Offset: pos, Length: end - pos, Hole: true})
	}
	return out
}

// DataSize returns the number of bytes covered by extents (the non-hole bytes).
func (m *Map) DataSize() int64 {
	var n int64
	for _, e := range m.Extents {
		n += e.Length
	}
	return n
}

// ChunkBytes returns the total size of the distinct chunks the map references:
// what a node would fetch to read every byte of the volume.
func (m *Map) ChunkBytes() int64 {
	var n int64
	for _, c := range m.Chunks {
		n += c.Size
	}
	return n
}

// Patch replaces Length bytes at Offset: with bytes of Chunk starting at
// ChunkOffset, or with zeros when Chunk.Digest is empty.
type Patch struct {
	Offset      int64
	Length      int64
	Chunk       Chunk
	ChunkOffset int64
}

// Overlay returns a new map: base, with each patch's range replaced by the patch.
// Patches must be sorted by Offset, aligned, non-overlapping and inside the base's
// size. Time is proportional to len(base.Extents) + len(patches). The result is
// normalized (adjacent pieces of one chunk merged, unused chunks dropped).
func Overlay(base *Map, patches []Patch) (*Map, error) {
	var prevEnd int64
	for i, p := range patches {
		if p.Length <= 0 || p.Offset%BlockSize != 0 || p.Length%BlockSize != 0 || p.ChunkOffset%BlockSize != 0 ||
			p.Offset < prevEnd || p.Offset+p.Length > base.Size {
			return nil, fmt.Errorf("overlay: patch %d [%d, +%d) is misaligned, unsorted, overlapping or outside %d bytes",
				i, p.Offset, p.Length, base.Size)
		}
		if p.Chunk.Digest != "" && (p.ChunkOffset < 0 || p.ChunkOffset+p.Length > p.Chunk.Size) {
			return nil, fmt.Errorf("overlay: patch %d reads past the end of chunk %s", i, p.Chunk.Digest)
		}
		prevEnd = p.Offset + p.Length
	}
	b := newBuilder(base.Size)
	bi := 0
	// emitBase copies base extents' parts that lie in [from, to).
	emitBase := func(from, to int64) {
		for bi < len(base.Extents) && base.Extents[bi].End() <= from {
			bi++
		}
		for j := bi; j < len(base.Extents) && base.Extents[j].Offset < to; j++ {
			e := base.Extents[j]
			s := max(e.Offset, from)
			t := min(e.End(), to)
			if s < t {
				b.add(s, t-s, base.Chunks[e.Chunk], e.ChunkOffset+(s-e.Offset))
			}
		}
	}
	pos := int64(0)
	for _, p := range patches {
		emitBase(pos, p.Offset)
		if p.Chunk.Digest != "" {
			b.add(p.Offset, p.Length, p.Chunk, p.ChunkOffset)
		}
		pos = p.Offset + p.Length
	}
	emitBase(pos, base.Size)
	m := b.done()
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("overlay: %w", err)
	}
	return m, nil
}

// Resize returns a copy of m with a new size; shrinking drops and clips extents.
func Resize(m *Map, size int64) *Map {
	b := newBuilder(size)
	for _, e := range m.Extents {
		if e.Offset >= size {
			break
		}
		b.add(e.Offset, min(e.End(), size)-e.Offset, m.Chunks[e.Chunk], e.ChunkOffset)
	}
	return b.done()
}

// Normalize returns the canonical form of m: adjacent extents that continue one
// chunk are merged, and the chunk table lists each used chunk once, in order of
// first use. Encode writes the canonical form.
func Normalize(m *Map) *Map {
	b := newBuilder(m.Size)
	for _, e := range m.Extents {
		b.add(e.Offset, e.Length, m.Chunks[e.Chunk], e.ChunkOffset)
	}
	return b.done()
}

// builder accumulates extents in offset order and produces a normalized map.
type builder struct {
	m     *Map
	index map[digest.Digest]int
}

func newBuilder(size int64) *builder {
	return &builder{m: &Map{Size: size}, index: map[digest.Digest]int{}}
}

func (b *builder) add(off, length int64, c Chunk, chunkOff int64) {
	ci, ok := b.index[c.Digest]
	if !ok {
		ci = len(b.m.Chunks)
		b.index[c.Digest] = ci
		b.m.Chunks = append(b.m.Chunks, c)
	}
	if n := len(b.m.Extents); n > 0 {
		last := &b.m.Extents[n-1]
		if last.Chunk == ci && last.End() == off && last.ChunkOffset+last.Length == chunkOff {
			last.Length += length
			return
		}
	}
	b.m.Extents = append(b.m.Extents, Extent{Offset: off, Length: length, Chunk: ci, ChunkOffset: chunkOff})
}

func (b *builder) done() *Map { return b.m }

// ChunksAfter returns up to n distinct chunks that hold data at or after volume
// offset off, in volume order, leaving out skip (the one just read). Readahead uses
// it to fetch what a sequential reader will want next.
func (m *Map) ChunksAfter(off int64, n int, skip digest.Digest) []Chunk {
	var out []Chunk
	seen := map[int]bool{}
	i := sort.Search(len(m.Extents), func(i int) bool { return m.Extents[i].End() > off })
	for ; i < len(m.Extents) && len(out) < n; i++ {
		ci := m.Extents[i].Chunk
		if seen[ci] || m.Chunks[ci].Digest == skip {
			continue
		}
		seen[ci] = true
		out = append(out, m.Chunks[ci])
	}
	return out
}
