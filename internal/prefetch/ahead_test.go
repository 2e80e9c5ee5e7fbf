package prefetch

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/store"
	"github.com/slacker-dev/slacker/internal/trace"
)

// countingRefs counts GetRef calls on a store's records and fails the first
// failFirst of them.
type countingRefs struct {
	store.Refs
	mu        sync.Mutex
	gets      int
	failFirst int
}

func (c *countingRefs) GetRef(ctx context.Context, name string) ([]byte, error) {
	c.mu.Lock()
	c.gets++
	fail := c.gets <= c.failFirst
	c.mu.Unlock()
	if fail {
		return nil, errors.New("store away")
	}
	return c.Refs.GetRef(ctx, name)
}

func (c *countingRefs) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gets
}

// waitReplayed waits until e has replayed n traces.
func waitReplayed(t *testing.T, e *Engine, n int64) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); e.Stats().TracesReplayed < n; time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("engine stats %+v: want %d traces replayed", e.Stats(), n)
		}
	}
}

// A trace fetched ahead (a pull named the snapshot) is what the next start
// replays, without asking the store again; it serves one start, and the next asks
// the store. A fetch ahead that failed is not taken for the store's answer: the
// start asks again and replays.
func TestFetchTraceAhead(t *testing.T) {
	ctx := context.Background()
	const chunk = 64 << 10
	m := chunkedMap(8, chunk)
	snapshot := digest.FromString("image")
	tr := trace.New(snapshot, time.Second, m.Chunks[:3])
	b, err := trace.Encode(tr)
	if err != nil {
		t.Fatal(err)
	}
	st := traceStore(t)
	if err := st.PutRef(ctx, trace.RefName(snapshot), b); err != nil {
		t.Fatal(err)
	}

	refs := &countingRefs{Refs: st}
	e := New(newFakeCache(), Options{Traces: refs})
	defer e.Close(ctx)
	e.FetchTraceAhead(snapshot)
	e.FetchTraceAhead(snapshot) // one fetch under way already: nothing more
	r1 := e.Open("first", m)
	defer r1.Close()
	r1.BeginStartup(snapshot, nil, nil)
	waitReplayed(t, e, 1)
	if n := refs.count(); n != 1 {
		t.Fatalf("the store was asked %d times for the trace, want once (the fetch ahead)", n)
	}
	r2 := e.Open("second", m)
	defer r2.Close()
	r2.BeginStartup(snapshot, nil, nil)
	waitReplayed(t, e, 2)
	if n := refs.count(); n != 2 {
		t.Fatalf("the store was asked %d times, want twice: a trace fetched ahead serves one start", n)
	}

	failing := &countingRefs{Refs: st, failFirst: 1}
	e2 := New(newFakeCache(), Options{Traces: failing})
	defer e2.Close(ctx)
	e2.FetchTraceAhead(snapshot)
	r3 := e2.Open("third", m)
	defer r3.Close()
	r3.BeginStartup(snapshot, nil, nil)
	waitReplayed(t, e2, 1)
	if n := failing.count(); n != 2 {
		t.Fatalf("the store was asked %d times, want twice: the failed fetch ahead, then the start's own", n)
	}

	// An engine that keeps no traces fetches nothing ahead.
	e3 := New(newFakeCache(), Options{})
	e3.FetchTraceAhead(snapshot)
	e3.mu.Lock()
	n := len(e3.ahead)
	e3.mu.Unlock()
	if n != 0 {
		t.Fatalf("an engine without traces holds %d fetches ahead", n)
	}
	e3.Close(ctx)
}
