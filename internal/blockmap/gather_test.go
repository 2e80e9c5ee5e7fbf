package blockmap

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/opencontainers/go-digest"
)

// volumeOf builds a map of blocks blocks cut into chunks of per blocks, with
// holes where hole(b), and the content of every chunk (block b holds its number).
func volumeOf(blocks, per int64, hole func(b int64) bool) (*Map, map[digest.Digest][]byte) {
	content := map[digest.Digest][]byte{}
	var patches []Patch
	for start := int64(0); start < blocks; start += per {
		var data []byte
		var runStart int64 = -1
		flush := func(end int64) {
			if runStart < 0 {
				return
			}
			c := Chunk{Digest: digest.FromBytes(data), Size: int64(len(data))}
			content[c.Digest] = data
			patches = append(patches, Patch{Offset: runStart * BlockSize, Length: int64(len(data)), Chunk: c})
			data, runStart = nil, -1
		}
		for b := start; b < min(start+per, blocks); b++ {
			if hole(b) {
				flush(b)
				continue
			}
			if runStart < 0 {
				runStart = b
			}
			data = append(data, bytes.Repeat([]byte(fmt.Sprintf("%07d\n", b)), BlockSize/8)...)
		}
		flush(start + per)
	}
	m, err := Overlay(Empty(blocks*BlockSize), patches)
	if err != nil {
		panic(err)
	}
	return m, content
}

// readVolume reads every byte of m from content.
func readVolume(t *testing.T, m *Map, content map[digest.Digest][]byte) []byte {
	t.Helper()
	out := make([]byte, m.Size)
	for _, p := range m.Lookup(0, m.Size) {
		if p.Hole {
			continue
		}
		data, ok := content[p.Chunk.Digest]
		if !ok || int64(len(data)) != p.Chunk.Size {
			t.Fatalf("chunk %s: missing or of the wrong size", p.Chunk.Digest)
		}
		copy(out[p.Offset:p.Offset+p.Length], data[p.ChunkOffset:p.ChunkOffset+p.Length])
	}
	return out
}

// regather stores each gather as a chunk (its pieces' bytes in order) and returns
// the re-laid map.
func regather(t *testing.T, m *Map, content map[digest.Digest][]byte, gs []Gather) *Map {
	t.Helper()
	var chunks []Chunk
	for _, g := range gs {
		var data []byte
		for _, p := range g.Pieces {
			data = append(data, content[p.Chunk.Digest][p.ChunkOffset:p.ChunkOffset+p.Length]...)
		}
		c := Chunk{Digest: digest.FromBytes(data), Size: int64(len(data))}
		content[c.Digest] = data
		chunks = append(chunks, c)
	}
	out, err := Regather(m, gs, chunks)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Encode(out); err != nil {
		t.Fatal(err)
	}
	return out
}

// chunksRead counts the distinct chunks of m that hold data inside ranges.
func chunksRead(m *Map, ranges [][2]int64) int {
	seen := map[digest.Digest]bool{}
	for _, r := range ranges {
		for _, p := range m.Lookup(r[0], r[1]-r[0]) {
			if !p.Hole {
				seen[p.Chunk.Digest] = true
			}
		}
	}
	return len(seen)
}

func TestGatherPacksScatteredReads(t *testing.T) {
	// 4 chunks of 16 blocks; start-up reads one block of each of the first three
	// and all of the fourth.
	m, content := volumeOf(64, 16, func(int64) bool { return false })
	ranges := [][2]int64{{1 * BlockSize, 2 * BlockSize}, {20 * BlockSize, 21 * BlockSize}, {40 * BlockSize, 41 * BlockSize}, {48 * BlockSize, 64 * BlockSize}}
	gs, err := PlanGathers(m, ranges, 16*BlockSize, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(gs) != 1 || gs[0].Size != 3*BlockSize || len(gs[0].Pieces) != 3 {
		t.Fatalf("gathers %+v; want one of the three scattered blocks (the dense chunk stays)", gs)
	}
	before := readVolume(t, m, content)
	out := regather(t, m, content, gs)
	if !bytes.Equal(readVolume(t, out, content), before) {
		t.Fatal("the re-laid volume reads differently")
	}
	// What start-up reads now sits in two chunks: the gather and the dense one.
	if n := chunksRead(out, ranges); n != 2 {
		t.Fatalf("start-up reads %d chunks after the layout, want 2", n)
	}
}

func TestGatherLargerThanChunksInTraceOrder(t *testing.T) {
	// 4 chunks of 16 blocks, start-up reads one block of the first and third and
	// all of the second and fourth, first the fourth, then the third, the second
	// and the first. Gathers of 64 blocks take the dense chunks too (each would be
	// a request of its own), in the trace's order.
	m, content := volumeOf(64, 16, func(int64) bool { return false })
	ranges := [][2]int64{{1 * BlockSize, 2 * BlockSize}, {16 * BlockSize, 32 * BlockSize}, {40 * BlockSize, 41 * BlockSize}, {48 * BlockSize, 64 * BlockSize}}
	rank := map[digest.Digest]int{m.Chunks[3].Digest: 0, m.Chunks[2].Digest: 1, m.Chunks[1].Digest: 2, m.Chunks[0].Digest: 3}
	gs, err := PlanGathers(m, ranges, 64*BlockSize, rank)
	if err != nil {
		t.Fatal(err)
	}
	if len(gs) != 1 || gs[0].Size != 34*BlockSize {
		t.Fatalf("gathers %+v; want one of 34 blocks", gs)
	}
	var offsets []int64
	for _, p := range gs[0].Pieces {
		offsets = append(offsets, p.Offset/BlockSize)
	}
	if want := []int64{48, 40, 16, 1}; fmt.Sprint(offsets) != fmt.Sprint(want) {
		t.Fatalf("pieces at blocks %v, want %v (the trace's order)", offsets, want)
	}
	before := readVolume(t, m, content)
	out := regather(t, m, content, gs)
	if !bytes.Equal(readVolume(t, out, content), before) {
		t.Fatal("the re-laid volume reads differently")
	}
	if n := chunksRead(out, ranges); n != 1 {
		t.Fatalf("start-up reads %d chunks after the layout, want 1", n)
	}
}

func TestGatherRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 50 {
		blocks := int64(1 + rng.IntN(400))
		per := int64(1 + rng.IntN(32))
		holes := map[int64]bool{}
		for b := range blocks {
			holes[b] = rng.IntN(5) == 0
		}
		m, content := volumeOf(blocks, per, func(b int64) bool { return holes[b] })
		var ranges [][2]int64
		for b := int64(0); b < blocks; {
			n := int64(1 + rng.IntN(4))
			if rng.IntN(3) == 0 {
				ranges = append(ranges, [2]int64{b * BlockSize, min(b+n, blocks) * BlockSize})
			}
			b += n + int64(rng.IntN(6))
		}
		var rank map[digest.Digest]int
		if i%2 == 1 { // a trace's order: the chunks shuffled
			rank = map[digest.Digest]int{}
			for j, k := range rng.Perm(len(m.Chunks)) {
				if k%4 != 0 { // and some it does not name
					rank[m.Chunks[k].Digest] = j
				}
			}
		}
		size := int64(1+rng.IntN(40)) * BlockSize
		gs, err := PlanGathers(m, ranges, size, rank)
		if err != nil {
			t.Fatal(err)
		}
		before := readVolume(t, m, content)
		out := regather(t, m, content, gs)
		if !bytes.Equal(readVolume(t, out, content), before) {
			t.Fatalf("case %d: the re-laid volume reads differently", i)
		}
		// Laid out, there is nothing left to gather.
		if again, err := PlanGathers(out, ranges, size, nil); err != nil || len(again) != 0 {
			t.Fatalf("case %d: a second layout plans %d gathers (%v)", i, len(again), err)
		}
	}
}

func TestPlanGathersRefuses(t *testing.T) {
	m, _ := volumeOf(8, 4, func(int64) bool { return false })
	for _, tc := range []struct {
		ranges    [][2]int64
		chunkSize int64
	}{
		{[][2]int64{{0, BlockSize}}, 100},
		{[][2]int64{{0, 100}}, BlockSize},
		{[][2]int64{{2 * BlockSize, 3 * BlockSize}, {0, BlockSize}}, BlockSize},
		{[][2]int64{{BlockSize, BlockSize}}, BlockSize},
	} {
		if _, err := PlanGathers(m, tc.ranges, tc.chunkSize, nil); err == nil {
			t.Errorf("%v, chunk size %d: accepted", tc.ranges, tc.chunkSize)
		}
	}
}
