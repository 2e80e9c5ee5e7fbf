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
	"time"

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
			o, err := c.ReadChunk(context.Background(), ch, p, 50)
			if err != nil {
				t.Error(err)
			}
			if o == FromStore {
				fetched.Add(ch.Size)
			}
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
	o, err := c.ReadChunk(context.Background(), ch, make([]byte, 10), 0)
	if err != nil || !o.Hit() || src.n.Load() != 1 {
		t.Fatalf("second read: from %v, err=%v, %d fetches; want a hit (memory, or its disk file once written)", o, err, src.n.Load())
	}
}

func TestCorruptFileIsRefetchedNotServed(t *testing.T) {
	src := newSource()
	dir := t.TempDir()
	c := openCache(t, Options{Dir: dir, MaxBytes: 1 << 20}, src)
	ch := src.add(t, 4096)
	want := src.chunks[ch.Digest]
	if _, err := c.ReadChunk(context.Background(), ch, make([]byte, 4096), 0); err != nil {
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
	if _, err := c2.ReadChunk(context.Background(), ch, got, 0); err != nil {
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
	if o, _ := c.ReadChunk(ctx, hot, make([]byte, 1), 0); (o != FromDisk && o != FromFile) || src.n.Load() != before {
		t.Fatal("a hot chunk was evicted by a scan of cold ones")
	}
}

func TestMissingChunkError(t *testing.T) {
	src := newSource()
	c := openCache(t, Options{Dir: t.TempDir(), MaxBytes: 1 << 20}, src)
	_, err := c.ReadChunk(context.Background(), blockmap.Chunk{Digest: digest.FromString("x"), Size: 4096}, make([]byte, 1), 0)
	if !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("got %v", err)
	}
}

// A load goes on after the reader that started it gives up (others may be
// waiting for it), so it can finish after the cache is closed: it must neither
// write to the closed disk tier nor fail (it panicked with a send on a closed
// channel, seen as a data race in CI when a node closed under a reader).
func TestLoadFinishingAfterClose(t *testing.T) {
	src := newSource()
	c, err := Open(Options{Dir: t.TempDir(), MaxBytes: 1 << 20}, src)
	if err != nil {
		t.Fatal(err)
	}
	ch := src.add(t, 4096)
	src.gate = make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		_, err := c.ReadChunk(ctx, ch, make([]byte, 1), 0)
		done <- err
	}()
	for src.n.Load() == 0 { // the load has started
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled reader got %v", err)
	}
	c.Close()
	close(src.gate) // the load finishes now, after Close
	for c.Stats().Misses == 0 {
		time.Sleep(time.Millisecond)
	}
	c.Flush() // a no-op after Close, not a panic
	if st := c.Stats(); st.DiskChunks != 0 || st.MemBytes != 4096 {
		t.Fatalf("after a load finished past Close: %+v; want the chunk in memory only", st)
	}
}

// TestOpenRemovesTemporaryFiles: a disk write cut short by a crash leaves a
// temporary file; the next Open removes it (and this package's older "tmp-" ones)
// and keeps the chunk files.
func TestOpenRemovesTemporaryFiles(t *testing.T) {
	src := newSource()
	dir := t.TempDir()
	c := openCache(t, Options{Dir: dir, MaxBytes: 1 << 20}, src)
	ch := src.add(t, 4096)
	if _, err := c.ReadChunk(context.Background(), ch, make([]byte, 4096), 0); err != nil {
		t.Fatal(err)
	}
	c.Close()
	leftovers := []string{"." + ch.Digest.Encoded() + ".tmp-0123456789abcdef", "tmp-123456"}
	for _, name := range leftovers {
		if err := os.WriteFile(dir+"/"+name, []byte("torn"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c2 := openCache(t, Options{Dir: dir, MaxBytes: 1 << 20}, src)
	for _, name := range leftovers {
		if _, err := os.Stat(dir + "/" + name); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after Open: %v", name, err)
		}
	}
	o, err := c2.ReadChunk(context.Background(), ch, make([]byte, 4096), 0)
	if err != nil || o != FromDisk || src.n.Load() != 1 {
		t.Errorf("read after reopen: from %v, err %v, fetches %d; want the disk tier and 1 fetch", o, err, src.n.Load())
	}
}
