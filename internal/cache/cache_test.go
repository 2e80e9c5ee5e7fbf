package cache

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/blockmap"
	"github.com/slacker-dev/slacker/internal/errdefs"
)

// countingSource serves chunks from memory and counts fetches.
type countingSource struct {
	mu     sync.Mutex
	chunks map[digest.Digest][]byte
	n      atomic.Int64
	gate   chan struct{}
}

func (s *countingSource) Fetch(ctx context.Context, c blockmap.Chunk) ([]byte, error) {
	s.n.Add(1)
	if s.gate != nil {
		<-s.gate
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.chunks[c.Digest]
	if !ok {
		return nil, errdefs.ErrNotFound
	}
	return append([]byte(nil), b...), nil
}

func (s *countingSource) add(t *testing.T, size int) blockmap.Chunk {
	b := make([]byte, size)
	rand.Read(b)
	d := digest.FromBytes(b)
	s.mu.Lock()
	s.chunks[d] = b
	s.mu.Unlock()
	return blockmap.Chunk{Digest: d, Size: int64(size)}
}

func newSource() *countingSource { return &countingSource{chunks: map[digest.Digest][]byte{}} }

// openCache opens a cache for a test and closes it before the test's temporary
// directories are removed (its disk writes run in the background).
func openCache(t *testing.T, o Options, src Source) *Cache {
	t.Helper()
	c, err := Open(o, src)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func TestHitMissAndSharedFetch(t *testing.T) {
	src := newSource()
	c := openCache(t, Options{Dir: t.TempDir(), MaxBytes: 1 << 20}, src)
	ch := src.add(t, 8192)
	src.gate = make(chan struct{})
	var wg sync.WaitGroup
	var fetched atomic.Int64
	for i := 0; i < 10; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := make([]byte, 100)
			_, f, err := c.ReadChunk(context.Background(), ch, p, 50)
			if err != nil {
				t.Error(err)
			}
			fetched.Add(f)
		}()
	}
	close(src.gate)
	wg.Wait()
	if src.n.Load() != 1 {
		t.Fatalf("10 concurrent misses made %d fetches, want 1", src.n.Load())
	}
	if fetched.Load() != 8192 {
		t.Fatalf("fetched bytes attributed %d, want 8192 once", fetched.Load())
	}
	hit, f, err := c.ReadChunk(context.Background(), ch, make([]byte, 10), 0)
	if err != nil || !hit || f != 0 {
		t.Fatalf("second read: hit=%v fetched=%d err=%v", hit, f, err)
	}
}

func TestCorruptFileIsRefetchedNotServed(t *testing.T) {
	src := newSource()
	dir := t.TempDir()
	c := openCache(t, Options{Dir: dir, MaxBytes: 1 << 20}, src)
	ch := src.add(t, 4096)
	want := src.chunks[ch.Digest]
	if _, _, err := c.ReadChunk(context.Background(), ch, make([]byte, 4096), 0); err != nil {
		t.Fatal(err)
	}
	c.Close()
	// Flip a byte in the cached file; a new cache (empty memory tier) must notice.
	p := dir + "/" + ch.Digest.Encoded()
	b, _ := os.ReadFile(p)
	b[100] ^= 1
	os.WriteFile(p, b, 0o600)
	c2 := openCache(t, Options{Dir: dir, MaxBytes: 1 << 20}, src)
	got := make([]byte, 4096)
	if _, _, err := c2.ReadChunk(context.Background(), ch, got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("served corrupt cached bytes")
	}
	if c2.Stats().Corrupt != 1 || src.n.Load() != 2 {
		t.Fatalf("corrupt=%d fetches=%d, want 1 and 2", c2.Stats().Corrupt, src.n.Load())
	}
}

func TestEvictionBoundAndHotness(t *testing.T) {
	src := newSource()
	c := openCache(t, Options{Dir: t.TempDir(), MaxBytes: 10 * 4096, MemBytes: 4096}, src)
	ctx := context.Background()
	hot := src.add(t, 4096)
	c.ReadChunk(ctx, hot, make([]byte, 1), 0)
	c.Flush()
	c.DropMemory()
	c.ReadChunk(ctx, hot, make([]byte, 1), 0) // second use: protected
	for i := 0; i < 50; i++ {                 // a scan of cold chunks
		ch := src.add(t, 4096)
		c.ReadChunk(ctx, ch, make([]byte, 1), 0)
		c.Flush()
	}
	st := c.Stats()
	if st.DiskBytes > 10*4096 || st.MemBytes > 4096 {
		t.Fatalf("cache over its bounds: %+v", st)
	}
	before := src.n.Load()
	c.Flush()
	c.DropMemory()
	if hit, _, _ := c.ReadChunk(ctx, hot, make([]byte, 1), 0); !hit || src.n.Load() != before {
		t.Fatal("a hot chunk was evicted by a scan of cold ones")
	}
}

func TestMissingChunkError(t *testing.T) {
	src := newSource()
	c := openCache(t, Options{Dir: t.TempDir(), MaxBytes: 1 << 20}, src)
	_, _, err := c.ReadChunk(context.Background(), blockmap.Chunk{Digest: digest.FromString("x"), Size: 4096}, make([]byte, 1), 0)
	if !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("got %v", err)
	}
}
