package store_test

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/store"
)

// bodyStore is a Store whose Get returns a body of b that is already in memory
// (as a compressed object's, decoded, is); the other methods are not called.
type bodyStore struct {
	store.Store
	b []byte
}

func (s bodyStore) Get(context.Context, digest.Digest) (io.ReadCloser, error) {
	return store.NewInMemory(s.b), nil
}

func TestReadAllSizedTakesInMemoryBodies(t *testing.T) {
	ctx := context.Background()
	b := textChunk()
	d := digest.FromBytes(b)
	got, err := store.ReadAllSized(ctx, bodyStore{b: b}, d, int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(b) || &got[0] != &b[0] {
		t.Fatalf("ReadAllSized copied an in-memory body (or cut it): %d bytes", len(got))
	}
	if got, err := store.ReadAll(ctx, bodyStore{b: b}, d); err != nil || len(got) != len(b) {
		t.Fatalf("ReadAll: %d bytes, %v", len(got), err)
	}
	for _, size := range []int64{int64(len(b)) - 1, int64(len(b)) + 1} {
		if _, err := store.ReadAllSized(ctx, bodyStore{b: b}, d, size); !errors.Is(err, errdefs.ErrCorrupt) {
			t.Errorf("an in-memory body of %d bytes read as %d: %v, want ErrCorrupt", len(b), size, err)
		}
	}
}

// ReadBuffer hands out buffers of exactly the length asked for, pooled or not,
// before and after buffers are given back. (Whether sync.Pool keeps a buffer is
// its own business, so reuse itself is not asserted.)
func TestReadBufferLengths(t *testing.T) {
	for _, n := range []int{0, 1, 4096, 300 << 10, 8 << 20, 9 << 20} {
		b := store.ReadBuffer(n)
		if len(b) != n {
			t.Fatalf("ReadBuffer(%d) has %d bytes", n, len(b))
		}
		store.ReleaseBuffer(b)
	}
	// A smaller request after a release may get the larger buffer back, cut.
	b := store.ReadBuffer(64 << 10)
	store.ReleaseBuffer(b)
	if c := store.ReadBuffer(32 << 10); len(c) != 32<<10 {
		t.Fatalf("ReadBuffer(32 KiB) after a release has %d bytes", len(c))
	}
}
