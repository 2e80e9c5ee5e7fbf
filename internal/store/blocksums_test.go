package store

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/slacker-dev/slacker/internal/errdefs"
)

// TestBlockSummer: the checksums of a stream written in pieces of any size are
// those of the whole, for sizes around block boundaries.
func TestBlockSummer(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, size := range []int{0, 1, SumBlock - 1, SumBlock, SumBlock + 1, 64*SumBlock - 7, 256 << 10} {
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(r.Uint32())
		}
		want := SumBlocks(data, 42)
		b := NewBlockSummer(42)
		for rest := data; len(rest) > 0; {
			k := min(len(rest), 1+r.IntN(3*SumBlock))
			b.Write(rest[:k])
			rest = rest[k:]
		}
		got := b.Sums()
		if got.Seed != 42 || got.Size != int64(size) || !slices.Equal(got.Sums, want) {
			t.Fatalf("size %d: summer gave %d checksums (size %d), want %d", size, len(got.Sums), got.Size, len(want))
		}
		if len(want) != (size+SumBlock-1)/SumBlock {
			t.Fatalf("size %d: %d checksums", size, len(want))
		}
		if size > 0 && slices.Equal(SumBlocks(data, 43), want) {
			t.Fatalf("size %d: the seed changes nothing", size)
		}
	}
}

// TestBlockSumsEncoding: an encoding decodes to what was encoded; a flipped bit
// anywhere, a cut, or a size its checksums do not cover is ErrCorrupt.
func TestBlockSumsEncoding(t *testing.T) {
	data := bytes.Repeat([]byte("slacker!"), 5000)
	s := BlockSums{Seed: 7, Size: int64(len(data)), Sums: SumBlocks(data, 7)}
	enc := s.Marshal()
	got, err := UnmarshalBlockSums(enc)
	if err != nil || got.Seed != s.Seed || got.Size != s.Size || !slices.Equal(got.Sums, s.Sums) {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	for i := range enc {
		for bit := 0; bit < 8; bit++ {
			b := slices.Clone(enc)
			b[i] ^= 1 << bit
			if _, err := UnmarshalBlockSums(b); !errors.Is(err, errdefs.ErrCorrupt) {
				t.Fatalf("bit %d of byte %d flipped: %v", bit, i, err)
			}
		}
	}
	for _, b := range [][]byte{nil, enc[:3], enc[:len(enc)-1], enc[:len(enc)-8], append(slices.Clone(enc), 0)} {
		if _, err := UnmarshalBlockSums(b); !errors.Is(err, errdefs.ErrCorrupt) {
			t.Fatalf("%d bytes: %v", len(b), err)
		}
	}
	wrong := BlockSums{Seed: 7, Size: s.Size + SumBlock, Sums: s.Sums}.Marshal()
	if _, err := UnmarshalBlockSums(wrong); !errors.Is(err, errdefs.ErrCorrupt) {
		t.Fatalf("a size past its checksums: %v", err)
	}
}

// FuzzUnmarshalBlockSums: whatever a file's xattr holds, decoding returns
// checksums that cover their size exactly, or ErrCorrupt; never a panic.
func FuzzUnmarshalBlockSums(f *testing.F) {
	f.Add(BlockSums{Seed: 1, Size: 5000, Sums: SumBlocks(make([]byte, 5000), 1)}.Marshal())
	f.Add(BlockSums{}.Marshal())
	f.Add([]byte("SBS1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := UnmarshalBlockSums(b)
		if err != nil {
			if !errors.Is(err, errdefs.ErrCorrupt) {
				t.Fatalf("error of another kind: %v", err)
			}
			return
		}
		if int64(len(s.Sums)) != (s.Size+SumBlock-1)/SumBlock {
			t.Fatalf("%d checksums for %d bytes", len(s.Sums), s.Size)
		}
		if !bytes.Equal(s.Marshal(), b) {
			t.Fatal("decoded checksums encode differently")
		}
	})
}
