package cache

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

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

// A Load through a BatchSource is one batch; a reader that misses on one of its
// chunks while it runs waits for it instead of fetching the chunk again; a chunk
// the batch failed is reported as failed and fetched by the next reader; chunks
// cached already, or named twice, are reported once and not fetched.
func TestLoadBatch(t *testing.T) {
	src := &batchSource{countingSource: newSource(), batchGate: make(chan struct{}), fail: map[digest.Digest]bool{}}
	c := openCache(t, Options{Dir: t.TempDir(), MaxBytes: 1 << 20}, src)
	var cs []blockmap.Chunk
	for i := 0; i < 8; i++ {
		cs = append(cs, src.add(t, 4096))
	}
	src.fail[cs[7].Digest] = true
	ctx := context.Background()
	if _, err := c.ReadChunk(ctx, cs[0], make([]byte, 1), 0); err != nil { // cached: not in the batch
		t.Fatal(err)
	}
	origins := map[digest.Digest]Origin{}
	var failed []digest.Digest
	loaded := make(chan struct{})
	go func() {
		defer close(loaded)
		c.Load(ctx, append(cs, cs[2]), func(ch blockmap.Chunk, o Origin, err error) {
			if err != nil {
				failed = append(failed, ch.Digest)
				return
			}
			if _, dup := origins[ch.Digest]; dup {
				t.Errorf("chunk %s reported twice", ch.Digest)
			}
			origins[ch.Digest] = o
		})
	}()
	for src.batches.Load() == 0 { // every chunk is registered before the batch starts
		time.Sleep(time.Millisecond)
	}
	done := make(chan error)
	p := make([]byte, 4096)
	go func() {
		o, err := c.ReadChunk(ctx, cs[3], p, 0)
		if err == nil && o == FromStore { // joined the batch, or came after it
			err = fmt.Errorf("the reader fetched its chunk again while the batch brought it")
		}
		done <- err
	}()
	close(src.batchGate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	<-loaded
	src.mu.Lock()
	want := src.chunks[cs[3].Digest]
	src.mu.Unlock()
	if !bytes.Equal(p, want) {
		t.Fatal("reader got wrong bytes")
	}
	if src.batches.Load() != 1 || src.n.Load() != 1 {
		t.Fatalf("%d batches and %d lone fetches; want 1 and 1 (the first read)", src.batches.Load(), src.n.Load())
	}
	if len(failed) != 1 || failed[0] != cs[7].Digest {
		t.Fatalf("failed chunks %v, want only %s", failed, cs[7].Digest)
	}
	if origins[cs[0].Digest] != FromMemory || len(origins) != 7 {
		t.Fatalf("origins %v: want the cached chunk from memory and 7 chunks reported", origins)
	}
	for _, ch := range cs[1:7] {
		if origins[ch.Digest] != FromStore {
			t.Fatalf("chunk %s: %v, want store", ch.Digest, origins[ch.Digest])
		}
		if o, err := c.ReadChunk(ctx, ch, make([]byte, 1), 0); err != nil || !o.Hit() {
			t.Fatalf("after the batch: from %v, err=%v; want a hit", o, err)
		}
	}
	// The failed one is fetched alone by a reader.
	delete(src.fail, cs[7].Digest)
	if o, err := c.ReadChunk(ctx, cs[7], make([]byte, 1), 0); err != nil || o != FromStore {
		t.Fatalf("the chunk the batch failed: from %v, err=%v", o, err)
	}
}
