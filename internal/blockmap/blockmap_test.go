package blockmap

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/opencontainers/go-digest"
)

func chunk(name string, blocks int64) Chunk {
	return Chunk{Digest: digest.FromString(name), Size: blocks * BlockSize}
}

func TestRoundTrip(t *testing.T) {
	a, b := chunk("a", 256), chunk("b", 1)
	m := &Map{
		Size:   1 << 30,
		Chunks: []Chunk{a, b},
		Extents: []Extent{
			{Offset: 0, Length: 16 * BlockSize, Chunk: 0, ChunkOffset: 0},
			{Offset: 16 * BlockSize, Length: BlockSize, Chunk: 1},
			{Offset: 17 * BlockSize, Length: 100 * BlockSize, Chunk: 0, ChunkOffset: 17 * BlockSize},
			{Offset: 1<<30 - BlockSize, Length: BlockSize, Chunk: 1},
		},
	}
	enc, err := Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(enc)
	if err != nil {
		t.Fatal(err)
	}
	enc2, err := Encode(got)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(enc, enc2) {
		t.Fatal("encode(decode(encode(m))) differs from encode(m)")
	}
	if ID(enc) != ID(enc2) {
		t.Fatal("IDs differ")
	}
	if got.Size != m.Size || len(got.Extents) != 4 || got.DataSize() != (16+1+100+1)*BlockSize {
		t.Fatalf("decoded %+v", got)
	}
}

func TestEncodeNormalizes(t *testing.T) {
	a := chunk("a", 4)
	split := &Map{Size: 8 * BlockSize, Chunks: []Chunk{chunk("unused", 1), a}, Extents: []Extent{
		{Offset: 0, Length: 2 * BlockSize, Chunk: 1},
		{Offset: 2 * BlockSize, Length: 2 * BlockSize, Chunk: 1, ChunkOffset: 2 * BlockSize},
	}}
	whole := &Map{Size: 8 * BlockSize, Chunks: []Chunk{a}, Extents: []Extent{{Offset: 0, Length: 4 * BlockSize}}}
	e1, err := Encode(split)
	if err != nil {
		t.Fatal(err)
	}
	e2, err := Encode(whole)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(e1, e2) {
		t.Fatal("the same logical map encoded two ways")
	}
}

func TestDecodeRejects(t *testing.T) {
	good := &Map{Size: 64 * BlockSize, Chunks: []Chunk{chunk("a", 8), chunk("b", 8)}, Extents: []Extent{
		{Offset: 0, Length: 8 * BlockSize, Chunk: 0},
		{Offset: 8 * BlockSize, Length: 8 * BlockSize, Chunk: 1},
	}}
	enc, err := Encode(good)
	if err != nil {
		t.Fatal(err)
	}
	// raw builds an encoding by hand so that invalid maps can be expressed.
	raw := func(version, bs, size uint64, chunks []Chunk, ext [][4]uint64, trailing ...byte) []byte {
		b := []byte(Magic)
		u := func(v uint64) { b = appendUvarint(b, v) }
		u(version)
		u(bs)
		u(size)
		u(uint64(len(chunks)))
		for _, c := range chunks {
			b = append(b, hexBytes(c.Digest)...)
			u(uint64(c.Size / BlockSize))
		}
		u(uint64(len(ext)))
		for _, e := range ext {
			for _, v := range e {
				u(v)
			}
		}
		return append(b, trailing...)
	}
	a, c := chunk("a", 8), chunk("b", 8)
	cases := map[string][]byte{
		"empty":            nil,
		"bad magic":        append([]byte("SLKBMAX\x00"), enc[8:]...),
		"truncated":        enc[:len(enc)-1],
		"trailing":         append(append([]byte{}, enc...), 0),
		"unknown version":  raw(2, 4096, 64, nil, nil),
		"block size":       raw(1, 512, 64, nil, nil),
		"overlap":          raw(1, 4096, 64, []Chunk{a, c}, [][4]uint64{{0, 8, 0, 0}, {4, 8, 1, 0}}),
		"unsorted":         raw(1, 4096, 64, []Chunk{a, c}, [][4]uint64{{8, 8, 0, 0}, {0, 8, 1, 0}}),
		"out of range":     raw(1, 4096, 64, []Chunk{a}, [][4]uint64{{60, 8, 0, 0}}),
		"past chunk end":   raw(1, 4096, 64, []Chunk{a}, [][4]uint64{{0, 8, 0, 1}}),
		"bad chunk index":  raw(1, 4096, 64, []Chunk{a}, [][4]uint64{{0, 8, 1, 0}}),
		"zero length":      raw(1, 4096, 64, []Chunk{a}, [][4]uint64{{0, 0, 0, 0}}),
		"zero-size chunk":  raw(1, 4096, 64, []Chunk{{Digest: a.Digest}}, [][4]uint64{{0, 1, 0, 0}}),
		"unused chunk":     raw(1, 4096, 64, []Chunk{a, c}, [][4]uint64{{0, 8, 0, 0}}),
		"duplicate chunk":  raw(1, 4096, 64, []Chunk{a, a}, [][4]uint64{{0, 8, 0, 0}, {8, 8, 1, 0}}),
		"not canonical":    raw(1, 4096, 64, []Chunk{a}, [][4]uint64{{0, 4, 0, 0}, {4, 4, 0, 4}}),
		"huge size":        raw(1, 4096, 1<<62, nil, nil),
		"huge chunk count": raw(1, 4096, 64, nil, nil)[:len(Magic)+4],
	}
	cases["huge chunk count"] = append(cases["huge chunk count"], appendUvarint(nil, 1<<40)...)
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			m, err := Decode(b)
			if err == nil {
				t.Fatalf("decoded %+v", m)
			}
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
		})
	}
}

func TestLookup(t *testing.T) {
	a := chunk("a", 4)
	m := &Map{Size: 16 * BlockSize, Chunks: []Chunk{a}, Extents: []Extent{{Offset: 4 * BlockSize, Length: 4 * BlockSize}}}
	ps := m.Lookup(2*BlockSize+100, 4*BlockSize)
	want := []Piece{
		{Offset: 2*BlockSize + 100, Length: 2*BlockSize - 100, Hole: true},
		{Offset: 4 * BlockSize, Length: 2*BlockSize + 100, Chunk: a, ChunkOffset: 0},
	}
	if fmt.Sprint(ps) != fmt.Sprint(want) {
		t.Fatalf("lookup: %+v\nwant %+v", ps, want)
	}
	if ps := m.Lookup(15*BlockSize, 10*BlockSize); len(ps) != 1 || ps[0].Length != BlockSize || !ps[0].Hole {
		t.Fatalf("lookup past end: %+v", ps)
	}
}

// model is a map as one chunk-reference per block, for checking Overlay.
type model []struct {
	d   digest.Digest
	off int64
}

func (mo model) of(m *Map) model {
	out := make(model, m.Size/BlockSize)
	for _, p := range m.Lookup(0, m.Size) {
		for i := int64(0); i < p.Length/BlockSize; i++ {
			if !p.Hole {
				out[p.Offset/BlockSize+i].d = p.Chunk.Digest
				out[p.Offset/BlockSize+i].off = p.ChunkOffset + i*BlockSize
			}
		}
	}
	return out
}

func TestOverlayModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const blocks = 200
	m := Empty(blocks * BlockSize)
	ref := make(model, blocks)
	for round := 0; round < 300; round++ {
		var patches []Patch
		pos := int64(0)
		for pos < blocks {
			pos += rng.Int64N(20)
			n := 1 + rng.Int64N(12)
			if pos+n > blocks {
				break
			}
			p := Patch{Offset: pos * BlockSize, Length: n * BlockSize}
			if rng.IntN(4) > 0 {
				size := n + rng.Int64N(4)
				p.Chunk = chunk(fmt.Sprint(round, pos), size)
				p.ChunkOffset = rng.Int64N(size-n+1) * BlockSize
			}
			patches = append(patches, p)
			for i := int64(0); i < n; i++ {
				if p.Chunk.Digest == "" {
					ref[pos+i].d, ref[pos+i].off = "", 0
				} else {
					ref[pos+i].d, ref[pos+i].off = p.Chunk.Digest, p.ChunkOffset+i*BlockSize
				}
			}
			pos += n
		}
		var err error
		m, err = Overlay(m, patches)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if got := (model{}).of(m); fmt.Sprint(got) != fmt.Sprint(ref) {
			t.Fatalf("round %d: overlay result differs from model", round)
		}
		enc, err := Encode(m)
		if err != nil {
			t.Fatalf("round %d: encode: %v", round, err)
		}
		if _, err := Decode(enc); err != nil {
			t.Fatalf("round %d: decode: %v", round, err)
		}
	}
}

func TestOverlayRejectsBadPatches(t *testing.T) {
	base := Empty(16 * BlockSize)
	a := chunk("a", 2)
	for name, ps := range map[string][]Patch{
		"misaligned":  {{Offset: 1, Length: BlockSize}},
		"overlapping": {{Offset: 0, Length: 2 * BlockSize}, {Offset: BlockSize, Length: BlockSize}},
		"outside":     {{Offset: 15 * BlockSize, Length: 2 * BlockSize}},
		"past chunk":  {{Offset: 0, Length: 3 * BlockSize, Chunk: a}},
	} {
		if _, err := Overlay(base, ps); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func FuzzDecode(f *testing.F) {
	a, b := chunk("a", 8), chunk("b", 1)
	for _, m := range []*Map{
		Empty(0),
		Empty(1 << 30),
		{Size: 64 * BlockSize, Chunks: []Chunk{a, b}, Extents: []Extent{{Offset: 0, Length: 8 * BlockSize}, {Offset: 9 * BlockSize, Length: BlockSize, Chunk: 1}}},
	} {
		enc, err := Encode(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(enc)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Decode(data)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error does not wrap ErrMalformed: %v", err)
			}
			return
		}
		enc, err := Encode(m)
		if err != nil {
			t.Fatalf("decoded map does not encode: %v", err)
		}
		if !bytes.Equal(enc, data) {
			t.Fatal("decode accepted a non-canonical encoding")
		}
		// Lookup over the whole volume covers it exactly.
		var n int64
		for _, p := range m.Lookup(0, m.Size) {
			n += p.Length
		}
		if n != m.Size {
			t.Fatalf("lookup covers %d of %d bytes", n, m.Size)
		}
	})
}

func appendUvarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func hexBytes(d digest.Digest) []byte {
	var out []byte
	fmt.Sscanf(d.Encoded(), "%x", &out)
	return out
}
