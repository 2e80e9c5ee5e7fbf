package fetch

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/blockmap"
	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/store"
	"github.com/slacker-dev/slacker/internal/store/local"
)

// batcher adds store.BatchGetter to a store; it drops the objects in drop from
// its answers (the fetcher must fetch those alone) and counts calls.
type batcher struct {
	store.Store
	drop    map[digest.Digest]bool
	batches atomic.Int64
	gets    atomic.Int64
}

func (b *batcher) GetBatch(ctx context.Context, ds []digest.Digest, fn func(digest.Digest, []byte, error)) error {
	b.batches.Add(1)
	for _, d := range ds {
		if b.drop[d] {
			fn(d, nil, errdefs.ErrUnavailable)
			continue
		}
		data, err := store.ReadAll(ctx, b.Store, d)
		fn(d, data, err)
	}
	return nil
}

func (b *batcher) Get(ctx context.Context, d digest.Digest) (io.ReadCloser, error) {
	b.gets.Add(1)
	return b.Store.Get(ctx, d)
}

func chunks(t *testing.T, st store.Store, n int) ([]blockmap.Chunk, map[digest.Digest][]byte) {
	t.Helper()
	var cs []blockmap.Chunk
	data := map[digest.Digest][]byte{}
	for i := 0; i < n; i++ {
		b := make([]byte, 1000+i)
		rand.Read(b)
		d, err := store.PutBytes(context.Background(), st, b)
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, blockmap.Chunk{Digest: d, Size: int64(len(b))})
		data[d] = b
	}
	return cs, data
}

func TestFetchMany(t *testing.T) {
	st, err := local.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cs, data := chunks(t, st, 10)
	absent := blockmap.Chunk{Digest: digest.FromString("absent"), Size: 5}
	wrongSize := blockmap.Chunk{Digest: cs[2].Digest, Size: cs[2].Size + 1}
	for _, tc := range []struct {
		name        string
		st          store.Store
		wantBatches int64
		wantGets    int64
	}{
		{"batch", &batcher{Store: st, drop: map[digest.Digest]bool{cs[1].Digest: true}}, 1, 1 + 1}, // the dropped one and the absent one alone
		{"plain", st, 0, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := New(tc.st, Options{MaxWait: 200 * time.Millisecond, Backoff: time.Millisecond})
			req := append(append([]blockmap.Chunk{}, cs...), cs[0], absent)
			got := map[digest.Digest][]byte{}
			var mu sync.Mutex
			calls := 0
			f.FetchMany(context.Background(), req, func(c blockmap.Chunk, b []byte, err error) {
				mu.Lock()
				defer mu.Unlock()
				calls++
				if c.Digest == absent.Digest {
					if !errors.Is(err, errdefs.ErrNotFound) {
						t.Errorf("absent chunk: %v", err)
					}
					return
				}
				if err != nil {
					t.Errorf("%s: %v", c.Digest, err)
				}
				got[c.Digest] = b
			})
			if calls != 11 {
				t.Fatalf("fn called %d times, want 11 (one per distinct chunk)", calls)
			}
			for d, b := range data {
				if !bytes.Equal(got[d], b) {
					t.Fatalf("%s: wrong bytes", d)
				}
			}
			if bt, ok := tc.st.(*batcher); ok {
				if bt.batches.Load() != tc.wantBatches || bt.gets.Load() != tc.wantGets || f.Batches() != 1 {
					t.Fatalf("%d batches, %d lone gets; want %d and %d", bt.batches.Load(), bt.gets.Load(), tc.wantBatches, tc.wantGets)
				}
			}
			// A size the map disagrees with is never delivered as good.
			f.FetchMany(context.Background(), []blockmap.Chunk{wrongSize, cs[3]}, func(c blockmap.Chunk, b []byte, err error) {
				if c.Digest == wrongSize.Digest && err == nil {
					t.Errorf("a chunk of the wrong size was delivered")
				}
			})
		})
	}
}
