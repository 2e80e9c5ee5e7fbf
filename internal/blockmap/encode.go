package blockmap

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"

	"github.com/opencontainers/go-digest"
)

// Magic opens every encoded block map.
const Magic = "SLKBMAP\x00"

// Version is the only format version this package reads and writes.
const Version = 1

// MediaType names an encoded block map where a media type is needed (OCI descriptors).
const MediaType = "application/vnd.slacker.blockmap.v1"

// Encode returns the canonical encoding of m (see docs/format.md):
//
//	magic "SLKBMAP\0"
//	uvarint version (1), uvarint block size (4096), uvarint size in blocks
//	uvarint chunk count, then per chunk: 32-byte sha256, uvarint size in blocks
//	uvarint extent count, then per extent (ascending offset), in blocks:
//	    uvarint offset, uvarint length, uvarint chunk index, uvarint offset in chunk
func Encode(m *Map) ([]byte, error) {
	m = Normalize(m)
	if err := m.Validate(); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	buf.Grow(len(Magic) + 16 + len(m.Chunks)*36 + len(m.Extents)*12)
	buf.WriteString(Magic)
	put := func(v int64) { buf.Write(binary.AppendUvarint(nil, uint64(v))) }
	put(Version)
	put(BlockSize)
	put(m.Size / BlockSize)
	put(int64(len(m.Chunks)))
	for _, c := range m.Chunks {
		raw, err := hex.DecodeString(c.Digest.Encoded())
		if err != nil || len(raw) != 32 {
			return nil, fmt.Errorf("%w: chunk digest %q", ErrMalformed, c.Digest)
		}
		buf.Write(raw)
		put(c.Size / BlockSize)
	}
	put(int64(len(m.Extents)))
	for _, e := range m.Extents {
		put(e.Offset / BlockSize)
		put(e.Length / BlockSize)
		put(int64(e.Chunk))
		put(e.ChunkOffset / BlockSize)
	}
	return buf.Bytes(), nil
}

// ID returns the snapshot ID of an encoded map: its sha256 digest.
func ID(encoded []byte) digest.Digest { return digest.FromBytes(encoded) }

// Decode parses an encoded map and validates it. It never allocates more than a
// small multiple of len(b), whatever the counts in the input claim.
func Decode(b []byte) (*Map, error) {
	if len(b) < len(Magic) || string(b[:len(Magic)]) != Magic {
		return nil, fmt.Errorf("%w: bad magic", ErrMalformed)
	}
	r := reader{b: b, off: len(Magic)}
	version := r.uvarint("version")
	if r.err == nil && version != Version {
		return nil, fmt.Errorf("%w: unknown version %d (this build reads version %d)", ErrMalformed, version, Version)
	}
	if bs := r.uvarint("block size"); r.err == nil && bs != BlockSize {
		return nil, fmt.Errorf("%w: block size %d, want %d", ErrMalformed, bs, BlockSize)
	}
	m := &Map{}
	m.Size = r.blocks("size")
	nchunks := r.count("chunk count", 33)
	if r.err == nil {
		m.Chunks = make([]Chunk, 0, nchunks)
	}
	seen := make(map[digest.Digest]bool, nchunks)
	for i := 0; i < nchunks && r.err == nil; i++ {
		raw := r.bytes(32, "chunk digest")
		size := r.blocks("chunk size")
		if r.err != nil {
			break
		}
		d := digest.NewDigestFromEncoded(digest.SHA256, hex.EncodeToString(raw))
		if seen[d] {
			return nil, fmt.Errorf("%w: chunk %s listed twice", ErrMalformed, d)
		}
		seen[d] = true
		m.Chunks = append(m.Chunks, Chunk{Digest: d, Size: size})
	}
	nextents := r.count("extent count", 4)
	if r.err == nil {
		m.Extents = make([]Extent, 0, nextents)
	}
	used := make([]bool, len(m.Chunks))
	for i := 0; i < nextents && r.err == nil; i++ {
		e := Extent{
			Offset: r.blocks("extent offset"),
			Length: r.blocks("extent length"),
		}
		ci := r.uvarint("extent chunk")
		e.ChunkOffset = r.blocks("extent chunk offset")
		if r.err != nil {
			break
		}
		if ci >= uint64(len(m.Chunks)) {
			return nil, fmt.Errorf("%w: extent %d names chunk %d of %d", ErrMalformed, i, ci, len(m.Chunks))
		}
		e.Chunk = int(ci)
		used[ci] = true
		m.Extents = append(m.Extents, e)
	}
	if r.err != nil {
		return nil, r.err
	}
	if r.off != len(b) {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrMalformed, len(b)-r.off)
	}
	for i, u := range used {
		if !u {
			return nil, fmt.Errorf("%w: chunk %d (%s) is listed but never used", ErrMalformed, i, m.Chunks[i].Digest)
		}
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	// One logical map has one encoding, so one snapshot has one ID.
	if canon, err := Encode(m); err != nil || !bytes.Equal(canon, b) {
		return nil, fmt.Errorf("%w: not in canonical form (unmerged extents, chunk order or varint padding)", ErrMalformed)
	}
	return m, nil
}

type reader struct {
	b   []byte
	off int
	err error
}

func (r *reader) uvarint(what string) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b[r.off:])
	if n <= 0 {
		r.err = fmt.Errorf("%w: truncated or overlong %s at byte %d", ErrMalformed, what, r.off)
		return 0
	}
	r.off += n
	return v
}

// blocks reads a count of blocks and returns it in bytes, rejecting values past MaxSize.
func (r *reader) blocks(what string) int64 {
	v := r.uvarint(what)
	if r.err == nil && v > MaxSize/BlockSize {
		r.err = fmt.Errorf("%w: %s of %d blocks is too large", ErrMalformed, what, v)
		return 0
	}
	return int64(v) * BlockSize
}

// count reads an element count and rejects it if the remaining input cannot hold
// that many elements of at least minBytes each.
func (r *reader) count(what string, minBytes int) int {
	v := r.uvarint(what)
	if r.err == nil && v > uint64((len(r.b)-r.off)/minBytes) {
		r.err = fmt.Errorf("%w: %s %d exceeds what %d remaining bytes can hold", ErrMalformed, what, v, len(r.b)-r.off)
		return 0
	}
	return int(v)
}

func (r *reader) bytes(n int, what string) []byte {
	if r.err != nil {
		return nil
	}
	if len(r.b)-r.off < n {
		r.err = fmt.Errorf("%w: truncated %s at byte %d", ErrMalformed, what, r.off)
		return nil
	}
	out := r.b[r.off : r.off+n]
	r.off += n
	return out
}
