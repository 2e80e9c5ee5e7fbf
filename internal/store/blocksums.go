package store

import (
	"encoding/binary"
	"fmt"

	"github.com/zeebo/xxh3"

	"github.com/slacker-dev/slacker/internal/errdefs"
)

// SumBlock is the unit of block checksums: 4 KiB, the block of the filesystems
// Slacker serves (ext4 over a loop device reads 4 KiB blocks).
const SumBlock = 4096

// MaxSummedObject is the largest object whose block checksums a backend keeps
// (256 checksums, about 2 KiB encoded: within one ext4 xattr block). Chunks (256
// KiB by default) are far below it.
const MaxSummedObject = 1 << 20

// BlockSums are checksums of an object's 4 KiB blocks (the last may be shorter),
// xxh3-64 seeded with Seed, taken from bytes that had just matched the object's
// digest. They let a reader on the machine that holds the object's bytes check a
// few blocks of it without reading and hashing it whole; the digest stays the root
// of trust. They catch damage to the bytes after that check (bit rot, a torn or
// misdirected write, a stray writer), not an adversary who can write both the
// bytes and their checksums.
type BlockSums struct {
	Seed uint64
	Size int64 // the object's size
	Sums []uint64
}

// SumBlocks returns the checksums of data's 4 KiB blocks, seeded with seed.
func SumBlocks(data []byte, seed uint64) []uint64 {
	sums := make([]uint64, 0, (len(data)+SumBlock-1)/SumBlock)
	for off := 0; off < len(data); off += SumBlock {
		sums = append(sums, xxh3.HashSeed(data[off:min(off+SumBlock, len(data))], seed))
	}
	return sums
}

// BlockSummer takes the block checksums of a stream written to it.
type BlockSummer struct {
	seed uint64
	buf  []byte
	n    int64
	sums []uint64
}

// NewBlockSummer returns a BlockSummer seeded with seed.
func NewBlockSummer(seed uint64) *BlockSummer {
	return &BlockSummer{seed: seed, buf: make([]byte, 0, SumBlock)}
}

// Write adds p to the stream; it never fails.
func (b *BlockSummer) Write(p []byte) (int, error) {
	n := len(p)
	b.n += int64(n)
	for len(p) > 0 {
		if len(b.buf) == 0 && len(p) >= SumBlock { // whole blocks straight from p
			b.sums = append(b.sums, xxh3.HashSeed(p[:SumBlock], b.seed))
			p = p[SumBlock:]
			continue
		}
		k := min(SumBlock-len(b.buf), len(p))
		b.buf = append(b.buf, p[:k]...)
		p = p[k:]
		if len(b.buf) == SumBlock {
			b.sums = append(b.sums, xxh3.HashSeed(b.buf, b.seed))
			b.buf = b.buf[:0]
		}
	}
	return n, nil
}

// Sums returns the checksums of the stream written so far, as a whole object.
func (b *BlockSummer) Sums() BlockSums {
	sums := b.sums
	if len(b.buf) > 0 {
		sums = append(sums[:len(sums):len(sums)], xxh3.HashSeed(b.buf, b.seed))
	}
	return BlockSums{Seed: b.seed, Size: b.n, Sums: sums}
}

// blockSumsMagic opens an encoded BlockSums (version 1).
var blockSumsMagic = [4]byte{'S', 'B', 'S', '1'}

// blockSumsHeader is the encoded size of everything but the checksums: magic,
// seed, size, then the checksums, then the xxh3-64 of all that precedes it.
const blockSumsHeader = 4 + 8 + 8

// Marshal encodes s: "SBS1", the seed and the size (little-endian u64 each), the
// checksums (u64 each), and an xxh3-64 of everything before it, so that a damaged
// encoding decodes to an error, never to wrong checksums.
func (s BlockSums) Marshal() []byte {
	b := make([]byte, 0, blockSumsHeader+8*len(s.Sums)+8)
	b = append(b, blockSumsMagic[:]...)
	b = binary.LittleEndian.AppendUint64(b, s.Seed)
	b = binary.LittleEndian.AppendUint64(b, uint64(s.Size))
	for _, x := range s.Sums {
		b = binary.LittleEndian.AppendUint64(b, x)
	}
	return binary.LittleEndian.AppendUint64(b, xxh3.Hash(b))
}

// UnmarshalBlockSums decodes what Marshal encoded. Anything else (damaged,
// truncated, a size the checksums do not cover) is errdefs.ErrCorrupt.
func UnmarshalBlockSums(b []byte) (BlockSums, error) {
	bad := func(why string) (BlockSums, error) {
		return BlockSums{}, fmt.Errorf("block checksums: %s: %w", why, errdefs.ErrCorrupt)
	}
	if len(b) < blockSumsHeader+8 || (len(b)-blockSumsHeader-8)%8 != 0 || [4]byte(b[:4]) != blockSumsMagic {
		return bad("not an encoding of version 1")
	}
	body := b[:len(b)-8]
	if xxh3.Hash(body) != binary.LittleEndian.Uint64(b[len(body):]) {
		return bad("their own checksum does not match")
	}
	s := BlockSums{Seed: binary.LittleEndian.Uint64(b[4:]), Size: int64(binary.LittleEndian.Uint64(b[12:]))}
	n := (len(body) - blockSumsHeader) / 8
	if s.Size < 0 || int64(n) != (s.Size+SumBlock-1)/SumBlock {
		return bad(fmt.Sprintf("%d checksums for an object of %d bytes", n, s.Size))
	}
	s.Sums = make([]uint64, n)
	for i := range s.Sums {
		s.Sums[i] = binary.LittleEndian.Uint64(body[blockSumsHeader+8*i:])
	}
	return s, nil
}
