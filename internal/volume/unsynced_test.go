package volume

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
)

// unsyncedHeaderLen is the length of the unsynced file's header line:
// "slacker-unsynced 1 " and a 36-character boot id and "\n".
const unsyncedHeaderLen = 19 + 36 + 1

// otherBoot is a boot id that is not this machine's.
const otherBoot = "00000000-1111-2222-3333-444444444444"

// baseVolume returns a clone of a snapshot whose first 3/4 hold data (a byte
// pattern, never zero) and whose last quarter is a hole, and the clone's content.
func baseVolume(t *testing.T, s *stack, name string, size int64) (*Volume, []byte) {
	t.Helper()
	ctx := context.Background()
	src := s.clone(t, name+"-src", "", size)
	model := make([]byte, size)
	for i := range model[:size/4*3] {
		model[i] = byte(1 + i/BlockSize*7 + i%251)
		if model[i] == 0 {
			model[i] = 1
		}
	}
	if _, err := src.WriteAt(ctx, model[:size/4*3], 0); err != nil {
		t.Fatal(err)
	}
	res, err := src.Snapshot(ctx, s.st, SnapshotOptions{ChunkSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Delete(); err != nil {
		t.Fatal(err)
	}
	return s.clone(t, name, res.ID, size), model
}

// writer writes to a volume and to its model.
type writer struct {
	t     *testing.T
	v     *Volume
	model []byte
	seq   byte
}

func (w *writer) write(off, n int64) {
	w.t.Helper()
	w.seq++
	data := make([]byte, n)
	for i := range data {
		data[i] = w.seq + byte(i%13)
		if data[i] == 0 {
			data[i] = 0xee
		}
	}
	if _, err := w.v.WriteAt(context.Background(), data, off); err != nil {
		w.t.Fatalf("write [%d, +%d): %v", off, n, err)
	}
	copy(w.model[off:], data)
}

func (w *writer) zero(off, n int64) {
	w.t.Helper()
	if err := w.v.Zero(context.Background(), off, n); err != nil {
		w.t.Fatalf("zero [%d, +%d): %v", off, n, err)
	}
	clear(w.model[off : off+n])
}

func (w *writer) sync() {
	w.t.Helper()
	if err := w.v.Sync(context.Background()); err != nil {
		w.t.Fatal(err)
	}
}

// killAndReopen abandons the volume as a killed daemon would and opens it again,
// as the daemon that takes over does (same boot unless setBootID said otherwise).
func (w *writer) killAndReopen(s *stack) {
	w.t.Helper()
	w.v.abandon()
	w.v = s.reopen(w.t, w.v)
}

// TestKilledDaemonKeepsUnsyncedWrites: writes acknowledged but not synced (at odd
// offsets and sizes, merging, overwriting, zeros, a Zero over base data) all read
// back after the daemon is killed and the volume reopened in the same boot; so do
// they after a Sync, more writes and another kill (journal and unsynced file
// together), and the runs read back are journaled by the next Sync.
func TestKilledDaemonKeepsUnsyncedWrites(t *testing.T) {
	s := newStack(t, 8<<20)
	const size = 1 << 20
	v, model := baseVolume(t, s, "a", size)
	w := &writer{t: t, v: v, model: model}
	check := func(what string) {
		t.Helper()
		t.Run(what, func(t *testing.T) { checkRead(t, w.v, w.model, 0, size) })
	}

	w.write(3*BlockSize+17, 5000)                           // partial blocks over base data
	w.write(100, 1)                                         // one byte
	w.write(20*BlockSize-3, BlockSize+6)                    // across two block boundaries
	w.write(40*BlockSize, 3*BlockSize)                      // whole blocks
	w.write(80*BlockSize, 1000)                             // then appended to: one pending run
	w.write(80*BlockSize+1000, 8000)                        //
	w.write(80*BlockSize+10, 20)                            // an overwrite inside it
	w.zero(60*BlockSize+100, 10*BlockSize)                  // Zero over base data
	w.zero(200*BlockSize, 8*BlockSize)                      // Zero over the base's hole
	w.write(230*BlockSize+5, 3)                             // in the base's hole
	copy(w.model[50*BlockSize:], make([]byte, 2*BlockSize)) // whole zero blocks: a punch
	if _, err := w.v.WriteAt(context.Background(), make([]byte, 2*BlockSize), 50*BlockSize); err != nil {
		t.Fatal(err)
	}
	w.killAndReopen(s)
	check("killed before any Sync")

	w.write(5*BlockSize+1, 10)
	w.sync()
	w.write(6*BlockSize-1, 2) // next to a synced run
	w.write(120*BlockSize+333, 3*BlockSize)
	w.zero(130*BlockSize, 4*BlockSize+1)
	w.killAndReopen(s)
	check("killed after a Sync and more writes")

	rng := rand.New(rand.NewPCG(14, 1))
	for i := range 120 {
		off := rng.Int64N(size - 1)
		n := 1 + rng.Int64N(min(3*BlockSize, size-off))
		if i%7 == 0 {
			w.zero(off, n)
		} else {
			w.write(off, n)
		}
		if i%40 == 39 {
			w.killAndReopen(s)
		}
		if i%25 == 24 {
			w.sync()
		}
	}
	w.killAndReopen(s)
	check("killed among random writes")

	// The runs read back are pending: a Sync journals them, so they are there
	// even without the unsynced file.
	w.sync()
	w.killAndReopen(s)
	w.v.abandon()
	if err := os.Remove(filepath.Join(w.v.Dir(), "unsynced")); err != nil {
		t.Fatal(err)
	}
	w.v = s.reopen(t, w.v)
	check("synced after the reopen, unsynced file removed")
	if err := w.v.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestUnsyncedWriteSurvivesKill is the bare case: one write, not synced, the
// daemon killed, the volume reopened: the write is there.
func TestUnsyncedWriteSurvivesKill(t *testing.T) {
	s := newStack(t, 1<<20)
	const size = 1 << 20
	w := &writer{t: t, v: s.clone(t, "a", "", size), model: make([]byte, size)}
	w.write(7*BlockSize+123, 456)
	w.killAndReopen(s)
	checkRead(t, w.v, w.model, 0, size)
	w.v.Close()
}

// TestRebootForgetsUnsyncedWrites: after a reboot (another boot id in the unsynced
// file's header), unsynced writes read as before them (base content, or zeros over
// its hole), synced ones are there.
func TestRebootForgetsUnsyncedWrites(t *testing.T) {
	s := newStack(t, 8<<20)
	const size = 1 << 20
	v, model := baseVolume(t, s, "a", size)
	base := slices.Clone(model)
	w := &writer{t: t, v: v, model: model}
	// Synced: blocks [0, 100).
	w.write(2*BlockSize+5, 3000)
	w.write(10*BlockSize, 4*BlockSize)
	w.zero(30*BlockSize+1, 5*BlockSize)
	w.sync()
	synced := slices.Clone(w.model)
	// Not synced: blocks [100, 256), over base data and over its hole.
	w.write(100*BlockSize+17, 5000)
	w.write(150*BlockSize, 2*BlockSize)
	w.zero(160*BlockSize+100, 10*BlockSize)
	w.write(220*BlockSize+9, 100)
	w.zero(230*BlockSize, 3*BlockSize)

	w.v.abandon()
	setBootID(t, otherBoot)
	w.v = s.reopen(t, w.v)
	want := slices.Concat(synced[:100*BlockSize], base[100*BlockSize:])
	checkRead(t, w.v, want, 0, size)
	// The volume works on in the new boot.
	w.model = want
	w.write(150*BlockSize+1, 10)
	w.killAndReopen(s)
	checkRead(t, w.v, w.model, 0, size)
	w.v.Close()
}

// TestUnsyncedTornTail: a torn or corrupt record ends the unsynced file's list;
// the whole records before it are read back.
func TestUnsyncedTornTail(t *testing.T) {
	for _, tc := range []struct {
		name string
		tear func(t *testing.T, path string)
	}{
		{"truncated mid-record", func(t *testing.T, path string) {
			if err := os.Truncate(path, unsyncedHeaderLen+2*24+10); err != nil {
				t.Fatal(err)
			}
		}},
		{"third record corrupt", func(t *testing.T, path string) {
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteAt([]byte{0xff}, unsyncedHeaderLen+2*24+3); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStack(t, 1<<20)
			const size = 1 << 20
			w := &writer{t: t, v: s.clone(t, "a", "", size), model: make([]byte, size)}
			// Four runs, four records; kept is the content with the first two.
			var kept []byte
			for _, b := range []int64{10, 20, 30, 40} {
				w.write(b*BlockSize+b, 100)
				if b == 20 {
					kept = slices.Clone(w.model)
				}
			}
			w.v.abandon()
			path := filepath.Join(w.v.Dir(), "unsynced")
			if fi, err := os.Stat(path); err != nil || fi.Size() != unsyncedHeaderLen+4*24 {
				t.Fatalf("unsynced file after four writes: %v; want %d bytes", err, unsyncedHeaderLen+4*24)
			}
			tc.tear(t, path)
			w.v, w.model = s.reopen(t, w.v), kept
			checkRead(t, w.v, w.model, 0, size)
			// Rewritten for this process with the two runs read back.
			if fi, err := os.Stat(path); err != nil || fi.Size() != unsyncedHeaderLen+2*24 {
				t.Fatalf("unsynced file after the reopen: %v; want %d bytes", err, unsyncedHeaderLen+2*24)
			}
			w.write(30*BlockSize, 5)
			w.killAndReopen(s)
			checkRead(t, w.v, w.model, 0, size)
			w.v.Close()
		})
	}
}

// TestOpenWithoutUnsyncedFile: a volume directory without an unsynced file (made
// by an older build) opens and works; writes not synced before it was left are
// absent, as they were then.
func TestOpenWithoutUnsyncedFile(t *testing.T) {
	s := newStack(t, 8<<20)
	const size = 1 << 20
	v, model := baseVolume(t, s, "a", size)
	w := &writer{t: t, v: v, model: model}
	w.write(3*BlockSize+1, 2*BlockSize)
	w.sync()
	synced := slices.Clone(w.model)
	w.write(90*BlockSize+1, 10)
	w.v.abandon()
	path := filepath.Join(w.v.Dir(), "unsynced")
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	w.v, w.model = s.reopen(t, w.v), synced
	checkRead(t, w.v, w.model, 0, size)

	w.write(100*BlockSize+5, 3*BlockSize)
	w.zero(120*BlockSize+5, 3*BlockSize)
	w.sync()
	w.write(140*BlockSize, 7)
	w.killAndReopen(s)
	checkRead(t, w.v, w.model, 0, size)

	// Closed, the file removed, opened again.
	if err := w.v.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	w.v = s.reopen(t, w.v)
	checkRead(t, w.v, w.model, 0, size)
	w.write(0, 1)
	checkRead(t, w.v, w.model, 0, size)
	if err := w.v.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestConcurrentWritesDuringSync: writers go on while Syncs run; every write
// acknowledged before the daemon is killed reads back after the reopen, whether a
// Sync journaled it or the unsynced file (rewritten by each Sync with the writes
// that came during it) lists it.
func TestConcurrentWritesDuringSync(t *testing.T) {
	s := newStack(t, 1<<20)
	const size = 1 << 20
	const writers = 4
	v := s.clone(t, "a", "", size)
	model := make([]byte, size)
	ctx := context.Background()
	for round := range 3 {
		done := make(chan struct{})
		var syncs sync.WaitGroup
		syncs.Add(1)
		go func() {
			defer syncs.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				if err := v.Sync(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
		var wg sync.WaitGroup
		for g := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(round), uint64(g)))
				// Writer g owns the blocks b with b%writers == g.
				for i := range 150 {
					b := rng.Int64N(size/BlockSize/writers)*writers + int64(g)
					in := rng.Int64N(BlockSize)
					n := 1 + rng.Int64N(BlockSize-in)
					off := b*BlockSize + in
					data := make([]byte, n)
					for j := range data {
						data[j] = byte(1 + (i+j+g)%200)
					}
					if _, err := v.WriteAt(ctx, data, off); err != nil {
						t.Error(err)
						return
					}
					copy(model[off:], data) // disjoint blocks: no two writers share bytes
				}
			}()
		}
		wg.Wait()
		close(done)
		syncs.Wait()
		if t.Failed() {
			t.FailNow()
		}
		// Unsynced ones too.
		for i := range int64(5) {
			off := (i*37 + int64(round)) * BlockSize / 3
			if _, err := v.WriteAt(ctx, []byte{byte(0x40 + i)}, off); err != nil {
				t.Fatal(err)
			}
			model[off] = byte(0x40 + i)
		}
		v.abandon()
		v = s.reopen(t, v)
		t.Run(fmt.Sprint("round", round), func(t *testing.T) { checkRead(t, v, model, 0, size) })
	}
	v.Close()
}
