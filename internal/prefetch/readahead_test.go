package prefetch

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/blockmap"
	"github.com/slacker-dev/slacker/internal/cache"
)

// fakeCache is a Cache that notes, for each chunk, whether it was loaded ahead
// before it was read.
type fakeCache struct {
	mu        sync.Mutex
	requested map[digest.Digest]bool
	readFirst int // chunks read before any load asked for them
	reads     map[digest.Digest]bool
	loaded    int
	batch     bool
}

func newFakeCache() *fakeCache {
	return &fakeCache{requested: map[digest.Digest]bool{}, reads: map[digest.Digest]bool{}}
}

func (f *fakeCache) ReadChunk(ctx context.Context, c blockmap.Chunk, p []byte, off int64) (cache.Origin, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.reads[c.Digest] {
		f.reads[c.Digest] = true
		if !f.requested[c.Digest] {
			f.readFirst++
		}
	}
	if f.requested[c.Digest] {
		return cache.FromMemory, nil
	}
	f.requested[c.Digest] = true
	return cache.FromStore, nil
}

func (f *fakeCache) Cached(c blockmap.Chunk) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requested[c.Digest]
}

func (f *fakeCache) Load(ctx context.Context, cs []blockmap.Chunk, fn func(blockmap.Chunk, cache.Origin, error)) {
	for _, c := range cs {
		f.mu.Lock()
		o := cache.FromMemory
		if !f.requested[c.Digest] {
			f.requested[c.Digest] = true
			f.loaded++
			o = cache.FromStore
		}
		f.mu.Unlock()
		fn(c, o, nil)
	}
}

func (f *fakeCache) BatchLoads() bool { return f.batch }

// TestReadaheadKeepsAhead reads an image of 256 chunks sequentially, 128 KiB at a
// time (as the kernel does): after the first few, every chunk has been loaded
// ahead before the reader gets to it, however many of the earlier ones hit, and
// the bytes those loads fetched are the reader's, also when the reads arrive out
// of order. A reader jumping at random, or going backwards, loads nothing ahead.
func TestReadaheadKeepsAhead(t *testing.T) {
	const chunk, n = 256 << 10, 256
	m := chunkedMap(n, chunk)
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		offsets  func() []int64
		maxFirst int // chunks the reader may reach before readahead
		maxAhead int // chunks loaded ahead
		slots    int // the engine's slots (0: the default)
		batch    bool
		read     int64 // each read's size (0: 128 KiB)
	}{
		{"sequential", func() []int64 {
			var o []int64
			for off := int64(0); off < n*chunk; off += 128 << 10 {
				o = append(o, off)
			}
			return o
		}, 4, n, 0, false, 0},
		{"sequential, batches", func() []int64 {
			var o []int64
			for off := int64(0); off < n*chunk; off += 128 << 10 {
				o = append(o, off)
			}
			return o
		}, 4, n, 0, true, 0},
		// An engine that has few slots takes a few chunks at a time and is asked
		// again for the rest: nothing is skipped.
		{"sequential, busy engine", func() []int64 {
			var o []int64
			for off := int64(0); off < n*chunk; off += 128 << 10 {
				o = append(o, off)
			}
			return o
		}, 4, n, 3, false, 0},
		// Concurrent reads arrive out of order: each pair of 128 KiB reads comes
		// second half first. The stream is still seen.
		{"sequential, out of order", func() []int64 {
			var o []int64
			for off := int64(0); off < n*chunk; off += 256 << 10 {
				o = append(o, off+128<<10, off)
			}
			return o
		}, 4, n, 0, false, 0},
		// A guest reading ahead 16 KiB reads a 512 KiB file in 32 reads: what is
		// loaded ahead stays near what was read (it was 64 chunks, 16 MiB, as the
		// window doubled with each read).
		{"sequential, small reads", func() []int64 {
			var o []int64
			for off := int64(0); off < 2*chunk; off += 16 << 10 {
				o = append(o, off)
			}
			return o
		}, 2, 3, 0, false, 16 << 10},
		// Page faults through a mapped file can walk it backwards, a few pages at
		// a time: nothing is loaded ahead of such a reader (that was 16 MiB,
		// fetched past a binary for a container that only ran `cat`).
		{"backwards", func() []int64 {
			var o []int64
			for off := int64(200 * chunk); off >= 190*chunk; off -= 32 << 10 {
				o = append(o, off)
			}
			return o
		}, 200, 0, 0, false, 0},
		{"random", func() []int64 {
			r := rand.New(rand.NewPCG(1, 2))
			var o []int64
			for range 200 {
				o = append(o, r.Int64N(n)*chunk+r.Int64N(chunk/4096)*4096)
			}
			return o
		}, 200, 8, 0, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeCache()
			f.batch = tc.batch
			e := New(f, Options{Slots: tc.slots})
			defer e.Close(ctx)
			r := e.Open("v", m)
			defer r.Close()
			if tc.read == 0 {
				tc.read = 128 << 10
			}
			buf := make([]byte, tc.read)
			for _, off := range tc.offsets() {
				if err := r.ReadAt(ctx, buf[:min(int64(len(buf)), m.Size-off)], off); err != nil {
					t.Fatal(err)
				}
				e.loads.Wait() // the loads it started are done before the next read
			}
			if f.readFirst > tc.maxFirst || f.loaded > tc.maxAhead {
				t.Fatalf("%d chunks read before being loaded ahead (at most %d), %d loaded ahead (at most %d)",
					f.readFirst, tc.maxFirst, f.loaded, tc.maxAhead)
			}
			st := r.Stats()
			if want := int64(f.loaded+f.readFirst) * chunk; st.FetchedBytes != want {
				t.Fatalf("the reader's fetched bytes %d, want %d (%d chunks loaded ahead, %d read first)",
					st.FetchedBytes, want, f.loaded, f.readFirst)
			}
			if es := e.Stats(); es.ReadaheadChunks != int64(f.loaded) || es.FetchedBytes != int64(f.loaded)*chunk {
				t.Fatalf("engine stats %+v, want %d chunks loaded ahead", es, f.loaded)
			}
		})
	}
}
