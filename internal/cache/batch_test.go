package cache

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/blockmap"
	"github.com/slacker-dev/slacker/internal/errdefs"
)

// batchSource is a countingSource that can also fetch many chunks at once, each
// batch held at its gate; chunks in fail are delivered as errors.
type batchSource struct {
	*countingSource
	batches   atomic.Int64
	batchGate chan struct{}
	fail      map[digest.Digest]bool
}

func (s *batchSource) BatchReads() bool { return true }

func (s *batchSource) FetchMany(ctx context.Context, cs []blockmap.Chunk, fn func(blockmap.Chunk, []byte, error)) {
	s.batches.Add(1)
	if s.batchGate != nil {
		<-s.batchGate
	}
	for _, c := range cs {
		s.mu.Lock()
		b, ok := s.chunks[c.Digest]
		s.mu.Unlock()
		if !ok || s.fail[c.Digest] {
			fn(c, nil, errdefs.ErrUnavailable)
			continue
		}
		fn(c, append([]byte(nil), b...), nil)
	}
}

// A prefetch through a BatchSource is one batch; a reader that misses on one of
// its chunks while it runs waits for it instead of fetching the chunk again; a
// chunk the batch failed is fetched by the next reader.
func TestPrefetchBatch(t *testing.T) {
	src := &batchSource{countingSource: newSource(), batchGate: make(chan struct{}), fail: map[digest.Digest]bool{}}
	c := openCache(t, Options{Dir: t.TempDir(), MaxBytes: 1 << 20}, src)
	var cs []blockmap.Chunk
	for i := 0; i < 8; i++ {
		cs = append(cs, src.add(t, 4096))
	}
	src.fail[cs[7].Digest] = true
	ctx := context.Background()
	if _, _, err := c.ReadChunk(ctx, cs[0], make([]byte, 1), 0); err != nil { // cached: not in the batch
		t.Fatal(err)
	}
	var prefetched atomic.Int64
	c.Prefetch(append(cs, cs[2]), func(n int64) { prefetched.Add(n) })
	done := make(chan error)
	p := make([]byte, 4096)
	go func() {
		_, _, err := c.ReadChunk(ctx, cs[3], p, 0)
		done <- err
	}()
	close(src.batchGate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	src.mu.Lock()
	want := src.chunks[cs[3].Digest]
	src.mu.Unlock()
	if !bytes.Equal(p, want) {
		t.Fatal("reader got wrong bytes")
	}
	c.pfWG.Wait() // the prefetch is done
	if src.batches.Load() != 1 || src.n.Load() != 1 {
		t.Fatalf("%d batches and %d lone fetches; want 1 and 1 (the first read)", src.batches.Load(), src.n.Load())
	}
	st := c.Stats()
	if st.Prefetched != 6 || prefetched.Load() != 6*4096 {
		t.Fatalf("prefetched %d chunks, %d bytes; want 6 (7 asked, 1 failed)", st.Prefetched, prefetched.Load())
	}
	for _, ch := range cs[1:7] {
		if hit, f, err := c.ReadChunk(ctx, ch, make([]byte, 1), 0); err != nil || !hit || f != 0 {
			t.Fatalf("after the batch: hit=%v fetched=%d err=%v", hit, f, err)
		}
	}
	// The failed one is fetched alone by a reader.
	delete(src.fail, cs[7].Digest)
	if hit, f, err := c.ReadChunk(ctx, cs[7], make([]byte, 1), 0); err != nil || hit || f != 4096 {
		t.Fatalf("the chunk the batch failed: hit=%v fetched=%d err=%v", hit, f, err)
	}
}
