package cache

import (
	"context"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/blockmap"
)

type bytesSource map[digest.Digest][]byte

func (s bytesSource) Fetch(ctx context.Context, c blockmap.Chunk) ([]byte, error) {
	return s[c.Digest], nil
}

// TestTrim keeps the hottest chunks within the bound asked for and can still read
// every chunk.
func TestTrim(t *testing.T) {
	src := bytesSource{}
	var chunks []blockmap.Chunk
	for i := range 10 {
		b := make([]byte, 4096)
		b[0] = byte(i)
		d := digest.FromBytes(b)
		src[d] = b
		chunks = append(chunks, blockmap.Chunk{Digest: d, Size: 4096})
	}
	c := openCache(t, Options{Dir: t.TempDir(), MaxBytes: 1 << 20}, src)
	ctx := context.Background()
	for _, ch := range chunks {
		if _, _, err := c.Get(ctx, ch); err != nil {
			t.Fatal(err)
		}
	}
	c.Flush()
	for _, ch := range chunks[:3] { // hot: read twice
		c.DropMemory()
		c.Get(ctx, ch)
	}
	n, freed := c.Trim(3 * 4096)
	if n != 7 || freed != 7*4096 || c.Stats().DiskBytes != 3*4096 {
		t.Fatalf("trim: %d chunks, %d bytes; stats %+v", n, freed, c.Stats())
	}
	c.DropMemory()
	for i, ch := range chunks {
		data, o, err := c.Get(ctx, ch)
		hit := o.Hit()
		if err != nil || data[0] != byte(i) {
			t.Fatalf("chunk %d after trim: %v", i, err)
		}
		if want := i < 3; hit != want {
			t.Fatalf("chunk %d: hit %v, want %v (the hot ones stay)", i, hit, want)
		}
	}
	if n, _ := c.Trim(0); n == 0 || c.Stats().DiskChunks != 0 {
		t.Fatalf("trim to 0 left %d chunks", c.Stats().DiskChunks)
	}
}
