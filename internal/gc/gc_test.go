package gc

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/blockmap"
	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/store"
	"github.com/slacker-dev/slacker/internal/store/local"
	"github.com/slacker-dev/slacker/internal/trace"
)

type fixture struct {
	t  *testing.T
	st *local.Store
}

func newFixture(t *testing.T) *fixture {
	st, err := local.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, st: st}
}

// chunk stores a 4 KiB chunk filled with name.
func (f *fixture) chunk(name string) blockmap.Chunk {
	f.t.Helper()
	b := bytes.Repeat([]byte(name), 4096/len(name)+1)[:4096]
	d, err := store.PutBytes(context.Background(), f.st, b)
	if err != nil {
		f.t.Fatal(err)
	}
	return blockmap.Chunk{Digest: d, Size: 4096}
}

// snapshot stores a block map naming chunks, one block each.
func (f *fixture) snapshot(chunks ...blockmap.Chunk) digest.Digest {
	f.t.Helper()
	m := &blockmap.Map{Size: 1 << 20}
	for i, c := range chunks {
		m.Chunks = append(m.Chunks, c)
		m.Extents = append(m.Extents, blockmap.Extent{Offset: int64(2*i) * 4096, Length: 4096, Chunk: i})
	}
	enc, err := blockmap.Encode(m)
	if err != nil {
		f.t.Fatal(err)
	}
	d, err := store.PutBytes(context.Background(), f.st, enc)
	if err != nil {
		f.t.Fatal(err)
	}
	return d
}

// age makes objects look stored long ago.
func (f *fixture) age(ds ...digest.Digest) {
	f.t.Helper()
	old := time.Now().Add(-48 * time.Hour)
	for _, d := range ds {
		if err := os.Chtimes(f.st.Path(d), old, old); err != nil {
			f.t.Fatal(err)
		}
	}
}

func (f *fixture) has(d digest.Digest) bool {
	ok, err := store.Exists(context.Background(), f.st, d)
	if err != nil {
		f.t.Fatal(err)
	}
	return ok
}

func (f *fixture) lease(node string, expires time.Time, snaps []digest.Digest, uploads ...digest.Digest) {
	f.t.Helper()
	l := &Lease{Node: node, Updated: time.Now(), Expires: expires, Snapshots: snaps}
	if len(uploads) > 0 {
		l.Uploads = []Upload{{ID: "u1", Started: time.Now(), Chunks: uploads}}
	}
	if err := PutLease(context.Background(), f.st, l); err != nil {
		f.t.Fatal(err)
	}
}

func TestCollect(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	shared, a1, b1, c1, d1, e1, orphan, young, upload := f.chunk("shared"), f.chunk("a1"), f.chunk("b1"), f.chunk("c1"),
		f.chunk("d1"), f.chunk("e1"), f.chunk("orphan"), f.chunk("young"), f.chunk("upload")
	A := f.snapshot(a1, shared) // named
	B := f.snapshot(b1, shared) // unnamed, old: garbage
	C := f.snapshot(c1)         // unnamed but young: a conversion in progress
	D := f.snapshot(d1)         // in use on a live node
	E := f.snapshot(e1)         // in use on a dead node
	f.age(shared.Digest, a1.Digest, b1.Digest, c1.Digest, d1.Digest, e1.Digest, orphan.Digest, upload.Digest, A, B, D, E)
	f.lease("live", time.Now().Add(time.Hour), []digest.Digest{D}, upload.Digest)
	f.lease("dead", time.Now().Add(-time.Hour), []digest.Digest{E})
	absent := digest.FromString("never stored")
	o := Options{Grace: time.Hour, Roots: []Root{{Snapshot: A, From: "name a:1"}, {Snapshot: absent, From: "name gone:1"}}}

	keep := []digest.Digest{A, a1.Digest, shared.Digest, C, c1.Digest, D, d1.Digest, upload.Digest, young.Digest}
	gone := []digest.Digest{B, b1.Digest, E, e1.Digest, orphan.Digest}

	// Start-up traces: B's goes with B; A's stays; a trace of a snapshot that is
	// not in the store (not yet written, or never) stays too.
	for _, d := range []digest.Digest{A, B, absent} {
		if err := f.st.PutRef(ctx, trace.RefName(d), []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}

	dry := o
	dry.DryRun = true
	rep, err := Collect(ctx, f.st, dry)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Deleted != len(gone) {
		t.Fatalf("dry run would delete %d objects, want %d", rep.Deleted, len(gone))
	}
	for _, d := range append(keep, gone...) {
		if !f.has(d) {
			t.Fatalf("dry run deleted %s", d)
		}
	}
	if s, _ := ReadState(ctx, f.st); s.Epoch != 0 {
		t.Fatalf("a dry run took epoch %d", s.Epoch)
	}

	rep, err = Collect(ctx, f.st, o)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range keep {
		if !f.has(d) {
			t.Errorf("live object %s was deleted", d)
		}
	}
	for d, want := range map[digest.Digest]bool{A: true, B: false, absent: true} {
		if _, err := f.st.GetRef(ctx, trace.RefName(d)); (err == nil) != want {
			t.Errorf("trace of %s: kept %v, want %v", d, err == nil, want)
		}
	}
	for _, d := range gone {
		if f.has(d) {
			t.Errorf("garbage %s was kept", d)
		}
	}
	if rep.Deleted != len(gone) || rep.Objects != len(keep)+len(gone) || rep.Epoch != 1 {
		t.Fatalf("report %+v", rep)
	}
	if len(rep.Missing) != 1 || rep.Missing[0].Object != absent || rep.Missing[0].From != "name gone:1" {
		t.Fatalf("missing %+v", rep.Missing)
	}
	if len(rep.Leases) != 2 {
		t.Fatalf("leases %+v", rep.Leases)
	}
	s, err := ReadState(ctx, f.st)
	if err != nil || s.Epoch != 1 || s.Running || s.Finished.IsZero() {
		t.Fatalf("state after a collection: %+v %v", s, err)
	}
	// Collecting again finds nothing more, and every reference checks out.
	if rep, err = Collect(ctx, f.st, o); err != nil || rep.Deleted != 0 {
		t.Fatalf("second collection: %+v %v", rep, err)
	}
	crep, err := Check(ctx, f.st, CheckOptions{Roots: []Root{{Snapshot: A, From: "name a:1"}}, ReadData: true})
	if err != nil || !crep.OK() || crep.Snapshots != 2 || crep.Read != len(keep) {
		t.Fatalf("check after collecting: %+v %v", crep, err)
	}
}

func TestCollectGraceZero(t *testing.T) {
	f := newFixture(t)
	c := f.chunk("fresh")
	m := f.snapshot(c)
	rep, err := Collect(context.Background(), f.st, Options{Grace: 0})
	if err != nil || rep.Deleted != 2 || f.has(c.Digest) || f.has(m) {
		t.Fatalf("grace 0: %+v %v", rep, err)
	}
}

// The collector stops, deleting nothing, when it cannot know what something
// protects.
func TestCollectRefusesWhatItCannotRead(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name  string
		setup func(f *fixture) Options
		want  string
	}{
		{"corrupt named map", func(f *fixture) Options {
			m := f.snapshot(f.chunk("x"))
			b, _ := os.ReadFile(f.st.Path(m))
			b[len(b)-1] ^= 1
			os.WriteFile(f.st.Path(m), b, 0o600)
			return Options{Roots: []Root{{Snapshot: m, From: "name x"}}}
		}, "cannot be read"},
		{"named object that is not a map", func(f *fixture) Options {
			return Options{Roots: []Root{{Snapshot: f.chunk("notamap").Digest, From: "name y"}}}
		}, "not a valid block map"},
		{"unreadable lease", func(f *fixture) Options {
			f.st.PutRef(ctx, LeaseName("broken"), []byte(`{"version":1,"node":"broken"`))
			return Options{}
		}, "lease leases/broken is unreadable"},
		{"lease of a future version", func(f *fixture) Options {
			f.st.PutRef(ctx, LeaseName("future"), []byte(`{"version":2,"node":"future"}`))
			return Options{}
		}, "lease version 2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			garbage := f.chunk("garbage")
			f.age(garbage.Digest)
			o := tc.setup(f)
			_, err := Collect(ctx, f.st, o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("collect: %v, want %q", err, tc.want)
			}
			if !f.has(garbage.Digest) {
				t.Fatal("a collection that failed deleted something")
			}
			if s, _ := ReadState(ctx, f.st); s.Running {
				t.Fatal("a collection that failed left the store marked busy")
			}
		})
	}
}

func TestCollectBusy(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	garbage := f.chunk("garbage")
	f.age(garbage.Digest)
	now := time.Now()
	writeState(ctx, f.st, State{Epoch: 7, Running: true, Owner: "other", Host: "elsewhere", Started: now, Heartbeat: now})
	if _, err := Collect(ctx, f.st, Options{}); !errors.Is(err, errdefs.ErrBusy) || !strings.Contains(err.Error(), "another garbage collection is running on this store") || !f.has(garbage.Digest) {
		t.Fatalf("collect while another runs: %v", err)
	}
	// One that stopped beating is dead: taken over.
	writeState(ctx, f.st, State{Epoch: 7, Running: true, Owner: "other", Started: now.Add(-time.Hour), Heartbeat: now.Add(-StaleAfter)})
	rep, err := Collect(ctx, f.st, Options{})
	if err != nil || rep.Epoch != 8 || f.has(garbage.Digest) {
		t.Fatalf("collect after a dead one: %+v %v", rep, err)
	}
}

func TestNoRecords(t *testing.T) {
	f := newFixture(t)
	plain := struct{ store.Store }{f.st}
	if _, err := Collect(context.Background(), plain, Options{}); !errors.Is(err, ErrNoRecords) || !errors.Is(err, errdefs.ErrUnsupported) {
		t.Fatalf("collect of a store without records: %v", err)
	}
}

// A lease written while the collector sweeps (a node that just put a snapshot to
// use, an upload that just listed its chunks) saves what it names.
func TestLeaseWrittenDuringSweep(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	c, up := f.chunk("c"), f.chunk("up")
	m := f.snapshot(c)
	f.age(c.Digest, up.Digest, m)
	o := Options{beforeDel: func() { f.lease("late", time.Now().Add(time.Hour), []digest.Digest{m}, up.Digest) }}
	if _, err := Collect(ctx, f.st, o); err != nil {
		t.Fatal(err)
	}
	for _, d := range []digest.Digest{c.Digest, up.Digest, m} {
		if !f.has(d) {
			t.Fatalf("%s deleted although a lease named it before the deletion", d)
		}
	}
}

func TestFence(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	fence, err := NewFence(ctx, f.st)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := fence.Clear(ctx); !ok || err != nil {
		t.Fatalf("no collection ran: %v %v", ok, err)
	}
	if _, err := Collect(ctx, f.st, Options{}); err != nil {
		t.Fatal(err)
	}
	if ok, err := fence.Clear(ctx); ok || err != nil {
		t.Fatalf("a collection ran: %v %v; want not clear", ok, err)
	}
	if ok, _ := fence.Clear(ctx); !ok {
		t.Fatal("not clear after rebasing with no new collection")
	}

	// A collection running at the baseline makes the fence wait for it.
	now := time.Now()
	running := State{Epoch: 5, Running: true, Owner: "x", Started: now, Heartbeat: now}
	writeState(ctx, f.st, running)
	fence, _ = NewFence(ctx, f.st)
	fence.poll = time.Millisecond
	go func() {
		time.Sleep(20 * time.Millisecond)
		running.Running = false
		writeState(ctx, f.st, running)
	}()
	if ok, err := fence.Clear(ctx); ok || err != nil {
		t.Fatalf("collection running at the baseline: %v %v", ok, err)
	}
	if ok, _ := fence.Clear(ctx); !ok {
		t.Fatal("not clear after the collection finished")
	}
	// One that never finishes fails the upload when its ctx ends.
	running = State{Epoch: 6, Running: true, Owner: "x", Started: now, Heartbeat: time.Now()}
	writeState(ctx, f.st, running)
	cctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancel()
	if _, err := fence.Clear(cctx); err == nil || !strings.Contains(err.Error(), "still running") {
		t.Fatalf("fence during an endless collection: %v", err)
	}
}

func TestCheckFindsProblems(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	a, b, c := f.chunk("a"), f.chunk("b"), f.chunk("c")
	good := f.snapshot(a)
	holed := f.snapshot(b)
	damaged := f.snapshot(c)
	os.Remove(f.st.Path(b.Digest))
	p := f.st.Path(c.Digest)
	buf, _ := os.ReadFile(p)
	buf[100] ^= 0x10
	os.WriteFile(p, buf, 0o600)
	f.st.PutRef(ctx, LeaseName("bad"), []byte("not json"))
	roots := []Root{{good, "name good"}, {holed, "name holed"}, {damaged, "name damaged"}, {digest.FromString("x"), "name absent"}}

	rep, err := Check(ctx, f.st, CheckOptions{Roots: roots})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"missing " + b.Digest.String() + " (name holed -> snapshot " + holed.String() + ")",
		"missing " + digest.FromString("x").String() + " (name absent)", "lease (leases/bad)"}
	got := ""
	for _, p := range rep.Problems {
		got += p.String() + "\n"
	}
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("check without reading data: problems\n%s\nlack %q", got, w)
		}
	}
	if strings.Contains(got, "corrupt") {
		t.Errorf("found corruption without reading data:\n%s", got)
	}
	rep, err = Check(ctx, f.st, CheckOptions{Roots: roots, ReadData: true})
	if err != nil {
		t.Fatal(err)
	}
	got = ""
	for _, p := range rep.Problems {
		got += p.String() + "\n"
	}
	if !strings.Contains(got, "corrupt "+c.Digest.String()) {
		t.Errorf("check --read-data: problems\n%s\nlack the damaged chunk", got)
	}
}

func FuzzDecodeLease(f *testing.F) {
	l := &Lease{Node: "n1", Host: "h", PID: 3, Updated: time.Unix(1, 0).UTC(), Expires: time.Unix(100, 0).UTC(),
		Snapshots: []digest.Digest{digest.FromString("s")},
		Uploads:   []Upload{{ID: "u", Started: time.Unix(2, 0).UTC(), Chunks: []digest.Digest{digest.FromString("c")}}}}
	b, err := EncodeLease(l)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte(`{"version":1,"node":"x"}`))
	f.Add([]byte(`{"version":1,"node":"x","updated":"2026-01-01T00:00:00Z","expires":"2026-01-01T00:00:00Z","snapshots":["sha256:zz"]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := DecodeLease(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error not wrapping ErrMalformed: %v", err)
			}
			return
		}
		enc, err := EncodeLease(l)
		if err != nil {
			t.Fatalf("a decoded lease does not encode: %v", err)
		}
		l2, err := DecodeLease(enc)
		if err != nil || l2.Node != l.Node || len(l2.Snapshots) != len(l.Snapshots) || len(l2.Uploads) != len(l.Uploads) {
			t.Fatalf("round trip: %+v vs %+v (%v)", l2, l, err)
		}
	})
}

func FuzzDecodeState(f *testing.F) {
	b, _ := EncodeState(State{Epoch: 3, Running: true, Owner: "o", Started: time.Unix(5, 0).UTC(), Heartbeat: time.Unix(6, 0).UTC()})
	f.Add(b)
	f.Add([]byte(`{"version":1,"epoch":-1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeState(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error not wrapping ErrMalformed: %v", err)
			}
			return
		}
		enc, err := EncodeState(s)
		if err != nil {
			t.Fatal(err)
		}
		if s2, err := DecodeState(enc); err != nil || s2.Epoch != s.Epoch || s2.Running != s.Running {
			t.Fatalf("round trip: %+v vs %+v (%v)", s2, s, err)
		}
	})
}

// listsStoredSizes is a store whose listing, like AWS S3's of compressed objects,
// gives each object's stored size (here half its size) as its size; Stat is exact.
type listsStoredSizes struct{ store.Store }

func (s listsStoredSizes) List(ctx context.Context, fn func(store.Info) error) error {
	return s.Store.List(ctx, func(i store.Info) error {
		i.Size /= 2
		i.Stored = i.Size
		return fn(i)
	})
}

// Check asks Stat before it calls a listed size wrong, so a store that lists
// stored sizes shows no problem, while a chunk whose size really differs from the
// map's still does.
func TestCheckAsksSizesAListingMayNotKnow(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	a := f.chunk("a")
	good := f.snapshot(a)
	wrong := f.snapshot(blockmap.Chunk{Digest: f.chunk("b").Digest, Size: 8192})
	st := listsStoredSizes{f.st}
	rep, err := Check(ctx, st, CheckOptions{Roots: []Root{{good, "name good"}}, ReadData: true})
	if err != nil || !rep.OK() {
		t.Fatalf("check of a good snapshot: %+v, %v", rep, err)
	}
	rep, err = Check(ctx, st, CheckOptions{Roots: []Root{{wrong, "name wrong"}}})
	if err != nil || len(rep.Problems) != 1 || rep.Problems[0].Kind != "size" || !strings.Contains(rep.Problems[0].Detail, "holds 4096 bytes, the map says 8192") {
		t.Fatalf("check of a map with a wrong size: %+v, %v", rep, err)
	}
}
