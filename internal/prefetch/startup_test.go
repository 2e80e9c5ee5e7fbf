package prefetch

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/blockmap"
	"github.com/slacker-dev/slacker/internal/cache"
	"github.com/slacker-dev/slacker/internal/store/local"
	"github.com/slacker-dev/slacker/internal/trace"
)

// orderedCache is a fakeCache that also keeps the order in which chunks were
// loaded ahead.
type orderedCache struct {
	*fakeCache
	order []digest.Digest
}

func (o *orderedCache) Load(ctx context.Context, cs []blockmap.Chunk, fn func(blockmap.Chunk, cache.Origin, error)) {
	o.fakeCache.Load(ctx, cs, func(c blockmap.Chunk, or cache.Origin, err error) {
		if or == cache.FromStore {
			o.mu.Lock()
			o.order = append(o.order, c.Digest)
			o.mu.Unlock()
		}
		fn(c, or, err)
	})
}

// chunkedMap is an image of n distinct chunks of size bytes each, in order.
// traceStore is a local store in the test's directory, where traces are kept.
func traceStore(t *testing.T) *local.Store {
	t.Helper()
	st, err := local.Open(filepath.Join(t.TempDir(), "store"))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func chunkedMap(n int, size int64) *blockmap.Map {
	m := &blockmap.Map{Size: int64(n) * size}
	for i := range n {
		m.Chunks = append(m.Chunks, blockmap.Chunk{Digest: digest.FromString(fmt.Sprint(i)), Size: size})
		m.Extents = append(m.Extents, blockmap.Extent{Offset: int64(i) * size, Length: size, Chunk: i})
	}
	return m
}

// waitRecording waits until r's trace lookup found none and its reads are being
// recorded.
func waitRecording(t *testing.T, r *Reader) {
	t.Helper()
	r.e.mu.Lock()
	s := r.startup
	r.e.mu.Unlock()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		s.mu.Lock()
		missing := s.missing
		s.mu.Unlock()
		if missing {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the lookup of a missing trace never finished")
		}
	}
}

// A container root on a store without a trace records the chunks it reads, in
// first-read order, and writes them as its snapshot's trace when it goes. The
// next container root of that snapshot, on a cold node, replays it: the chunks
// are loaded ahead in the trace's order, within the replay budget, the bytes are
// its reader's, and readahead does not fetch past them meanwhile. A reader that
// is not a container root records nothing.
func TestStartupRecordThenReplay(t *testing.T) {
	ctx := context.Background()
	st := traceStore(t)
	const chunk = 64 << 10
	m := chunkedMap(64, chunk)
	snapshot := digest.FromString("image")
	read := []int{9, 3, 40, 3, 41, 42, 7} // as a start-up would: scattered, with a repeat

	e1 := New(newFakeCache(), Options{Traces: st})
	plain := e1.Open("plain", m)
	if err := plain.ReadAt(ctx, make([]byte, 1), 0); err != nil {
		t.Fatal(err)
	}
	plain.Close()
	r1 := e1.Open("first", m)
	r1.BeginStartup(snapshot, nil, nil)
	for _, i := range read {
		if err := r1.ReadAt(ctx, make([]byte, 100), int64(i)*chunk+10); err != nil {
			t.Fatal(err)
		}
	}
	waitRecording(t, r1)
	r1.Close() // the container is gone: its trace is written
	e1.Close(ctx)
	if e1.Stats().TracesRecorded != 1 {
		t.Fatalf("engine stats %+v: want one trace recorded", e1.Stats())
	}
	b, err := st.GetRef(ctx, trace.RefName(snapshot))
	if err != nil {
		t.Fatal(err)
	}
	tr, err := trace.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	var want, got []digest.Digest
	for _, i := range []int{9, 3, 40, 41, 42, 7} {
		want = append(want, m.Chunks[i].Digest)
	}
	for _, c := range tr.Chunks {
		got = append(got, c.Digest)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("recorded %v, want the chunks read in first-read order %v", got, want)
	}
	// And the blocks read (version 2): each read touched one block, chunk i's first.
	var wantRuns [][2]int64
	for _, i := range []int64{3, 7, 9, 40, 41, 42} {
		wantRuns = append(wantRuns, [2]int64{i * chunk / BlockSize, i*chunk/BlockSize + 1})
	}
	if tr.Version != trace.Version || !slices.Equal(tr.Runs, wantRuns) {
		t.Fatalf("trace version %d, runs %v; want %d, %v", tr.Version, tr.Runs, trace.Version, wantRuns)
	}

	// A cold node replays it, within a budget of five chunks.
	f2 := &orderedCache{fakeCache: newFakeCache()}
	f2.batch = true // one load per group of the trace: the order is kept
	e2 := New(f2, Options{Traces: st, ReplayBudget: 5 * chunk})
	defer e2.Close(ctx)
	r2 := e2.Open("second", m)
	defer r2.Close()
	r2.BeginStartup(snapshot, nil, nil)
	for deadline := time.Now().Add(5 * time.Second); e2.Stats().ReplayedChunks < 5; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("replayed %+v, want 5 chunks", e2.Stats())
		}
	}
	e2.loads.Wait()
	f2.mu.Lock()
	order := slices.Clone(f2.order)
	f2.mu.Unlock()
	if !slices.Equal(order, want[:5]) {
		t.Fatalf("loaded %v, want the trace's first five chunks in order %v", order, want[:5])
	}
	if st := r2.Stats(); st.FetchedBytes != 5*chunk {
		t.Fatalf("the replaying reader's fetched bytes %d, want %d", st.FetchedBytes, 5*chunk)
	}
	// Readahead is paused during the replay: a sequential reader loads nothing ahead.
	for off := int64(0); off < 8*chunk; off += chunk / 2 {
		if err := r2.ReadAt(ctx, make([]byte, chunk/2), off); err != nil {
			t.Fatal(err)
		}
	}
	e2.loads.Wait()
	if es := e2.Stats(); es.ReadaheadChunks != 0 || es.TracesReplayed != 1 {
		t.Fatalf("engine stats %+v: want no readahead while the trace replays, one trace replayed", es)
	}
}

// A recording still open when the engine closes (slackerd stops while the volume
// lives on, as a containerd container's does until containerd collects its
// snapshot) is written, not lost.
func TestCloseWritesOpenRecording(t *testing.T) {
	ctx := context.Background()
	st := traceStore(t)
	const chunk = 64 << 10
	m := chunkedMap(8, chunk)
	snapshot := digest.FromString("image")
	e := New(newFakeCache(), Options{Traces: st, StartupWindow: time.Hour})
	r := e.Open("root", m)
	r.BeginStartup(snapshot, nil, nil)
	waitRecording(t, r)
	if err := r.ReadAt(ctx, make([]byte, 100), 3*chunk); err != nil {
		t.Fatal(err)
	}
	e.Close(ctx) // the reader stays open: its volume outlives the engine
	b, err := st.GetRef(ctx, trace.RefName(snapshot))
	if err != nil {
		t.Fatalf("no trace after Close: %v", err)
	}
	tr, err := trace.Decode(b)
	if err != nil || len(tr.Chunks) != 1 || tr.Chunks[0].Digest != m.Chunks[3].Digest {
		t.Fatalf("trace %+v, %v", tr, err)
	}
	r.Close()
}

// A version 1 trace (no block runs, from an older slackerd) is replayed, and the
// start that replays it records a version 2 trace in its place.
func TestStartupUpgradesOldTrace(t *testing.T) {
	ctx := context.Background()
	st := traceStore(t)
	const chunk = 64 << 10
	m := chunkedMap(8, chunk)
	snapshot := digest.FromString("image")
	old := &trace.Trace{Version: 1, Snapshot: snapshot, Created: time.Now().UTC(),
		Chunks: []trace.Chunk{{Digest: m.Chunks[5].Digest, Size: chunk}}}
	b, err := trace.Encode(old)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.PutRef(ctx, trace.RefName(snapshot), b); err != nil {
		t.Fatal(err)
	}
	e := New(newFakeCache(), Options{Traces: st})
	r := e.Open("root", m)
	r.BeginStartup(snapshot, nil, nil)
	for deadline := time.Now().Add(5 * time.Second); e.Stats().ReplayedChunks < 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the old trace was not replayed: %+v", e.Stats())
		}
	}
	if err := r.ReadAt(ctx, make([]byte, 100), 2*chunk); err != nil {
		t.Fatal(err)
	}
	r.Close()
	e.Close(ctx)
	b, err = st.GetRef(ctx, trace.RefName(snapshot))
	if err != nil {
		t.Fatal(err)
	}
	nt, err := trace.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if nt.Version != trace.Version || len(nt.Runs) != 1 || nt.Runs[0] != [2]int64{2 * chunk / BlockSize, 2*chunk/BlockSize + 1} {
		t.Fatalf("trace after the upgrade: %+v", nt)
	}
}

// EndStartup, for a shared image root whose last container is gone while the root
// stays mounted: the trace is written at once, holding what the start read, and
// the reader goes on serving reads that are no longer recorded.
func TestEndStartupWritesTheTraceAndKeepsReading(t *testing.T) {
	ctx := context.Background()
	st := traceStore(t)
	const chunk = 64 << 10
	m := chunkedMap(8, chunk)
	snapshot := digest.FromString("image")
	e := New(newFakeCache(), Options{Traces: st, StartupWindow: time.Hour})
	defer e.Close(ctx)
	r := e.Open("image-root", m)
	defer r.Close()
	r.BeginStartup(snapshot, nil, nil)
	for _, i := range []int{5, 2} {
		if err := r.ReadAt(ctx, make([]byte, 100), int64(i)*chunk); err != nil {
			t.Fatal(err)
		}
	}
	r.EndStartup() // the window has most of an hour to go
	if err := r.ReadAt(ctx, make([]byte, 100), 7*chunk); err != nil {
		t.Fatalf("a read after EndStartup: %v", err)
	}
	var b []byte
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if b, err = st.GetRef(ctx, trace.RefName(snapshot)); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no trace written after EndStartup: %v", err)
		}
	}
	tr, err := trace.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	var got []digest.Digest
	for _, c := range tr.Chunks {
		got = append(got, c.Digest)
	}
	if want := []digest.Digest{m.Chunks[5].Digest, m.Chunks[2].Digest}; !slices.Equal(got, want) {
		t.Fatalf("trace %v, want the start's reads %v and not the later one", got, want)
	}
	r.EndStartup() // a second end, and the Close to come, write nothing more
	if es := e.Stats(); es.TracesRecorded != 1 {
		t.Fatalf("engine stats %+v: want one trace recorded", es)
	}
}

// slowCache is a fakeCache whose loads take a while, counting how many run at once
// and the order in which they start.
type slowCache struct {
	*fakeCache
	inflight, most int
	started        []digest.Digest
}

func (s *slowCache) Load(ctx context.Context, cs []blockmap.Chunk, fn func(blockmap.Chunk, cache.Origin, error)) {
	s.mu.Lock()
	s.inflight++
	s.most = max(s.most, s.inflight)
	for _, c := range cs {
		s.started = append(s.started, c.Digest)
	}
	s.mu.Unlock()
	time.Sleep(2 * time.Millisecond)
	s.fakeCache.Load(ctx, cs, fn)
	s.mu.Lock()
	s.inflight--
	s.mu.Unlock()
}

// A replay keeps at most ReplayParallel loads in flight, started in the trace's
// order (each at most ReplayParallel places from its own), so that the chunks a
// start reads first arrive first; all of the trace is loaded.
func TestReplayKeepsAWindowInOrder(t *testing.T) {
	ctx := context.Background()
	st := traceStore(t)
	const chunk, n, window = 64 << 10, 40, 4
	m := chunkedMap(n, chunk)
	snapshot := digest.FromString("image")
	order := make([]blockmap.Chunk, n) // a start's order: not the volume's
	for i := range n {
		order[i] = m.Chunks[(i*7)%n]
	}
	b, err := trace.Encode(trace.New(snapshot, time.Minute, order))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.PutRef(ctx, trace.RefName(snapshot), b); err != nil {
		t.Fatal(err)
	}
	sc := &slowCache{fakeCache: newFakeCache()}
	e := New(sc, Options{Traces: st, ReplayParallel: window})
	defer e.Close(ctx)
	r := e.Open("root", m)
	defer r.Close()
	r.BeginStartup(snapshot, nil, nil)
	for deadline := time.Now().Add(10 * time.Second); e.Stats().ReplayedChunks < n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("replayed %+v, want %d chunks", e.Stats(), n)
		}
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.most > window || sc.most < 2 {
		t.Fatalf("%d loads in flight at most; want between 2 and %d", sc.most, window)
	}
	pos := map[digest.Digest]int{}
	for i, c := range order {
		pos[c.Digest] = i
	}
	for i, d := range sc.started {
		if p := pos[d]; p-i >= window || i-p >= window {
			t.Fatalf("the trace's chunk %d started %dth; want within %d places", p, i, window)
		}
	}
}

// A start with no trace to replay, on a store far enough away, loads the chunks
// of the FirstStartAhead bytes after each of its reads (not the read's own),
// each once; on a nearer store, or once a trace exists and is replayed, it loads
// nothing near its reads.
func TestFirstStartLoadsNearItsReads(t *testing.T) {
	ctx := context.Background()
	const chunk = 64 << 10
	m := chunkedMap(64, chunk)
	snapshot := digest.FromString("image")
	far := func() time.Duration { return 20 * time.Millisecond }
	near := func() time.Duration { return time.Millisecond }
	read := func(r *Reader, i int) {
		t.Helper()
		if err := r.ReadAt(ctx, make([]byte, 100), int64(i)*chunk+10); err != nil {
			t.Fatal(err)
		}
		r.e.loads.Wait()
	}
	loaded := func(f *fakeCache, is ...int) {
		t.Helper()
		f.mu.Lock()
		defer f.mu.Unlock()
		for i, c := range m.Chunks {
			if want := slices.Contains(is, i); f.requested[c.Digest] != want {
				t.Errorf("chunk %d requested %v, want %v", i, f.requested[c.Digest], want)
			}
		}
	}

	// Far: after a read of chunk 10, chunks 11 and 12 are loaded; after one of
	// 11, 13 (12 was); a read elsewhere, 41 and 42.
	st := traceStore(t)
	f1 := newFakeCache()
	e1 := New(f1, Options{Traces: st, FirstStartAhead: 2 * chunk, StoreRoundTrip: far})
	r1 := e1.Open("first", m)
	r1.BeginStartup(snapshot, nil, nil)
	waitRecording(t, r1)
	read(r1, 10)
	loaded(f1, 10, 11, 12)
	read(r1, 11)
	read(r1, 40)
	loaded(f1, 10, 11, 12, 13, 40, 41, 42)
	if got := e1.Stats().FirstStartChunks; got != 5 {
		t.Errorf("first-start chunks %d, want 5", got)
	}
	if st := r1.Stats(); st.FetchedBytes != 7*chunk {
		t.Errorf("the reader's fetched bytes %d, want its 2 reads' that missed (11 had been loaded) and the 5 loaded near them, %d", st.FetchedBytes, 7*chunk)
	}
	r1.Close() // the trace is written
	e1.Close(ctx)

	// Near: nothing but what is read.
	f2 := newFakeCache()
	e2 := New(f2, Options{Traces: traceStore(t), FirstStartAhead: 2 * chunk, StoreRoundTrip: near})
	defer e2.Close(ctx)
	r2 := e2.Open("near", m)
	defer r2.Close()
	r2.BeginStartup(snapshot, nil, nil)
	waitRecording(t, r2)
	read(r2, 10)
	read(r2, 40)
	loaded(f2, 10, 40)

	// Far, with the trace of the first start: it is replayed, and reads load
	// nothing near them.
	f3 := newFakeCache()
	e3 := New(f3, Options{Traces: st, FirstStartAhead: 2 * chunk, StoreRoundTrip: far})
	defer e3.Close(ctx)
	r3 := e3.Open("traced", m)
	defer r3.Close()
	r3.BeginStartup(snapshot, nil, nil)
	waitReplayed(t, e3, 1)
	read(r3, 20)
	if es := e3.Stats(); es.FirstStartChunks != 0 {
		t.Errorf("a start replaying a trace loaded %d chunks near its reads", es.FirstStartChunks)
	}
}

// A start with no trace to replay loads the ranges FirstStartRanges names (read
// from the base through the cache, not as the volume's reads), once, from a far
// store; from a near one it reads them and loads nothing; a start that replays
// a trace does neither.
func TestFirstStartLoadsItsRanges(t *testing.T) {
	ctx := context.Background()
	const chunk = 64 << 10
	m := chunkedMap(64, chunk)
	snapshot := digest.FromString("image")
	var calls atomic.Int64
	ranges := func(base io.ReaderAt, size int64) ([][2]int64, error) {
		calls.Add(1)
		if size != m.Size {
			t.Errorf("size %d, want %d", size, m.Size)
		}
		sb := make([]byte, 2048)
		if _, err := base.ReadAt(sb, 1024); err != nil { // a superblock, say
			return nil, err
		}
		if _, err := base.ReadAt(make([]byte, 10), m.Size-5); err != io.EOF {
			t.Errorf("a read past the base's end: %v, want EOF", err)
		}
		// Chunks 5-6 and 30, and a range past the end of the base.
		return [][2]int64{{5 * chunk, 7*chunk - 100}, {30*chunk + 10, 30*chunk + 20}, {m.Size, m.Size + chunk}}, nil
	}
	st := traceStore(t)
	f1 := newFakeCache()
	e1 := New(f1, Options{Traces: st, FirstStartRanges: ranges, StoreRoundTrip: func() time.Duration { return 20 * time.Millisecond }})
	r1 := e1.Open("first", m)
	r1.BeginStartup(snapshot, nil, nil)
	waitRecording(t, r1)
	for deadline := time.Now().Add(5 * time.Second); e1.Stats().FirstStartChunks < 3; time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("engine stats %+v: want 3 first-start chunks", e1.Stats())
		}
	}
	f1.mu.Lock()
	for i, c := range m.Chunks {
		want := i == 5 || i == 6 || i == 30 || i == 0 || i == 63 // loaded, or read for the ranges
		if f1.requested[c.Digest] != want {
			t.Errorf("chunk %d fetched %v, want %v", i, f1.requested[c.Digest], want)
		}
	}
	if f1.loaded != 3 {
		t.Errorf("%d chunks loaded, want 3", f1.loaded)
	}
	f1.mu.Unlock()
	if rs := r1.Stats(); rs.BaseReadBytes != 0 || len(rs.BaseReadRuns) != 0 {
		t.Errorf("the ranges' reads counted as the volume's: %+v", rs)
	}
	if err := r1.ReadAt(ctx, make([]byte, 100), 40*chunk); err != nil {
		t.Fatal(err)
	}
	r1.Close() // the trace is written: chunk 40, not what the ranges read
	e1.Close(ctx)
	b, err := st.GetRef(ctx, trace.RefName(snapshot))
	if err != nil {
		t.Fatal(err)
	}
	tr, err := trace.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Chunks) != 1 || tr.Chunks[0].Digest != m.Chunks[40].Digest {
		t.Errorf("trace chunks %v, want chunk 40's alone", tr.Chunks)
	}

	// A first start near its store: the ranges are asked for, nothing is loaded.
	fn := newFakeCache()
	en := New(fn, Options{Traces: traceStore(t), FirstStartRanges: ranges, StoreRoundTrip: func() time.Duration { return time.Millisecond }})
	rn := en.Open("near", m)
	rn.BeginStartup(snapshot, nil, nil)
	waitRecording(t, rn)
	en.bg.Wait()
	if calls.Load() != 2 || en.Stats().FirstStartChunks != 0 {
		t.Errorf("near store: ranges asked %d times in all, %d chunks loaded, want twice and none", calls.Load(), en.Stats().FirstStartChunks)
	}
	rn.Close()
	en.Close(ctx)

	// The next start replays the first one's trace and asks for no ranges.
	f2 := newFakeCache()
	e2 := New(f2, Options{Traces: st, FirstStartRanges: ranges, StoreRoundTrip: func() time.Duration { return 20 * time.Millisecond }})
	defer e2.Close(ctx)
	r2 := e2.Open("traced", m)
	defer r2.Close()
	r2.BeginStartup(snapshot, nil, nil)
	waitReplayed(t, e2, 1)
	e2.bg.Wait()
	if calls.Load() != 2 || e2.Stats().FirstStartChunks != 0 {
		t.Errorf("ranges asked %d times in all, %d chunks loaded by a replayed start, want twice (the first starts) and none", calls.Load(), e2.Stats().FirstStartChunks)
	}
}
