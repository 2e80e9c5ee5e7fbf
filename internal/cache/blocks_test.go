package cache

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"golang.org/x/sys/unix"

	"github.com/slacker-dev/slacker/internal/blockmap"
	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/store"
	"github.com/slacker-dev/slacker/internal/store/local"
	"github.com/slacker-dev/slacker/internal/testutil"
)

// storeSource fetches chunks from a local store, verified (as package fetch does),
// and counts fetches.
type storeSource struct {
	st *local.Store
	n  atomic.Int64
}

func (s *storeSource) Fetch(ctx context.Context, c blockmap.Chunk) ([]byte, error) {
	s.n.Add(1)
	return store.ReadAllSized(ctx, s.st, c.Digest, c.Size)
}

func (s *storeSource) add(t testing.TB, size int) (blockmap.Chunk, []byte) {
	t.Helper()
	b := make([]byte, size)
	rand.Read(b)
	d := digest.FromBytes(b)
	if err := s.st.Put(context.Background(), d, int64(size), bytes.NewReader(b)); err != nil {
		t.Fatal(err)
	}
	return blockmap.Chunk{Digest: d, Size: int64(size)}, b
}

func newStoreSource(t testing.TB) *storeSource {
	st, err := local.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return &storeSource{st: st}
}

// logBuffer collects a test's log lines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

// flipByte flips one byte of a file in place (the same inode, so a descriptor the
// cache holds open sees it too).
func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x20
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// localModes are the places a chunk's file can be: the cache's disk tier, or the
// local store's object with no disk tier, the store keeping block checksums with
// it (local-store) or not (local-store-unsummed: an object written before it kept
// them, whose first whole read then takes them). The memory tier holds nothing
// (MemBytes 1 is less than any chunk), so every read after the first misses it.
var localModes = []struct {
	name string
	opts func(dir string, src *storeSource) Options
	file func(c *Cache, src *storeSource, d digest.Digest) string
	// unsummed: the store keeps no checksums with its objects when added.
	unsummed bool
	// first is where a chunk's first read comes from, fetches how many fetches it makes.
	first   Origin
	fetches int64
}{
	{name: "disk-tier",
		opts:  func(dir string, src *storeSource) Options { return Options{Dir: dir, MaxBytes: 1 << 30, MemBytes: 1} },
		file:  func(c *Cache, src *storeSource, d digest.Digest) string { return c.path(d) },
		first: FromStore, fetches: 1},
	{name: "local-store",
		opts: func(dir string, src *storeSource) Options {
			return Options{Dir: dir, MaxBytes: 1 << 30, MemBytes: 1, NoDisk: true, StoreFiles: src.st}
		},
		file:  func(c *Cache, src *storeSource, d digest.Digest) string { return src.st.ObjectFile(d) },
		first: FromStoreFile, fetches: 0},
	{name: "local-store-unsummed",
		opts: func(dir string, src *storeSource) Options {
			return Options{Dir: dir, MaxBytes: 1 << 30, MemBytes: 1, NoDisk: true, StoreFiles: src.st}
		},
		file:     func(c *Cache, src *storeSource, d digest.Digest) string { return src.st.ObjectFile(d) },
		unsummed: true, first: FromStore, fetches: 1},
}

// add puts a chunk of size random bytes in src's store, as mode m keeps it.
func (s *storeSource) addAs(t testing.TB, size int, unsummed bool) (blockmap.Chunk, []byte) {
	t.Helper()
	ch, b := s.add(t, size)
	if unsummed {
		if err := unix.Removexattr(s.st.ObjectFile(ch.Digest), "user.slacker.blocksums"); err != nil {
			t.Fatal(err)
		}
		if _, ok := s.st.ObjectSums(ch.Digest); ok {
			t.Fatal("the store still has the object's checksums")
		}
	}
	return ch, b
}

// TestPartialReads: once a chunk was verified whole, reads that miss the memory
// tier read only the 4 KiB blocks they cover from its local file, at any offset and
// length (across block boundaries, into a short last block), with the right bytes,
// counted as partial reads of whole blocks and never fetched again.
func TestPartialReads(t *testing.T) {
	ranges := []struct{ off, n int64 }{
		{0, 4096}, {4096, 4096}, {1, 1}, {4095, 2}, {4000, 8192}, {100, 3 * 4096}, {3*4096 - 7, 1234 + 7},
		{3 * 4096, 1234}, {3*4096 + 1233, 1}, {0, 3*4096 + 1234}, {8191, 4097},
	}
	for _, m := range localModes {
		t.Run(m.name, func(t *testing.T) {
			src := newStoreSource(t)
			c := openCache(t, m.opts(t.TempDir(), src), src)
			ctx := context.Background()
			ch, want := src.addAs(t, 3*4096+1234, m.unsummed) // a short last block
			if o, err := c.ReadChunk(ctx, ch, make([]byte, 10), 5); err != nil || o != m.first {
				t.Fatalf("first read: from %v, err %v; want %v", o, err, m.first)
			}
			c.Flush()
			var blocks int64
			for _, r := range ranges {
				p := make([]byte, r.n)
				o, err := c.ReadChunk(ctx, ch, p, r.off)
				if err != nil || o != FromFile {
					t.Fatalf("read [%d, +%d): from %v, err %v; want file", r.off, r.n, o, err)
				}
				if !bytes.Equal(p, want[r.off:r.off+r.n]) {
					t.Fatalf("read [%d, +%d): wrong bytes", r.off, r.n)
				}
				blocks += min((r.off+r.n+4095)/4096*4096, ch.Size) - r.off/4096*4096
			}
			st := c.Stats()
			reads := int64(len(ranges))
			if m.first == FromStoreFile { // the first read was a partial one too
				reads++
				blocks += 4096
			}
			if src.n.Load() != m.fetches || st.PartialReads != reads || st.PartialBytes != blocks ||
				st.SumMismatches != 0 || st.DiskHits != 0 || st.SumChunks != 1 {
				t.Fatalf("fetches %d, stats %+v; want %d fetches, %d partial reads of %d bytes", src.n.Load(), st, m.fetches, reads, blocks)
			}
			if wantStore := int64(map[bool]int{true: 1}[m.first == FromStoreFile]); st.StoreSums != wantStore ||
				st.InPlaceBytes != wantStore*ch.Size {
				t.Fatalf("stats %+v: %d chunks with the store's checksums, %d bytes in place; want %d and the chunk's",
					st, st.StoreSums, st.InPlaceBytes, wantStore)
			}
		})
	}
}

// TestFlippedByteAfterVerify: a byte flipped in a chunk's local file after the
// chunk was verified is caught by a partial read that covers it and never served:
// from the disk tier the file is dropped and the chunk fetched again (right
// bytes); from a local store, the chunk is loaded whole from the store, which
// reports the damage (an error) until the object is repaired. Reads of blocks the
// damage does not touch are served meanwhile.
func TestFlippedByteAfterVerify(t *testing.T) {
	for _, m := range localModes {
		t.Run(m.name, func(t *testing.T) {
			src := newStoreSource(t)
			logs := &logBuffer{}
			opts := m.opts(t.TempDir(), src)
			opts.Logger = logs.logger()
			c := openCache(t, opts, src)
			ctx := context.Background()
			ch, want := src.addAs(t, 64<<10, m.unsummed)
			if _, err := c.ReadChunk(ctx, ch, make([]byte, 1), 0); err != nil {
				t.Fatal(err)
			}
			c.Flush()
			if o, err := c.ReadChunk(ctx, ch, make([]byte, 4096), 5*4096); err != nil || o != FromFile {
				t.Fatalf("read before the damage: from %v, err %v", o, err) // and the file is now open
			}
			path := m.file(c, src, ch.Digest)
			flipByte(t, path, 5*4096+300)

			// A block the damage does not touch is still served.
			p := make([]byte, 4096)
			if o, err := c.ReadChunk(ctx, ch, p, 0); err != nil || o != FromFile || !bytes.Equal(p, want[:4096]) {
				t.Fatalf("read of an undamaged block: from %v, err %v, right bytes %v", o, err, bytes.Equal(p, want[:4096]))
			}
			p = make([]byte, 6000)
			o, err := c.ReadChunk(ctx, ch, p, 5*4096-100)
			st := c.Stats()
			if st.SumMismatches != 1 || !strings.Contains(logs.String(), "cache-chunk-corrupt") {
				t.Fatalf("stats %+v, log %q: want one mismatch and a cache-chunk-corrupt line", st, logs.String())
			}
			if m.name == "disk-tier" {
				if err != nil || o != FromStore || !bytes.Equal(p, want[5*4096-100:5*4096-100+6000]) {
					t.Fatalf("read of the damaged block: from %v, err %v, right bytes %v; want the chunk fetched again",
						o, err, bytes.Equal(p, want[5*4096-100:5*4096-100+6000]))
				}
				if st.Corrupt != 1 || src.n.Load() != m.fetches+1 {
					t.Fatalf("corrupt %d, fetches %d; want 1 and 2", st.Corrupt, src.n.Load())
				}
				c.Flush()
				if b, err := os.ReadFile(path); err != nil || !bytes.Equal(b, want) {
					t.Fatalf("the disk tier's file after the refetch: err %v, right bytes %v", err, bytes.Equal(b, want))
				}
				if o, err := c.ReadChunk(ctx, ch, p, 5*4096-100); err != nil || o != FromFile {
					t.Fatalf("read after the refetch: from %v, err %v", o, err)
				}
				return
			}
			if !errors.Is(err, errdefs.ErrCorrupt) || bytes.Contains(p, want[5*4096:5*4096+100]) {
				t.Fatalf("read of the damaged block from a local store: err %v, served bytes %v; want corrupt, nothing",
					err, bytes.Contains(p, want[5*4096:5*4096+100]))
			}
			if st.Corrupt != 0 || st.SumChunks != 0 {
				t.Fatalf("stats %+v: want no cache file counted corrupt and the checksums dropped", st)
			}
			// The store's checksums of the object (taken at its Put, or at its first
			// whole read) catch it again at every read: never served.
			for range 2 {
				if _, err := c.ReadChunk(ctx, ch, p, 5*4096-100); !errors.Is(err, errdefs.ErrCorrupt) {
					t.Fatalf("read of the damaged block again: %v; want corrupt", err)
				}
			}
			// Repaired, the chunk is served again, by the block (its checksums taken
			// from the store again: the damage had dropped them).
			flipByte(t, path, 5*4096+300)
			if o, err := c.ReadChunk(ctx, ch, p, 5*4096-100); err != nil || o != FromStoreFile || !bytes.Equal(p, want[5*4096-100:5*4096-100+6000]) {
				t.Fatalf("read after the repair: from %v, err %v", o, err)
			}
		})
	}
}

// TestTruncatedFileAfterVerify: a chunk file cut short after the chunk was
// verified is damage like a flipped byte (the missing blocks are never served as
// zeros).
func TestTruncatedFileAfterVerify(t *testing.T) {
	src := newStoreSource(t)
	c := openCache(t, Options{Dir: t.TempDir(), MaxBytes: 1 << 30, MemBytes: 1}, src)
	ctx := context.Background()
	ch, want := src.add(t, 64<<10)
	if _, err := c.ReadChunk(ctx, ch, make([]byte, 1), 0); err != nil {
		t.Fatal(err)
	}
	c.Flush()
	if err := os.Truncate(c.path(ch.Digest), 10000); err != nil {
		t.Fatal(err)
	}
	p := make([]byte, 8192)
	o, err := c.ReadChunk(ctx, ch, p, 8192)
	if err != nil || o != FromStore || !bytes.Equal(p, want[8192:16384]) {
		t.Fatalf("read past the cut: from %v, err %v, right bytes %v", o, err, bytes.Equal(p, want[8192:16384]))
	}
	if st := c.Stats(); st.SumMismatches != 1 || st.Corrupt != 1 {
		t.Fatalf("stats %+v: want one mismatch, one corrupt file", st)
	}
}

// TestSumEviction: the block checksums of at most SumChunks chunks are kept, least
// recently used evicted; a chunk whose checksums were evicted is loaded whole and
// verified on its next read (so damage to its file is caught there), which takes
// its checksums again.
func TestSumEviction(t *testing.T) {
	src := newStoreSource(t)
	c := openCache(t, Options{Dir: t.TempDir(), MaxBytes: 1 << 30, MemBytes: 1, SumChunks: 2}, src)
	ctx := context.Background()
	var cs []blockmap.Chunk
	var data [][]byte
	for range 3 {
		ch, b := src.add(t, 16<<10)
		cs = append(cs, ch)
		data = append(data, b)
		if _, err := c.ReadChunk(ctx, ch, make([]byte, 1), 0); err != nil {
			t.Fatal(err)
		}
	}
	c.Flush()
	if st := c.Stats(); st.SumChunks != 2 {
		t.Fatalf("%d chunks with checksums, want 2", st.SumChunks)
	}
	p := make([]byte, 4096)
	if o, err := c.ReadChunk(ctx, cs[0], p, 4096); err != nil || o != FromDisk || !bytes.Equal(p, data[0][4096:8192]) {
		t.Fatalf("the chunk whose checksums were evicted: from %v, err %v; want a whole load from disk", o, err)
	}
	if o, err := c.ReadChunk(ctx, cs[0], p, 4096); err != nil || o != FromFile {
		t.Fatalf("its next read: from %v, err %v; want file", o, err)
	}
	// That evicted cs[1]'s; damage to its file is caught by the whole load.
	flipByte(t, c.path(cs[1].Digest), 10)
	if o, err := c.ReadChunk(ctx, cs[1], p, 0); err != nil || o != FromStore || !bytes.Equal(p, data[1][:4096]) {
		t.Fatalf("damaged chunk without checksums: from %v, err %v", o, err)
	}
	if st := c.Stats(); st.SumChunks != 2 || st.Corrupt != 1 || st.SumMismatches != 0 || st.DiskHits != 1 || src.n.Load() != 4 {
		t.Fatalf("stats %+v, fetches %d", st, src.n.Load())
	}
}

// TestNoSumsWithoutLocalFiles: with no disk tier and no local store files there is
// nothing to read blocks from, so no checksums are kept and reads that miss the
// memory tier fetch, as before; a negative SumChunks turns partial reads off.
func TestNoSumsWithoutLocalFiles(t *testing.T) {
	for _, o := range []Options{
		{MaxBytes: 1 << 30, MemBytes: 1, NoDisk: true},
		{MaxBytes: 1 << 30, MemBytes: 1, SumChunks: -1},
	} {
		src := newStoreSource(t)
		o.Dir = t.TempDir()
		c := openCache(t, o, src)
		ch, _ := src.add(t, 16<<10)
		for range 2 {
			if _, err := c.ReadChunk(context.Background(), ch, make([]byte, 1), 0); err != nil {
				t.Fatal(err)
			}
			c.Flush()
		}
		if st := c.Stats(); st.SumChunks != 0 || st.PartialReads != 0 || st.DiskHits+st.Misses != 2 {
			t.Fatalf("options %+v: stats %+v; want no checksums, no partial reads", o, st)
		}
	}
}

// fdsUnder returns the descriptors this process holds open on files under dir.
func fdsUnder(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	var out []string
	for _, e := range ents {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && strings.HasPrefix(target, dir+"/") {
			out = append(out, target)
		}
	}
	return out
}

// TestOpenFilesBounded: the chunk files kept open for partial reads are at most
// OpenFiles, and a chunk leaving the disk tier (eviction, Trim, Purge) closes its
// file, so that no deleted chunk stays pinned on disk by the cache.
func TestOpenFilesBounded(t *testing.T) {
	src := newStoreSource(t)
	dir := t.TempDir()
	c := openCache(t, Options{Dir: dir, MaxBytes: 1 << 30, MemBytes: 1, OpenFiles: 4}, src)
	ctx := context.Background()
	var cs []blockmap.Chunk
	for range 10 {
		ch, _ := src.add(t, 8192)
		cs = append(cs, ch)
		if _, err := c.ReadChunk(ctx, ch, make([]byte, 1), 0); err != nil {
			t.Fatal(err)
		}
	}
	c.Flush()
	for _, ch := range cs {
		if o, err := c.ReadChunk(ctx, ch, make([]byte, 1), 4096); err != nil || o != FromFile {
			t.Fatalf("from %v, err %v", o, err)
		}
	}
	if n, fds := c.files.len(), fdsUnder(t, dir); n != 4 || len(fds) != 4 {
		t.Fatalf("%d files in the LRU, %d descriptors open under the cache; want 4 and 4", n, len(fds))
	}
	if n, _ := c.Trim(0); n != 10 {
		t.Fatalf("trim removed %d chunks, want 10", n)
	}
	if n, fds := c.files.len(), fdsUnder(t, dir); n != 0 || len(fds) != 0 || c.Stats().SumChunks != 0 {
		t.Fatalf("after Trim: %d files in the LRU, descriptors %v, %d chunks with checksums", n, fds, c.Stats().SumChunks)
	}
	for _, ch := range cs[:2] {
		if o, err := c.ReadChunk(ctx, ch, make([]byte, 1), 0); err != nil || o != FromStore {
			t.Fatalf("after Trim: from %v, err %v", o, err)
		}
	}
	c.Flush()
	for _, ch := range cs[:2] {
		if o, err := c.ReadChunk(ctx, ch, make([]byte, 1), 4096); err != nil || o != FromFile {
			t.Fatalf("from %v, err %v", o, err)
		}
	}
	if fds := fdsUnder(t, dir); len(fds) != 2 {
		t.Fatalf("descriptors %v, want 2", fds)
	}
	c.Purge()
	if n, fds := c.files.len(), fdsUnder(t, dir); n != 0 || len(fds) != 0 {
		t.Fatalf("after Purge: %d files in the LRU, descriptors %v", n, fds)
	}
	if st := c.Stats(); st.SumChunks != 0 {
		t.Fatalf("after Purge: %d chunks with checksums", st.SumChunks)
	}
}

// TestOpenFilesRelease: a file forgotten (or pushed out of the LRU) while a reader
// holds it stays readable until that reader releases it, then is closed.
func TestOpenFilesRelease(t *testing.T) {
	dir := t.TempDir()
	o := newOpenFiles(1)
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	os.WriteFile(a, []byte("aaaa"), 0o600)
	os.WriteFile(b, []byte("bbbb"), 0o600)
	fa, err := o.open(a)
	if err != nil {
		t.Fatal(err)
	}
	fb, err := o.open(b) // pushes a out of the LRU
	if err != nil {
		t.Fatal(err)
	}
	o.forget(b)
	buf := make([]byte, 4)
	for _, f := range []*openFile{fa, fb} {
		if _, err := f.readAt(buf, 0); err != nil {
			t.Fatalf("a file held by a reader was closed: %v", err)
		}
		o.release(f)
		// Closed: the descriptor is no longer open (checked at once, before
		// anything could be given its number).
		if _, err := unix.FcntlInt(uintptr(f.fd), unix.F_GETFD, 0); !errors.Is(err, unix.EBADF) {
			t.Fatalf("after its last release: %v; want closed", err)
		}
	}
	o.closeAll()
	if _, err := o.open(a); !errors.Is(err, errFilesClosed) {
		t.Fatalf("open after closeAll: %v", err)
	}
}

// TestPartialReadsConcurrent: many readers of random ranges of many chunks, while
// the disk tier, the checksums and the open files are evicted under them and the
// cache is trimmed, all get the right bytes.
func TestPartialReadsConcurrent(t *testing.T) {
	for _, m := range localModes {
		t.Run(m.name, func(t *testing.T) {
			src := newStoreSource(t)
			o := m.opts(t.TempDir(), src)
			o.MaxBytes, o.MemBytes, o.SumChunks, o.OpenFiles = 6*16<<10, 2*16<<10, 5, 3
			c := openCache(t, o, src)
			var cs []blockmap.Chunk
			want := map[digest.Digest][]byte{}
			for range 12 {
				ch, b := src.addAs(t, 16<<10-512*mrand.IntN(3), m.unsummed) // some with a short last block
				cs = append(cs, ch)
				want[ch.Digest] = b
			}
			ctx := context.Background()
			var wg sync.WaitGroup
			var bad atomic.Int64
			stop := make(chan struct{})
			go func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					c.Trim(3 * 16 << 10)
					c.DropMemory()
					time.Sleep(200 * time.Microsecond)
				}
			}()
			for g := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := mrand.New(mrand.NewPCG(uint64(g), 1))
					for range 400 {
						ch := cs[r.IntN(len(cs))]
						off := r.Int64N(ch.Size)
						n := 1 + r.Int64N(min(ch.Size-off, 3*4096))
						p := make([]byte, n)
						if _, err := c.ReadChunk(ctx, ch, p, off); err != nil {
							t.Error(err)
							return
						}
						if !bytes.Equal(p, want[ch.Digest][off:off+n]) {
							bad.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			close(stop)
			st := c.Stats()
			if bad.Load() != 0 || st.SumMismatches != 0 || st.Corrupt != 0 {
				t.Fatalf("%d reads got wrong bytes; stats %+v", bad.Load(), st)
			}
			if st.PartialReads == 0 || st.SumChunks > 5 || c.files.len() > 3 {
				t.Fatalf("stats %+v, %d open files: want partial reads, bounds kept", st, c.files.len())
			}
		})
	}
}

// BenchmarkReadChunk4KRandom reads 4 KiB at random from 64 chunks of 256 KiB in
// the disk tier, with an empty memory tier: each read loads and verifies its
// whole chunk (whole), or reads and checks one block (blocks).
func BenchmarkReadChunk4KRandom(b *testing.B) {
	for _, bc := range []struct {
		name string
		sums int
	}{{"whole", -1}, {"blocks", 0}} {
		b.Run(bc.name, func(b *testing.B) {
			src := newStoreSource(b)
			c, err := Open(Options{Dir: b.TempDir(), MaxBytes: 1 << 30, MemBytes: 1, SumChunks: bc.sums}, src)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			var cs []blockmap.Chunk
			for range 64 {
				ch, _ := src.add(b, 256<<10)
				cs = append(cs, ch)
				if _, err := c.ReadChunk(ctx, ch, make([]byte, 1), 0); err != nil {
					b.Fatal(err)
				}
			}
			c.Flush()
			p := make([]byte, 4096)
			r := mrand.New(mrand.NewPCG(1, 2))
			b.SetBytes(4096)
			for b.Loop() {
				ch := cs[r.IntN(len(cs))]
				if _, err := c.ReadChunk(ctx, ch, p, int64(r.IntN(64))*4096); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if st := c.Stats(); bc.sums >= 0 && st.PartialReads == 0 {
				b.Fatalf("no partial reads: %+v", st)
			}
		})
	}
}

// TestNoSecondCopyInMemory: a chunk whose bytes are in a local file the cache reads
// by the block keeps no copy in the memory tier once verified (there, it would be
// a second copy of what the page cache above and the file's below already hold:
// 64 containers of one image counted both): with a local store at once, with a
// disk tier once its file is written. Such a chunk counts as cached, so fetching
// ahead skips it; its reads are block reads.
func TestNoSecondCopyInMemory(t *testing.T) {
	for _, m := range localModes {
		t.Run(m.name, func(t *testing.T) {
			src := newStoreSource(t)
			o := m.opts(t.TempDir(), src)
			o.MemBytes = 64 << 20 // room for everything: the tier must choose not to keep it
			c := openCache(t, o, src)
			ch, want := src.addAs(t, 256<<10, m.unsummed)
			got := make([]byte, 4096)
			if _, err := c.ReadChunk(context.Background(), ch, got, 8192); err != nil {
				t.Fatal(err)
			}
			c.Flush()
			if st := c.Stats(); st.MemBytes != 0 || !c.Cached(ch) {
				t.Fatalf("after a verified load: memory tier %d bytes, cached %v; want 0 and true", st.MemBytes, c.Cached(ch))
			}
			o2, err := c.ReadChunk(context.Background(), ch, got, 100<<10)
			if err != nil || o2 != FromFile || !bytes.Equal(got, want[100<<10:104<<10]) || src.n.Load() != m.fetches {
				t.Fatalf("second read: from %v, err %v, %d fetches; want a block read of the right bytes and %d fetches",
					o2, err, src.n.Load(), m.fetches)
			}
		})
	}
}

// TestFirstBlockReadReadsChunkAhead: the first read of a local store's chunk,
// served by the block with the store's checksums, has the kernel read the rest of
// the chunk's file into the page cache in the background (as a whole load used
// to, without waiting for it or hashing it): its neighbours are read soon.
func TestFirstBlockReadReadsChunkAhead(t *testing.T) {
	src := newStoreSource(t)
	c := openCache(t, Options{Dir: t.TempDir(), MaxBytes: 1 << 30, MemBytes: 1, NoDisk: true, StoreFiles: src.st}, src)
	ch, want := src.add(t, 256<<10)
	path := src.st.ObjectFile(ch.Digest)
	resident := func() int { return testutil.ResidentPages(t, path, 0, -1) }
	evict := func() {
		t.Helper()
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			t.Fatal(err)
		}
		if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
			t.Fatal(err)
		}
	}
	evict()
	if n := resident(); n > 4 {
		t.Skipf("the page cache kept %d of the file's pages after FADV_DONTNEED", n)
	}
	p := make([]byte, 4096)
	if o, err := c.ReadChunk(context.Background(), ch, p, 100<<10); err != nil || o != FromStoreFile || !bytes.Equal(p, want[100<<10:104<<10]) {
		t.Fatalf("first read: from %v, err %v", o, err)
	}
	for deadline := time.Now().Add(5 * time.Second); resident() < 64; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of the chunk's 64 pages in the page cache after its first read; want all, read ahead", resident())
		}
	}
	// Later reads of the chunk read no more ahead.
	evict()
	if _, err := c.ReadChunk(context.Background(), ch, p, 0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if n := resident(); n > 16 {
		t.Fatalf("%d pages in the page cache after a later read of one block; want no read ahead of the chunk", n)
	}
}

// TestLoadReadiesLocalStoreChunks: loading ahead a chunk of a local store that
// keeps block checksums reads nothing of it (a replay of a start-up trace there
// used to read and hash every chunk whole, and keep a copy in memory, on the
// start's critical path): the chunk counts as moved from the store once, is
// cached from then on, and its reads are checked block reads, which still refuse
// a flipped byte. A chunk without the store's checksums is loaded whole, as
// before.
func TestLoadReadiesLocalStoreChunks(t *testing.T) {
	src := newStoreSource(t)
	c := openCache(t, Options{Dir: t.TempDir(), MaxBytes: 1 << 30, MemBytes: 64 << 20, NoDisk: true, StoreFiles: src.st}, src)
	ch, want := src.add(t, 256<<10)
	unsummed, _ := src.addAs(t, 256<<10, true)
	got := map[digest.Digest]Origin{}
	c.Load(context.Background(), []blockmap.Chunk{ch, unsummed}, func(x blockmap.Chunk, o Origin, err error) {
		if err != nil {
			t.Errorf("load %s: %v", x.Digest, err)
		}
		got[x.Digest] = o
	})
	if got[ch.Digest] != FromStoreFile || got[unsummed.Digest] != FromStore || src.n.Load() != 1 {
		t.Fatalf("load: summed chunk from %v, unsummed from %v, %d fetches; want store-file, store and 1",
			got[ch.Digest], got[unsummed.Digest], src.n.Load())
	}
	if st := c.Stats(); st.MemBytes != 0 || st.InPlaceBytes != ch.Size || st.Misses != 2 || !c.Cached(ch) {
		t.Fatalf("after the load: %+v, cached %v; want nothing in memory, one chunk in place, two misses", st, c.Cached(ch))
	}
	c.Load(context.Background(), []blockmap.Chunk{ch}, func(x blockmap.Chunk, o Origin, err error) {
		if o != FromMemory || err != nil { // Load's word for "held already"
			t.Errorf("second load: %v, %v", o, err)
		}
	})
	p := make([]byte, 8192)
	if o, err := c.ReadChunk(context.Background(), ch, p, 4096); err != nil || o != FromFile || !bytes.Equal(p, want[4096:12288]) {
		t.Fatalf("read after the load: from %v, err %v", o, err)
	}
	flipByte(t, src.st.ObjectFile(ch.Digest), 20000)
	_, err := c.ReadChunk(context.Background(), ch, p, 16384)
	if err == nil {
		t.Fatal("a flipped byte in the store's file was served")
	}
	if st := c.Stats(); st.SumMismatches != 1 {
		t.Fatalf("stats %+v: want the damaged block counted", st)
	}
}
