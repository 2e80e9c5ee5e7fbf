package volume

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/blockmap"
	"github.com/slacker-dev/slacker/internal/store"
	"github.com/slacker-dev/slacker/internal/store/faultstore"
)

// TestSnapshotHooks: Prepare sees every new chunk before the store is asked about
// any; BeforeMap can make the snapshot check its chunks again, and a chunk removed
// from the store meanwhile is uploaded again before the map names it.
func TestSnapshotHooks(t *testing.T) {
	ctx := context.Background()
	s := newStack(t, 64<<20)
	v := s.clone(t, "a", "", 16<<20)
	data := make([]byte, 3<<20)
	for i := range data {
		data[i] = byte(i / 4096 * 7)
	}
	copy(data[1<<20:], make([]byte, 64<<10)) // a run of zeros: a hole, no chunk
	if _, err := v.WriteAt(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
	fs := faultstore.New(s.st)
	var prepared []blockmap.Chunk
	var victim, mapID digest.Digest
	passes := 0
	res, err := v.Snapshot(ctx, fs, SnapshotOptions{ChunkSize: 256 << 10,
		Prepare: func(ctx context.Context, cs []blockmap.Chunk) error {
			if n := fs.Calls(faultstore.All); n != 0 {
				t.Errorf("Prepare after %d store calls", n)
			}
			prepared = cs
			return nil
		},
		BeforeMap: func(ctx context.Context, id digest.Digest) (bool, error) {
			if mapID != "" && id != mapID {
				t.Errorf("BeforeMap given map %s, then %s", mapID, id)
			}
			mapID = id
			passes++
			if passes == 1 {
				// A collection ran: it took one of the chunks.
				victim = prepared[len(prepared)/2].Digest
				if err := s.st.Delete(ctx, victim); err != nil {
					t.Fatal(err)
				}
				return true, nil
			}
			return false, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if passes != 2 || res.ID != mapID {
		t.Fatalf("BeforeMap called %d times with map %s, want 2 with %s", passes, mapID, res.ID)
	}
	named := map[digest.Digest]bool{}
	for _, c := range res.Map.Chunks {
		named[c.Digest] = true
		if ok, _ := store.Exists(ctx, s.st, c.Digest); !ok {
			t.Fatalf("the map names chunk %s, which is not in the store", c.Digest)
		}
	}
	if len(named) != len(prepared) {
		t.Fatalf("Prepare saw %d chunks, the map names %d", len(prepared), len(named))
	}
	for _, c := range prepared {
		if !named[c.Digest] {
			t.Fatalf("Prepare saw %s, which the map does not name", c.Digest)
		}
	}
	c := s.clone(t, "b", res.ID, 16<<20)
	got := make([]byte, len(data))
	if _, err := c.ReadAt(ctx, got, 0); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("clone of the snapshot: %v", err)
	}

	// An error from a hook stops the snapshot and writes no map.
	before := 0
	s.st.List(ctx, func(store.Info) error { before++; return nil })
	stop := errors.New("lease refused")
	if _, err := v.Snapshot(ctx, s.st, SnapshotOptions{Prepare: func(context.Context, []blockmap.Chunk) error { return stop }}); !errors.Is(err, stop) {
		t.Fatalf("snapshot with a failing Prepare: %v", err)
	}
	if _, err := v.Snapshot(ctx, s.st, SnapshotOptions{BeforeMap: func(context.Context, digest.Digest) (bool, error) { return false, stop }}); !errors.Is(err, stop) {
		t.Fatalf("snapshot with a failing BeforeMap: %v", err)
	}
	if _, err := v.Snapshot(ctx, s.st, SnapshotOptions{BeforeMap: func(context.Context, digest.Digest) (bool, error) { return true, nil }}); err == nil {
		t.Fatal("a snapshot asked to check again forever succeeded")
	}
	after := 0
	s.st.List(ctx, func(store.Info) error { after++; return nil })
	if after != before {
		t.Fatalf("failed snapshots stored %d objects", after-before)
	}
}
