package volume

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/blockmap"
	"github.com/slacker-dev/slacker/internal/cache"
	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/fetch"
	"github.com/slacker-dev/slacker/internal/prefetch"
	"github.com/slacker-dev/slacker/internal/store"
	"github.com/slacker-dev/slacker/internal/store/local"
)

// stack is a store, a fetcher, a small cache and the prefetch engine, as on a node.
type stack struct {
	st      *local.Store
	cache   *cache.Cache
	engine  *prefetch.Engine
	readers map[string]*prefetch.Reader // by volume directory
	dir     string
}

func newStack(t *testing.T, cacheBytes int64) *stack {
	t.Helper()
	dir := t.TempDir()
	st, err := local.Open(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := cache.Open(cache.Options{Dir: filepath.Join(dir, "cache"), MaxBytes: cacheBytes, MemBytes: cacheBytes / 4},
		fetch.New(st, fetch.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	e := prefetch.New(c, prefetch.Options{})
	t.Cleanup(func() { e.Close(context.Background()) })
	os.Mkdir(filepath.Join(dir, "volumes"), 0o700)
	return &stack{st: st, cache: c, engine: e, readers: map[string]*prefetch.Reader{}, dir: dir}
}

func (s *stack) loadMap(t *testing.T, id digest.Digest) *blockmap.Map {
	t.Helper()
	b, err := store.ReadAll(context.Background(), s.st, id)
	if err != nil {
		t.Fatal(err)
	}
	m, err := blockmap.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func (s *stack) clone(t *testing.T, name string, id digest.Digest, size int64) *Volume {
	t.Helper()
	var m *blockmap.Map
	if id != "" {
		m = s.loadMap(t, id)
	}
	dir := filepath.Join(s.dir, "volumes", name)
	v, err := Create(dir, id, m, size, s.reader(dir, m))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// reader returns a new base reader for the volume in dir, nil for a blank one.
func (s *stack) reader(dir string, m *blockmap.Map) BaseReader {
	if m == nil {
		return nil
	}
	r := s.engine.Open(filepath.Base(dir), m)
	s.readers[dir] = r
	return r
}

func (s *stack) reopen(t *testing.T, v *Volume) *Volume {
	t.Helper()
	var m *blockmap.Map
	if v.Meta().Base != "" {
		m = s.loadMap(t, v.Meta().Base)
	}
	nv, err := Open(v.Dir(), m, s.reader(v.Dir(), m))
	if err != nil {
		t.Fatal(err)
	}
	return nv
}

func checkRead(t *testing.T, v *Volume, model []byte, off, n int64) {
	t.Helper()
	got := make([]byte, n)
	k, err := v.ReadAt(context.Background(), got, off)
	want := model[min(off, int64(len(model))):min(off+n, int64(len(model)))]
	if k != len(want) || (err != nil && k == int(n)) {
		t.Fatalf("read [%d,+%d): %d bytes, err %v; want %d", off, n, k, err, len(want))
	}
	if !bytes.Equal(got[:k], want) {
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("read [%d,+%d): first difference at volume offset %d: got %#x want %#x", off, n, off+int64(i), got[i], want[i])
			}
		}
	}
}

// TestModel drives random writes, zeroing, reads, syncs, reopens, snapshots and
// clones of snapshots, and checks every volume byte for byte against a model.
func TestModel(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { runModel(t, seed) })
	}
}

func runModel(t *testing.T, seed uint64) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 99))
	s := newStack(t, 1<<20) // far smaller than the data: evictions and re-fetches happen
	const size = 2 << 20
	type vol struct {
		v     *Volume
		model []byte
	}
	vols := map[string]*vol{}
	snaps := map[digest.Digest][]byte{}
	var snapIDs []digest.Digest
	n := 0
	newName := func() string { n++; return fmt.Sprint("v", n) }
	vols[newName()] = &vol{v: s.clone(t, "v1", "", size), model: make([]byte, size)}
	pick := func() (string, *vol) {
		names := make([]string, 0, len(vols))
		for k := range vols {
			names = append(names, k)
		}
		// deterministic order
		for i := range names {
			for j := i + 1; j < len(names); j++ {
				if names[j] < names[i] {
					names[i], names[j] = names[j], names[i]
				}
			}
		}
		k := names[rng.IntN(len(names))]
		return k, vols[k]
	}
	randRange := func() (int64, int64) {
		switch rng.IntN(4) {
		case 0: // aligned blocks
			b := rng.Int64N(size / BlockSize)
			k := 1 + rng.Int64N(min(64, size/BlockSize-b))
			return b * BlockSize, k * BlockSize
		case 1: // tiny, unaligned
			off := rng.Int64N(size - 1)
			return off, 1 + rng.Int64N(min(100, size-off))
		default: // anything
			off := rng.Int64N(size - 1)
			return off, 1 + rng.Int64N(min(300000, size-off))
		}
	}
	for op := 0; op < 600; op++ {
		name, x := pick()
		switch r := rng.IntN(100); {
		case r < 35: // write
			off, length := randRange()
			data := make([]byte, length)
			if rng.IntN(5) > 0 {
				for i := range data {
					data[i] = byte(rng.IntN(4)) // compressible, with zero runs
				}
			}
			if _, err := x.v.WriteAt(ctx, data, off); err != nil {
				t.Fatalf("op %d write %s: %v", op, name, err)
			}
			copy(x.model[off:], data)
		case r < 40: // discard
			off, length := randRange()
			if err := x.v.Zero(ctx, off, length); err != nil {
				t.Fatalf("op %d zero: %v", op, err)
			}
			clear(x.model[off : off+length])
		case r < 70: // read
			off, length := randRange()
			checkRead(t, x.v, x.model, off, length)
		case r < 75: // sync
			if err := x.v.Sync(ctx); err != nil {
				t.Fatal(err)
			}
		case r < 80: // close and reopen
			if err := x.v.Close(); err != nil {
				t.Fatal(err)
			}
			x.v = s.reopen(t, x.v)
		case r < 90: // snapshot
			res, err := x.v.Snapshot(ctx, s.st, SnapshotOptions{ChunkSize: 16 << 10})
			if err != nil {
				t.Fatalf("op %d snapshot: %v", op, err)
			}
			if _, ok := snaps[res.ID]; !ok {
				snapIDs = append(snapIDs, res.ID)
			}
			snaps[res.ID] = append([]byte(nil), x.model...)
		case r < 97: // clone a snapshot
			if len(snapIDs) == 0 || len(vols) > 6 {
				continue
			}
			id := snapIDs[rng.IntN(len(snapIDs))]
			nn := newName()
			vols[nn] = &vol{v: s.clone(t, nn, id, size), model: append([]byte(nil), snaps[id]...)}
		default: // delete
			if len(vols) == 1 {
				continue
			}
			if err := x.v.Delete(); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(x.v.Dir()); !os.IsNotExist(err) {
				t.Fatalf("volume dir still there after delete")
			}
			delete(vols, name)
		}
	}
	for name, x := range vols {
		checkRead(t, x.v, x.model, 0, size)
		x.v.Close()
		_ = name
	}
	// Every snapshot, cloned afresh, reads back exactly as recorded.
	for i, id := range snapIDs {
		v := s.clone(t, fmt.Sprint("check", i), id, size)
		checkRead(t, v, snaps[id], 0, size)
		v.Delete()
	}
	st := s.cache.Stats()
	if st.Evictions == 0 {
		t.Errorf("the model never evicted from a 1 MiB cache: %+v", st)
	}
}

func TestCloneIsO1AndSnapshotOnlyChanges(t *testing.T) {
	ctx := context.Background()
	s := newStack(t, 64<<20)
	const size = 64 << 20
	v := s.clone(t, "a", "", size)
	data := bytes.Repeat([]byte("slacker!"), 8<<20/8)
	if _, err := v.WriteAt(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
	res, err := v.Snapshot(ctx, s.st, SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.DeltaBytes != 8<<20 || res.Map.DataSize() != 8<<20 {
		t.Fatalf("first snapshot: %+v", res)
	}
	// A clone copies nothing: its directory holds a sparse data file and an empty journal.
	c := s.clone(t, "b", res.ID, size)
	var allocated int64
	filepath.Walk(c.Dir(), func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			allocated += blocksOf(fi)
		}
		return nil
	})
	if allocated > 64<<10 {
		t.Fatalf("clone allocated %d bytes on disk", allocated)
	}
	// One byte changed in a big file: the next snapshot uploads one 4 KiB block.
	if _, err := c.WriteAt(ctx, []byte{'X'}, 5<<20+7); err != nil {
		t.Fatal(err)
	}
	res2, err := c.Snapshot(ctx, s.st, SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res2.DeltaBytes != BlockSize || res2.NewBytes != BlockSize || res2.NewChunks != 1 {
		t.Fatalf("snapshot after a 1-byte write: delta %d, uploaded %d bytes in %d chunks; want one 4 KiB block",
			res2.DeltaBytes, res2.NewBytes, res2.NewChunks)
	}
	want := append([]byte(nil), data...)
	want[5<<20+7] = 'X'
	d := s.clone(t, "c", res2.ID, size)
	checkRead(t, d, append(want, make([]byte, size-len(want))...), 0, size)
	if st := s.readers[d.Dir()].Stats(); st.BaseReadBytes != 8<<20 {
		t.Fatalf("stats after reading the whole volume: %+v", st)
	}
}

// TestCrashKeepsSyncedWrites drops a volume without closing it, as a killed daemon
// would, tears the journal's tail, and checks that synced writes are all there.
func TestCrashKeepsSyncedWrites(t *testing.T) {
	ctx := context.Background()
	s := newStack(t, 8<<20)
	const size = 4 << 20
	v := s.clone(t, "a", "", size)
	model := make([]byte, size)
	rng := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < 200; i++ {
		off := rng.Int64N(size - 9000)
		data := make([]byte, 1+rng.IntN(9000))
		for j := range data {
			data[j] = byte(1 + rng.IntN(250))
		}
		if _, err := v.WriteAt(ctx, data, off); err != nil {
			t.Fatal(err)
		}
		copy(model[off:], data)
		if i%10 == 9 {
			if err := v.Sync(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	// "Crash": no Close. Tear the journal with half a record of garbage.
	j, err := os.OpenFile(filepath.Join(v.Dir(), "journal"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	j.Write([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11})
	j.Close()
	nv, err := Open(v.Dir(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkRead(t, nv, model, 0, size)
	fi, _ := os.Stat(filepath.Join(v.Dir(), "journal"))
	if fi.Size()%journalRecord != 0 {
		t.Fatalf("torn journal tail not truncated: %d bytes", fi.Size())
	}
}

func TestWriteOutOfRange(t *testing.T) {
	s := newStack(t, 1<<20)
	v := s.clone(t, "a", "", 1<<20)
	if _, err := v.WriteAt(context.Background(), []byte("x"), 1<<20); errdefs.KindOf(err) != errdefs.OutOfRange {
		t.Fatalf("write past the end: %v, want errdefs.ErrOutOfRange", err)
	}
	if err := v.Zero(context.Background(), 1<<20-4096, 8192); errdefs.KindOf(err) != errdefs.OutOfRange {
		t.Fatalf("zero past the end: %v, want errdefs.ErrOutOfRange", err)
	}
	n, err := v.ReadAt(context.Background(), make([]byte, 10), 1<<20-4)
	if n != 4 || err == nil {
		t.Fatalf("read across the end: %d, %v", n, err)
	}
}

// TestBaseReadRuns checks the record of base blocks read: reads of the base are
// recorded as merged block runs, reads of the volume's own writes and of holes are
// not, and the record stops (flagged) at MaxReadRuns runs.
func TestBaseReadRuns(t *testing.T) {
	ctx := context.Background()
	s := newStack(t, 64<<20)
	const size = 16 << 20
	src := s.clone(t, "src", "", size)
	if _, err := src.WriteAt(ctx, bytes.Repeat([]byte{7}, 4<<20), 0); err != nil {
		t.Fatal(err)
	}
	res, err := src.Snapshot(ctx, s.st, SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	read := func(v *Volume, off, n int64) {
		t.Helper()
		if _, err := v.ReadAt(ctx, make([]byte, n), off); err != nil {
			t.Fatal(err)
		}
	}
	v := s.clone(t, "v", res.ID, size)
	// A whole block written: no copy-on-write read of the base.
	if _, err := v.WriteAt(ctx, make([]byte, BlockSize), 20*BlockSize); err != nil {
		t.Fatal(err)
	}
	read(v, 0, 1)                      // block 0
	read(v, BlockSize+10, BlockSize)   // blocks 1 and 2, merged with 0
	read(v, 10*BlockSize, 3*BlockSize) // 10-12
	read(v, 20*BlockSize, BlockSize)   // the volume's own write: not the base
	read(v, 8<<20, BlockSize)          // a hole of the base: nothing read
	read(v, 11*BlockSize, BlockSize)   // again: already recorded
	st := s.readers[v.Dir()].Stats()
	want := [][2]int64{{0, 3}, {10, 13}}
	if fmt.Sprint(st.BaseReadRuns) != fmt.Sprint(want) || st.BaseReadRunsTruncated {
		t.Fatalf("base read runs %v (truncated %v), want %v", st.BaseReadRuns, st.BaseReadRunsTruncated, want)
	}

	old := prefetch.MaxReadRuns
	prefetch.MaxReadRuns = 2
	t.Cleanup(func() { prefetch.MaxReadRuns = old })
	w := s.clone(t, "w", res.ID, size)
	for _, b := range []int64{0, 4, 5, 8, 4} {
		read(w, b*BlockSize, BlockSize)
	}
	st = s.readers[w.Dir()].Stats()
	want = [][2]int64{{0, 1}, {4, 6}}
	if fmt.Sprint(st.BaseReadRuns) != fmt.Sprint(want) || !st.BaseReadRunsTruncated {
		t.Fatalf("bounded record: runs %v (truncated %v), want %v and truncated", st.BaseReadRuns, st.BaseReadRunsTruncated, want)
	}
}

// TestZeroAddsOnlyWhatReadsOtherwise: a discard (Zero) of blocks the base holds as
// a hole adds nothing to the delta (a trim of free space the image never used
// costs nothing at the next snapshot); a discard of base data makes those blocks
// zeros in the delta, and the next snapshot records them as a hole, uploading
// nothing.
func TestZeroAddsOnlyWhatReadsOtherwise(t *testing.T) {
	ctx := context.Background()
	s := newStack(t, 64<<20)
	const size = 16 << 20
	src := s.clone(t, "src", "", size)
	data := bytes.Repeat([]byte{7}, 1<<20)
	if _, err := src.WriteAt(ctx, data, 1<<20); err != nil { // base data in [1 MiB, 2 MiB)
		t.Fatal(err)
	}
	res, err := src.Snapshot(ctx, s.st, SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	v := s.clone(t, "v", res.ID, size)
	if err := v.Zero(ctx, 4<<20, 8<<20); err != nil { // a hole of the base
		t.Fatal(err)
	}
	if st := v.Stats(); st.DeltaBytes != 0 {
		t.Fatalf("discarding a hole of the base added %d bytes to the delta", st.DeltaBytes)
	}
	if err := v.Zero(ctx, 1<<20, 512<<10); err != nil { // half the base's data
		t.Fatal(err)
	}
	if st := v.Stats(); st.DeltaBytes != 512<<10 {
		t.Fatalf("discarding 512 KiB of base data: delta %d bytes, want %d", st.DeltaBytes, 512<<10)
	}
	want := make([]byte, size)
	copy(want[1<<20+512<<10:], data[512<<10:])
	checkRead(t, v, want, 0, size)
	snap, err := v.Snapshot(ctx, s.st, SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if snap.NewBytes != 0 || snap.Map.DataSize() != 512<<10 {
		t.Fatalf("snapshot after the discards: uploaded %d bytes, %d bytes of data; want 0 and %d", snap.NewBytes, snap.Map.DataSize(), 512<<10)
	}
}
