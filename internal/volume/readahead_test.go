package volume

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/blockmap"
)

// recorder is a ChunkReader and Prefetcher that notes, for each chunk, whether it
// was requested ahead before it was read.
type recorder struct {
	mu        sync.Mutex
	requested map[digest.Digest]bool
	readFirst int // chunks read before any prefetch asked for them
	reads     map[digest.Digest]bool
	prefetch  int
	slots     int // > 0: take at most this many chunks per call
}

func (r *recorder) ReadChunk(ctx context.Context, c blockmap.Chunk, p []byte, off int64) (bool, int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.reads[c.Digest] {
		r.reads[c.Digest] = true
		if !r.requested[c.Digest] {
			r.readFirst++
		}
	}
	return r.requested[c.Digest], 0, nil
}

func (r *recorder) Prefetch(cs []blockmap.Chunk, fetched func(int64)) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, c := range cs {
		if r.slots > 0 && i == r.slots {
			return i // busy: takes only the first few
		}
		if !r.requested[c.Digest] {
			r.requested[c.Digest] = true
			r.prefetch++
		}
	}
	return len(cs)
}

// TestReadaheadKeepsAhead reads a volume of 256 chunks sequentially, 128 KiB at a
// time (as the kernel does): after the first few, every chunk has been requested
// ahead before the reader gets to it, however many of the earlier ones hit. A
// reader jumping at random requests nothing ahead.
func TestReadaheadKeepsAhead(t *testing.T) {
	const chunk, n = 256 << 10, 256
	m := &blockmap.Map{Size: n * chunk}
	for i := range n {
		m.Chunks = append(m.Chunks, blockmap.Chunk{Digest: digest.FromString(fmt.Sprint(i)), Size: chunk})
		m.Extents = append(m.Extents, blockmap.Extent{Offset: int64(i) * chunk, Length: chunk, Chunk: i})
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		offsets  func() []int64
		maxFirst int // chunks the reader may reach before readahead
		maxAhead int // chunks requested ahead
		slots    int
	}{
		{"sequential", func() []int64 {
			var o []int64
			for off := int64(0); off < n*chunk; off += 128 << 10 {
				o = append(o, off)
			}
			return o
		}, 4, n, 0},
		// A prefetcher that takes a few chunks at a time is asked again for the
		// rest: nothing is skipped.
		{"sequential, busy prefetcher", func() []int64 {
			var o []int64
			for off := int64(0); off < n*chunk; off += 128 << 10 {
				o = append(o, off)
			}
			return o
		}, 4, n, 3},
		{"random", func() []int64 {
			r := rand.New(rand.NewPCG(1, 2))
			var o []int64
			for range 200 {
				o = append(o, r.Int64N(n)*chunk+r.Int64N(chunk/4096)*4096)
			}
			return o
		}, 200, 8, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &recorder{requested: map[digest.Digest]bool{}, reads: map[digest.Digest]bool{}, slots: tc.slots}
			v, err := Create(filepath.Join(t.TempDir(), "v"), digest.FromString("base"), m, m.Size, r)
			if err != nil {
				t.Fatal(err)
			}
			defer v.Close()
			buf := make([]byte, 128<<10)
			for _, off := range tc.offsets() {
				if _, err := v.ReadAt(ctx, buf[:min(int64(len(buf)), m.Size-off)], off); err != nil {
					t.Fatal(err)
				}
			}
			if r.readFirst > tc.maxFirst || r.prefetch > tc.maxAhead {
				t.Fatalf("%d chunks read before being requested ahead (at most %d), %d requested ahead (at most %d)",
					r.readFirst, tc.maxFirst, r.prefetch, tc.maxAhead)
			}
		})
	}
}
