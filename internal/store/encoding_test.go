package store_test

import (
	"bytes"
	"crypto/rand"
	"errors"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/store"
)

// textChunk is 256 KiB that compresses as file-system data does.
func textChunk() []byte {
	var b bytes.Buffer
	for i := 0; b.Len() < 256<<10; i++ {
		b.WriteString("Package: libc6\nVersion: 2.36-9\nDepends: libgcc-s1\n")
		b.WriteByte(byte(i))
	}
	return b.Bytes()[:256<<10]
}

func TestEncodeObjectRoundTrip(t *testing.T) {
	random := make([]byte, 256<<10)
	rand.Read(random)
	for _, tc := range []struct {
		name  string
		plain []byte
		want  string
	}{
		{"text", textChunk(), store.EncodingZstd},
		{"zeros", make([]byte, 4096), store.EncodingZstd},
		{"random stays raw", random, store.EncodingRaw},
		{"empty stays raw", nil, store.EncodingRaw},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stored, enc := store.EncodeObject(tc.plain)
			if enc != tc.want {
				t.Fatalf("encoding %q, want %q", enc, tc.want)
			}
			if enc == store.EncodingZstd && len(stored) >= len(tc.plain) {
				t.Fatalf("compressed %d bytes to %d", len(tc.plain), len(stored))
			}
			d := digest.FromBytes(tc.plain)
			got, err := store.DecodeObject(d, int64(len(tc.plain)), enc, stored)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, tc.plain) {
				t.Fatal("decoded bytes differ")
			}
		})
	}
}

func TestDecodeObjectRefuses(t *testing.T) {
	plain := textChunk()
	d := digest.FromBytes(plain)
	stored, enc := store.EncodeObject(plain)
	other, _ := store.EncodeObject(append([]byte("x"), plain[1:]...))
	// Decompression bombs: small frames of 8 MiB of zeros, one saying its size
	// in its header and one (streamed) not, offered as the 256 KiB chunk.
	bomb, _ := store.EncodeObject(make([]byte, 8<<20))
	var streamed bytes.Buffer
	zw, err := zstd.NewWriter(&streamed)
	if err != nil {
		t.Fatal(err)
	}
	zw.Write(make([]byte, 8<<20))
	zw.Close()
	if len(bomb) > 4096 || streamed.Len() > 4096 {
		t.Fatalf("bombs of %d and %d bytes: not small", len(bomb), streamed.Len())
	}
	flipped := bytes.Clone(stored)
	flipped[len(flipped)/2] ^= 0xff
	for _, tc := range []struct {
		name     string
		size     int64
		encoding string
		stored   []byte
		want     error
	}{
		{"other content", int64(len(plain)), enc, other, errdefs.ErrCorrupt},
		{"damaged frame", int64(len(plain)), enc, flipped, errdefs.ErrCorrupt},
		{"truncated frame", int64(len(plain)), enc, stored[:len(stored)/2], errdefs.ErrCorrupt},
		{"size that the frame does not say", int64(len(plain)) - 4096, enc, stored, errdefs.ErrCorrupt},
		{"two frames", int64(len(plain)), enc, append(bytes.Clone(stored), stored...), errdefs.ErrCorrupt},
		{"raw bytes called zstd", int64(len(plain)), enc, plain, errdefs.ErrCorrupt},
		{"zstd bytes called raw", int64(len(plain)), store.EncodingRaw, stored, errdefs.ErrCorrupt},
		{"unknown encoding", int64(len(plain)), "lz4", stored, errdefs.ErrUnsupported},
		{"bomb", int64(len(plain)), enc, bomb, errdefs.ErrCorrupt},
		{"bomb without its size", int64(len(plain)), enc, streamed.Bytes(), errdefs.ErrCorrupt},
		{"size over the limit", store.MaxEncodedObject + 1, enc, stored, errdefs.ErrCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := store.DecodeObject(d, tc.size, tc.encoding, tc.stored)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if got != nil {
				t.Fatal("bytes returned with an error")
			}
		})
	}
}

// FuzzDecodeObject: whatever a backend hands back, DecodeObject returns either the
// verified content or an error, and never more than the size it was told.
func FuzzDecodeObject(f *testing.F) {
	plain := textChunk()[:8192]
	stored, _ := store.EncodeObject(plain)
	f.Add(stored, int64(len(plain)))
	f.Add(stored[:20], int64(len(plain)))
	f.Add([]byte{0x28, 0xb5, 0x2f, 0xfd, 0, 0, 0, 0}, int64(100))
	d := digest.FromBytes(plain)
	f.Fuzz(func(t *testing.T, b []byte, size int64) {
		got, err := store.DecodeObject(d, size, store.EncodingZstd, b)
		if err == nil && !bytes.Equal(got, plain) {
			t.Fatal("decoded something other than the content without an error")
		}
		if err != nil && got != nil {
			t.Fatal("bytes returned with an error")
		}
	})
}

// The cost of compression on the read path: a 256 KiB chunk of text-like data
// (`go test ./internal/store -bench Object -run X`).
func BenchmarkDecodeObject(b *testing.B) {
	plain := textChunk()
	d := digest.FromBytes(plain)
	stored, enc := store.EncodeObject(plain)
	b.SetBytes(int64(len(plain)))
	for b.Loop() {
		if _, err := store.DecodeObject(d, int64(len(plain)), enc, stored); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeObject(b *testing.B) {
	plain := textChunk()
	b.SetBytes(int64(len(plain)))
	for b.Loop() {
		store.EncodeObject(plain)
	}
}
