package fetch

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/blockmap"
	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/store"
	"github.com/slacker-dev/slacker/internal/store/faultstore"
	"github.com/slacker-dev/slacker/internal/store/local"
)

// flaky fails the first n Gets with ErrUnavailable, or corrupts them.
type flaky struct {
	store.Store
	fails   atomic.Int64
	corrupt bool
	gets    atomic.Int64
}

func (f *flaky) Get(ctx context.Context, d digest.Digest) (io.ReadCloser, error) {
	f.gets.Add(1)
	if f.fails.Add(-1) >= 0 {
		if f.corrupt {
			return io.NopCloser(store.VerifyingReader(bytes.NewReader([]byte("garbage")), d, -1)), nil
		}
		return nil, errdefs.ErrUnavailable
	}
	return f.Store.Get(ctx, d)
}

func setup(t *testing.T, fails int64, corrupt bool) (*flaky, blockmap.Chunk) {
	st, err := local.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("chunk"), 1000)
	d, err := store.PutBytes(context.Background(), st, data)
	if err != nil {
		t.Fatal(err)
	}
	f := &flaky{Store: st, corrupt: corrupt}
	f.fails.Store(fails)
	return f, blockmap.Chunk{Digest: d, Size: int64(len(data))}
}

func TestRetriesTransientFailures(t *testing.T) {
	for _, corrupt := range []bool{false, true} {
		st, c := setup(t, 3, corrupt)
		f := New(st, Options{Backoff: time.Millisecond})
		b, err := f.Fetch(context.Background(), c)
		if err != nil || int64(len(b)) != c.Size {
			t.Fatalf("corrupt=%v: %v", corrupt, err)
		}
		if st.gets.Load() != 4 || f.Stats().Retries != 3 {
			t.Fatalf("corrupt=%v: %d gets, %d retries; want 4 and 3", corrupt, st.gets.Load(), f.Stats().Retries)
		}
	}
}

func TestGivesUpAfterMaxWait(t *testing.T) {
	st, c := setup(t, 1<<40, false)
	f := New(st, Options{Backoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond, MaxWait: 100 * time.Millisecond})
	start := time.Now()
	_, err := f.Fetch(context.Background(), c)
	if !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("got %v, want ErrUnavailable", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("gave up after %v", took)
	}
	if f.Stats().Failures != 1 {
		t.Fatalf("failures %d", f.Stats().Failures)
	}
}

func TestMissingChunkIsNotRetried(t *testing.T) {
	st, _ := setup(t, 0, false)
	f := New(st, Options{})
	_, err := f.Fetch(context.Background(), blockmap.Chunk{Digest: digest.FromString("absent"), Size: 4096})
	if !errors.Is(err, errdefs.ErrNotFound) || st.gets.Load() != 1 {
		t.Fatalf("got %v after %d gets", err, st.gets.Load())
	}
}

func TestWrongSizeIsCorrupt(t *testing.T) {
	st, c := setup(t, 0, false)
	f := New(st, Options{MaxWait: 50 * time.Millisecond, Backoff: time.Millisecond})
	c.Size++
	if _, err := f.Fetch(context.Background(), c); err == nil {
		t.Fatal("a chunk of the wrong size was accepted")
	}
}

// An object damaged in the store stays damaged: a fetch that keeps getting bytes
// that do not match gives up after maxCorruptAttempts, with ErrCorrupt, long
// before MaxWait (it waited out MaxWait, 60 s by default, before).
func TestCorruptGivesUpAfterFewAttempts(t *testing.T) {
	st, c := setup(t, 1<<40, true)
	f := New(st, Options{Backoff: time.Millisecond, MaxWait: time.Minute})
	start := time.Now()
	_, err := f.Fetch(context.Background(), c)
	if !errors.Is(err, errdefs.ErrCorrupt) || errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("got %v, want ErrCorrupt", err)
	}
	if st.gets.Load() != maxCorruptAttempts || time.Since(start) > 10*time.Second {
		t.Fatalf("%d gets in %v, want %d", st.gets.Load(), time.Since(start), maxCorruptAttempts)
	}
}

// A caller that gives up (an interrupted read) gets context.Canceled, which FUSE
// answers EINTR, not a store outage (EIO).
func TestCancelledFetchIsCancelled(t *testing.T) {
	st, c := setup(t, 1<<40, false)
	f := New(st, Options{Backoff: 5 * time.Millisecond, MaxWait: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(30*time.Millisecond, cancel)
	_, err := f.Fetch(ctx, c)
	if !errors.Is(err, context.Canceled) || errdefs.KindOf(err) != errdefs.Canceled {
		t.Fatalf("got %v (kind %v), want context.Canceled", err, errdefs.KindOf(err))
	}
}

// RoundTrip is the shortest of the last reads: 0 before any, about a store's
// delay once it answers that slowly, and down again once it answers at once
// (the slow reads age out of the last 16).
func TestRoundTrip(t *testing.T) {
	ctx := context.Background()
	st, c := setup(t, 0, false)
	fs := faultstore.New(st)
	f := New(fs, Options{})
	if rt := f.RoundTrip(); rt != 0 {
		t.Fatalf("round trip %v before any read, want 0", rt)
	}
	remove := fs.Inject(faultstore.Fault{Ops: faultstore.OpGet, Delay: 20 * time.Millisecond})
	for range 3 {
		if _, err := f.Fetch(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	if rt := f.RoundTrip(); rt < 20*time.Millisecond {
		t.Fatalf("round trip %v from reads delayed 20ms", rt)
	}
	remove()
	for range roundTripReads {
		if _, err := f.Fetch(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	if rt := f.RoundTrip(); rt >= 20*time.Millisecond {
		t.Fatalf("round trip %v after %d prompt reads", rt, roundTripReads)
	}
}
