package cache

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/opencontainers/go-digest"
	"golang.org/x/sync/singleflight"

	"github.com/slacker-dev/slacker/internal/atomicfile"
	"github.com/slacker-dev/slacker/internal/blockmap"
	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/store"
)

// Source fetches whole chunks. Its contract: what it returns has been verified
// against the chunk's digest (package fetch implements it, over a store whose reads
// are verified). The cache checks the size and trusts the content.
type Source interface {
	Fetch(ctx context.Context, c blockmap.Chunk) ([]byte, error)
}

// Options configure a Cache.
type Options struct {
	Dir      string // chunk files live here
	MaxBytes int64  // disk tier bound (required)
	MemBytes int64  // memory tier bound; 0 means 64 MiB
	// NoDisk keeps no disk tier: right when the store is itself a local directory,
	// where a second copy of each chunk on the same disk only costs writes.
	NoDisk bool
	// StoreFiles, with NoDisk, names the local files of the store's objects (a store
	// that is a local directory): a read that misses the memory tier reads the
	// blocks it needs from there, as it would from the disk tier's files.
	StoreFiles ObjectFiles
	// SumChunks bounds how many chunks' block checksums are kept (evicted least
	// recently used first); 0 means DefaultSumChunks, a negative number none (every
	// read that misses the memory tier then loads its chunk whole). Only chunks
	// read take any: 8 bytes per 4 KiB block plus about 170 bytes each, measured
	// 678 bytes per 256 KiB chunk, i.e. 2.7 MiB per GiB of chunks covered (4.6 MiB
	// per GiB of 64 KiB chunks); the default bound is about 11 MiB.
	SumChunks int
	// OpenFiles bounds how many chunk files are kept open for those reads; 0 means
	// DefaultOpenFiles.
	OpenFiles int
	Logger    *slog.Logger
}

// Stats are the cache's counters.
type Stats struct {
	MemHits      int64 `json:"mem_hits"`
	DiskHits     int64 `json:"disk_hits"`
	Misses       int64 `json:"misses"`
	FetchedBytes int64 `json:"fetched_bytes"`
	Evictions    int64 `json:"evictions"`
	Corrupt      int64 `json:"corrupt"` // cached chunks found corrupt and dropped
	DiskBytes    int64 `json:"disk_bytes"`
	DiskChunks   int   `json:"disk_chunks"`
	MemBytes     int64 `json:"mem_bytes"`
	MaxBytes     int64 `json:"max_bytes"`
	// Reads that missed the memory tier and were served from the 4 KiB blocks
	// they cover, read from a chunk's local file and checked (Origin FromFile),
	// and the bytes they read from those files.
	PartialReads int64 `json:"partial_reads"`
	PartialBytes int64 `json:"partial_bytes"`
	// SumMismatches counts blocks of local chunk files found damaged by those
	// reads (never served; the chunk was loaded whole again).
	SumMismatches int64 `json:"sum_mismatches"`
	SumChunks     int   `json:"sum_chunks"` // chunks whose block checksums are kept
	// StoreSums counts chunks whose block checksums came from the local store
	// (kept with its files), not from a whole read of the chunk.
	StoreSums int64 `json:"store_sums"`
	// InPlaceBytes is the size of the chunks first read in place from a local
	// store's files (FromStoreFile): moved from the store, though not fetched.
	InPlaceBytes int64 `json:"in_place_bytes"`
}

// Cache is safe for concurrent use.
type Cache struct {
	dir     string
	max     int64
	src     Source
	log     *slog.Logger
	sf      singleflight.Group
	tok     atomic.Uint64
	memN    int64
	noDisk  bool
	writes  chan pendingWrite // disk-tier writes, done in the background
	wmu     sync.RWMutex      // sends on writes hold it shared; Close exclusively
	wclosed bool              // writes is closed
	wg      sync.WaitGroup

	mu        sync.Mutex
	disk      map[string]*lruItem // by digest
	probation *lru
	protected *lru
	mem       map[string]*memEntry
	memLRU    *lru
	sums      map[string]*sumEntry // block checksums, by digest
	sumLRU    *lru

	sumN    int         // bound on len(sums); 0: no partial reads
	seed    uint64      // of the block checksums, random per Open
	objects ObjectFiles // with noDisk: the local store's files, or nil
	// storeSums, with objects and block reads, are the checksums the local store
	// keeps with its files (nil if it keeps none).
	storeSums ObjectSums
	files     *openFiles

	memHits, diskHits, misses, fetched, evictions, corrupt           atomic.Int64
	partialReads, partialBytes, sumMismatches, storeSumHits, inPlace atomic.Int64
}

type memEntry struct {
	data []byte
	item *lruItem
}

// Open opens (or creates) the cache directory and indexes the chunks already there.
func Open(opts Options, src Source) (*Cache, error) {
	if opts.MaxBytes <= 0 {
		return nil, fmt.Errorf("open cache: size must be positive")
	}
	if opts.MemBytes <= 0 {
		opts.MemBytes = 64 << 20
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("open cache: %w", err)
	}
	if opts.SumChunks == 0 {
		opts.SumChunks = DefaultSumChunks
	}
	if opts.OpenFiles <= 0 {
		opts.OpenFiles = DefaultOpenFiles()
	}
	c := &Cache{dir: opts.Dir, max: opts.MaxBytes, src: src, log: log, memN: opts.MemBytes, noDisk: opts.NoDisk,
		disk: map[string]*lruItem{}, probation: newLRU(), protected: newLRU(),
		mem: map[string]*memEntry{}, memLRU: newLRU(), writes: make(chan pendingWrite, 64),
		sums: map[string]*sumEntry{}, sumLRU: newLRU(), seed: rand.Uint64(), files: newOpenFiles(opts.OpenFiles)}
	if opts.NoDisk {
		c.objects = opts.StoreFiles
	}
	// Block checksums serve only reads from local files: with no disk tier and no
	// local store files there are none to make.
	if opts.SumChunks > 0 && (!opts.NoDisk || c.objects != nil) {
		c.sumN = opts.SumChunks
	}
	if ss, ok := c.objects.(ObjectSums); ok && c.sumN > 0 {
		c.storeSums = ss
	}
	ents, err := os.ReadDir(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("open cache: %w", err)
	}
	for _, e := range ents {
		name := e.Name()
		if atomicfile.IsTemp(name) || strings.HasPrefix(name, "tmp-") { // "tmp-": this package's own, before atomicfile
			os.Remove(filepath.Join(opts.Dir, name))
			continue
		}
		d := digest.NewDigestFromEncoded(digest.SHA256, name)
		if d.Validate() != nil {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		it := &lruItem{key: d.String(), size: fi.Size()}
		c.disk[it.key] = it
		c.probation.pushFront(it)
	}
	c.mu.Lock()
	c.evictLocked()
	c.mu.Unlock()
	c.wg.Add(1)
	go c.writer()
	return c, nil
}

type pendingWrite struct {
	d     digest.Digest
	data  []byte
	flush chan struct{} // a barrier: closed when every earlier write is done
}

// writer stores fetched chunks in the disk tier off the read path.
func (c *Cache) writer() {
	defer c.wg.Done()
	for w := range c.writes {
		if w.flush != nil {
			close(w.flush)
			continue
		}
		key := w.d.String()
		if err := c.writeFile(w.d, w.data); err != nil {
			c.log.Warn("cache-write-failed", "chunk", w.d, "err", err)
			continue
		}
		c.mu.Lock()
		if _, ok := c.disk[key]; !ok {
			it := &lruItem{key: key, size: int64(len(w.data))}
			c.disk[key] = it
			c.probation.pushFront(it)
			c.evictLocked()
		}
		// Read by the block from its file from now on: its copy in memory goes.
		if _, summed := c.sums[key]; summed && c.sumN > 0 {
			if m, ok := c.mem[key]; ok {
				c.memLRU.remove(m.item)
				delete(c.mem, key)
			}
		}
		c.mu.Unlock()
	}
}

// Flush waits until every chunk queued for the disk tier is written.
func (c *Cache) Flush() {
	c.wmu.RLock()
	if c.wclosed {
		c.wmu.RUnlock()
		return
	}
	done := make(chan struct{})
	c.writes <- pendingWrite{flush: done}
	c.wmu.RUnlock()
	<-done
}

// Close waits for pending disk-tier writes. Loads still in flight (a load runs on
// after the reader that started it gives up) may finish after Close: what they
// bring stays in memory and goes to no disk. The cache must not be used after.
func (c *Cache) Close() {
	c.wmu.Lock()
	if c.wclosed {
		c.wmu.Unlock()
		return
	}
	c.wclosed = true
	close(c.writes)
	c.wmu.Unlock()
	c.wg.Wait()
	c.files.closeAll()
}

func (c *Cache) path(d digest.Digest) string { return filepath.Join(c.dir, d.Encoded()) }

// Origin says where a chunk read or loaded came from.
type Origin int

const (
	FromMemory Origin = iota // the memory tier
	FromDisk                 // the disk tier (verified as it was loaded)
	FromStore                // fetched from the store by this call
	Joined                   // another caller's load, in flight, served it
	// FromFile: only the 4 KiB blocks read were read, from the chunk's disk-tier
	// file or its local store object, each checked against the checksum taken
	// when the chunk was last verified whole (ReadChunk only).
	FromFile
	// FromStoreFile: as FromFile, from a local store's object the cache had not
	// read before, checked against the checksums the store keeps with it; the
	// rest of the chunk is read ahead from the store's file. From Load: such a
	// chunk readied, not read (warmStoreFile). The chunk counts as moved from
	// the store, as a fetch of it would.
	FromStoreFile
)

// Hit reports whether the chunk was served without this call moving it from
// the store.
func (o Origin) Hit() bool { return o != FromStore && o != FromStoreFile }

func (o Origin) String() string {
	switch o {
	case FromMemory:
		return "memory"
	case FromDisk:
		return "disk"
	case FromStore:
		return "store"
	case Joined:
		return "joined"
	case FromFile:
		return "file"
	case FromStoreFile:
		return "store-file"
	}
	return fmt.Sprintf("origin(%d)", int(o))
}

// ReadChunk fills p with bytes [off, off+len(p)) of chunk ch and reports where the
// bytes came from. A chunk in the memory tier serves them from there; a chunk
// verified whole earlier whose file is local (the disk tier's, or the local
// store's with no disk tier) serves the 4 KiB blocks they cover from that file,
// checked against the block checksums taken then (FromFile); otherwise the chunk
// is loaded whole, verified, as Get does.
func (c *Cache) ReadChunk(ctx context.Context, ch blockmap.Chunk, p []byte, off int64) (Origin, error) {
	if off < 0 || off+int64(len(p)) > ch.Size {
		return 0, fmt.Errorf("read [%d, +%d) of chunk %s of %d bytes: %w", off, len(p), ch.Digest, ch.Size, errdefs.ErrInvalid)
	}
	if data, ok := c.fromMemory(ch); ok {
		copy(p, data[off:])
		return FromMemory, nil
	}
	if ok, fresh := c.readBlocks(ch, p, off); ok && fresh {
		return FromStoreFile, nil
	} else if ok {
		return FromFile, nil
	}
	data, o, err := c.Get(ctx, ch)
	if err != nil {
		return 0, err
	}
	copy(p, data[off:])
	return o, nil
}

// fromMemory returns ch from the memory tier, recording the use, if it is there.
func (c *Cache) fromMemory(ch blockmap.Chunk) ([]byte, bool) {
	key := ch.Digest.String()
	c.mu.Lock()
	m, ok := c.mem[key]
	if !ok {
		c.mu.Unlock()
		return nil, false
	}
	c.memLRU.remove(m.item)
	c.memLRU.pushFront(m.item)
	if it, ok := c.disk[key]; ok {
		c.touchLocked(it)
	}
	c.mu.Unlock()
	c.memHits.Add(1)
	return m.data, true
}

type result struct {
	data   []byte
	origin Origin
	leader uint64
}

// Get returns the whole chunk (callers must not modify it) and where it came from.
func (c *Cache) Get(ctx context.Context, ch blockmap.Chunk) (data []byte, o Origin, err error) {
	if data, ok := c.fromMemory(ch); ok {
		return data, FromMemory, nil
	}
	key := ch.Digest.String()
	me := c.tok.Add(1)
	// The load runs detached from one caller's cancellation so that an interrupted
	// reader does not fail the others waiting on the same chunk; the fetcher bounds it.
	ch2 := c.sf.DoChan(key, func() (any, error) {
		return c.load(context.WithoutCancel(ctx), ch, me)
	})
	select {
	case r := <-ch2:
		if r.Err != nil {
			return nil, 0, r.Err
		}
		res := r.Val.(*result)
		if res.leader == me {
			return res.data, res.origin, nil
		}
		return res.data, Joined, nil
	case <-ctx.Done():
		return nil, 0, fmt.Errorf("read chunk %s: %w", ch.Digest, ctx.Err())
	}
}

// load finds ch on disk or fetches it, and puts it in the memory tier.
func (c *Cache) load(ctx context.Context, ch blockmap.Chunk, leader uint64) (*result, error) {
	key := ch.Digest.String()
	c.mu.Lock()
	if m, ok := c.mem[key]; ok { // loaded while we queued
		c.mu.Unlock()
		return &result{data: m.data, origin: FromMemory, leader: leader}, nil
	}
	_, onDisk := c.disk[key]
	c.mu.Unlock()
	if onDisk {
		data, err := os.ReadFile(c.path(ch.Digest))
		if err == nil && int64(len(data)) == ch.Size && store.Verify(ch.Digest, data) == nil {
			c.diskHits.Add(1)
			sums := c.blockSums(data)
			c.mu.Lock()
			if it, ok := c.disk[key]; ok {
				c.touchLocked(it)
			}
			if c.sumN <= 0 { // no block reads: the memory tier serves the reads to come
				c.addMemLocked(key, data)
			}
			c.setSumsLocked(key, ch.Size, c.seed, sums)
			c.mu.Unlock()
			return &result{data: data, origin: FromDisk, leader: leader}, nil
		}
		if err == nil || !errors.Is(err, os.ErrNotExist) {
			c.corrupt.Add(1)
			c.log.Error("cache-chunk-corrupt", "chunk", ch.Digest, "path", c.path(ch.Digest), "err", err,
				"action", "dropped; fetching again from the store")
		}
		c.drop(key)
	}
	data, err := c.src.Fetch(ctx, ch)
	if err != nil {
		return nil, err
	}
	return c.fetchedChunk(ch, data, leader)
}

// fetchedChunk takes in a chunk its Source delivered.
func (c *Cache) fetchedChunk(ch blockmap.Chunk, data []byte, leader uint64) (*result, error) {
	if int64(len(data)) != ch.Size {
		return nil, fmt.Errorf("chunk %s from the store has %d bytes, want %d: object %w", ch.Digest, len(data), ch.Size, errdefs.ErrCorrupt)
	}
	c.misses.Add(1)
	c.fetched.Add(int64(len(data)))
	c.insert(ch.Digest, data)
	return &result{data: data, origin: FromStore, leader: leader}, nil
}

// Cached reports whether the cache holds ch (in memory, on disk, or verified in
// the local store's object file), so that a caller deciding what to load ahead
// can skip it.
func (c *Cache) Cached(ch blockmap.Chunk) bool {
	key := ch.Digest.String()
	c.mu.Lock()
	defer c.mu.Unlock()
	_, inMem := c.mem[key]
	_, onDisk := c.disk[key]
	_, summed := c.sums[key]
	return inMem || onDisk || (summed && c.storeBacked())
}

// Local reports whether ch's bytes are on this machine: in the memory or disk tier,
// or in the local store's object file. Reading it (Get, ReadChunk) then fetches
// nothing, though it may read and verify a file.
func (c *Cache) Local(ch blockmap.Chunk) bool {
	if c.Cached(ch) {
		return true
	}
	if c.noDisk && c.objects != nil {
		if p := c.objects.ObjectFile(ch.Digest); p != "" {
			if fi, err := os.Stat(p); err == nil && fi.Size() == ch.Size {
				return true
			}
		}
	}
	return false
}

// storeBacked reports whether chunks are read by the block from the local store's
// object files: they then need no copy in the memory tier.
func (c *Cache) storeBacked() bool { return c.noDisk && c.objects != nil && c.sumN > 0 }

// BatchLoads reports whether Load of several chunks saves requests (the Source
// can fetch many at once); if not, a caller loading ahead keeps to one chunk per
// Load.
func (c *Cache) BatchLoads() bool {
	bs, ok := c.src.(BatchSource)
	return ok && bs.BatchReads()
}

// BatchSource is an optional ability of a Source: fetching several chunks at once
// (package fetch's FetchMany), which a store may serve with fewer requests. fn is
// called once for each distinct chunk, never concurrently.
type BatchSource interface {
	FetchMany(ctx context.Context, cs []blockmap.Chunk, fn func(c blockmap.Chunk, data []byte, err error))
	// BatchReads reports whether FetchMany saves requests.
	BatchReads() bool
}

// Load brings the chunks of cs that the cache lacks into it and waits for them,
// calling fn once for each distinct chunk with where it came from (FromStore only
// for the chunks this call fetched: a chunk another load was already bringing is
// Joined) or why it could not be had. Chunks the cache holds already are reported
// at once; so are those of a local store read by the block, which are not read
// but readied (FromStoreFile, see warmStoreFile). Through a BatchSource the
// missing chunks go in one batch; otherwise each is fetched on its own, in
// parallel. Every missing chunk is registered as loading before anything is
// fetched, so a reader that misses on one of them from then on waits for this
// load instead of fetching the chunk again. fn is never called concurrently.
func (c *Cache) Load(ctx context.Context, cs []blockmap.Chunk, fn func(ch blockmap.Chunk, o Origin, err error)) {
	var mu sync.Mutex
	report := func(ch blockmap.Chunk, o Origin, err error) {
		mu.Lock()
		defer mu.Unlock()
		fn(ch, o, err)
	}
	var todo []blockmap.Chunk
	seen := map[digest.Digest]bool{}
	for _, ch := range cs {
		if seen[ch.Digest] {
			continue
		}
		seen[ch.Digest] = true
		if c.Cached(ch) {
			report(ch, FromMemory, nil)
			continue
		}
		if ok, took := c.warmStoreFile(ch); ok {
			o := Joined // a reader took it first
			if took {
				o = FromStoreFile
			}
			report(ch, o, nil)
			continue
		}
		todo = append(todo, ch)
	}
	if len(todo) == 0 {
		return
	}
	bs, batch := c.src.(BatchSource)
	if !batch || len(todo) == 1 || !bs.BatchReads() {
		var wg sync.WaitGroup
		for _, ch := range todo {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, o, err := c.Get(ctx, ch)
				report(ch, o, err)
			}()
		}
		wg.Wait()
		return
	}
	c.loadBatch(ctx, bs, todo, report)
}

// loadBatch is Load through a BatchSource: each chunk is registered with the
// singleflight group and waits for its delivery from one FetchMany. If a reader
// is loading one already, its registration joins that load and the batch's copy
// is dropped.
func (c *Cache) loadBatch(ctx context.Context, bs BatchSource, todo []blockmap.Chunk, report func(blockmap.Chunk, Origin, error)) {
	type delivery struct {
		data []byte
		err  error
	}
	results := make(map[digest.Digest]chan delivery, len(todo))
	waits := make([]<-chan singleflight.Result, len(todo))
	me := c.tok.Add(1)
	for i, ch := range todo {
		r := make(chan delivery, 1)
		results[ch.Digest] = r
		waits[i] = c.sf.DoChan(ch.Digest.String(), func() (any, error) {
			d := <-r
			if d.err != nil {
				return nil, d.err
			}
			return c.fetchedChunk(ch, d.data, me)
		})
	}
	bs.FetchMany(ctx, todo, func(ch blockmap.Chunk, data []byte, err error) {
		if r, ok := results[ch.Digest]; ok {
			r <- delivery{data, err}
		}
	})
	for i, w := range waits {
		v := <-w
		if v.Err != nil {
			report(todo[i], 0, v.Err)
			continue
		}
		o := Joined
		if r := v.Val.(*result); r.leader == me {
			o = r.origin
		}
		report(todo[i], o, nil)
	}
}

// Put adds a chunk the caller already holds (e.g. one it just uploaded), verified.
func (c *Cache) Put(ch blockmap.Chunk, data []byte) error {
	if int64(len(data)) != ch.Size {
		return fmt.Errorf("cache put %s: %d bytes, want %d: object %w", ch.Digest, len(data), ch.Size, errdefs.ErrCorrupt)
	}
	if err := store.Verify(ch.Digest, data); err != nil {
		return fmt.Errorf("cache put: %w", err)
	}
	c.mu.Lock()
	_, ok := c.disk[ch.Digest.String()]
	c.mu.Unlock()
	if !ok {
		c.insert(ch.Digest, append([]byte(nil), data...))
		return nil
	}
	sums := c.blockSums(data)
	c.mu.Lock()
	c.setSumsLocked(ch.Digest.String(), ch.Size, c.seed, sums)
	c.mu.Unlock()
	return nil
}

// insert takes in a verified chunk: its block checksums, and its bytes in the
// memory tier until they are in a local file the cache reads by the block (the
// disk tier's, written in the background, or the local store's object, which is
// there already); with block reads off, the memory tier keeps them. When the
// writer is behind, the disk copy is skipped: the chunk can be fetched again.
func (c *Cache) insert(d digest.Digest, data []byte) {
	sums := c.blockSums(data)
	c.mu.Lock()
	if !c.storeBacked() {
		c.addMemLocked(d.String(), data)
	}
	c.setSumsLocked(d.String(), int64(len(data)), c.seed, sums)
	c.mu.Unlock()
	if c.noDisk {
		return
	}
	c.wmu.RLock()
	defer c.wmu.RUnlock()
	if c.wclosed {
		return
	}
	select {
	case c.writes <- pendingWrite{d: d, data: data}:
	default:
		c.log.Debug("cache-write-skipped", "chunk", d, "reason", "disk writer behind")
	}
}

// diskFiles writes chunk files without fsync: after a crash a torn file fails
// verification and is fetched again.
var diskFiles = atomicfile.Writer{NoSync: true}

func (c *Cache) writeFile(d digest.Digest, data []byte) error {
	return diskFiles.WriteFile(c.path(d), data, 0o600)
}

func (c *Cache) addMemLocked(key string, data []byte) {
	if _, ok := c.mem[key]; ok || int64(len(data)) > c.memN {
		return
	}
	it := &lruItem{key: key, size: int64(len(data))}
	c.mem[key] = &memEntry{data: data, item: it}
	c.memLRU.pushFront(it)
	for c.memLRU.bytes > c.memN {
		old := c.memLRU.back()
		c.memLRU.remove(old)
		delete(c.mem, old.key)
	}
}

// touchLocked records a use: a second use promotes a chunk to the protected segment.
func (c *Cache) touchLocked(it *lruItem) {
	seg := it.seg
	seg.remove(it)
	c.protected.pushFront(it)
	// The protected segment holds at most 80% of the cache; its coldest chunks
	// go back to probation.
	for c.protected.bytes > c.max*8/10 {
		old := c.protected.back()
		c.protected.remove(old)
		c.probation.pushFront(old)
	}
}

func (c *Cache) evictLocked() {
	for c.probation.bytes+c.protected.bytes > c.max {
		victim := c.probation.back()
		if victim == nil {
			victim = c.protected.back()
		}
		if victim == nil {
			return
		}
		c.removeDiskLocked(victim)
		c.evictions.Add(1)
	}
}

// removeDiskLocked takes a chunk out of the disk tier: its file, its open
// descriptor and its block checksums (which only served reads of that file).
func (c *Cache) removeDiskLocked(it *lruItem) {
	it.seg.remove(it)
	delete(c.disk, it.key)
	p := c.path(digest.Digest(it.key))
	os.Remove(p)
	c.files.forget(p)
	c.dropSumsLocked(it.key)
}

func (c *Cache) drop(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if it, ok := c.disk[key]; ok {
		c.removeDiskLocked(it)
		return
	}
	p := c.path(digest.Digest(key))
	os.Remove(p)
	c.files.forget(p)
}

// Stats returns the cache's counters.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Stats{
		MemHits: c.memHits.Load(), DiskHits: c.diskHits.Load(), Misses: c.misses.Load(),
		FetchedBytes: c.fetched.Load(), Evictions: c.evictions.Load(), Corrupt: c.corrupt.Load(),
		DiskBytes: c.probation.bytes + c.protected.bytes, DiskChunks: len(c.disk),
		MemBytes: c.memLRU.bytes, MaxBytes: c.max,
		PartialReads: c.partialReads.Load(), PartialBytes: c.partialBytes.Load(),
		SumMismatches: c.sumMismatches.Load(), SumChunks: len(c.sums), StoreSums: c.storeSumHits.Load(),
		InPlaceBytes: c.inPlace.Load(),
	}
}

// DropMemory empties the memory tier (benchmarks use it to measure a cold read
// from the disk tier). The block checksums stay: reads that miss the memory tier
// read the blocks they need from the chunks' files, as they would after eviction.
func (c *Cache) DropMemory() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mem = map[string]*memEntry{}
	c.memLRU = newLRU()
}

// Purge empties both tiers and forgets every block checksum it took, so that
// every chunk is loaded whole and verified again (but for a local store's chunks
// with checksums of the store's own, which are read by the block: ObjectSums).
// Chunks being read stay readable by those readers.
func (c *Cache) Purge() {
	c.Flush()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, it := range c.disk {
		c.removeDiskLocked(it)
	}
	c.mem = map[string]*memEntry{}
	c.memLRU = newLRU()
	c.sums = map[string]*sumEntry{}
	c.sumLRU = newLRU()
	c.files.forgetAll()
}

// Trim evicts the disk tier's coldest chunks until it holds at most keep bytes,
// and returns how many chunks and bytes it removed. Every chunk can be fetched
// again; chunks being read stay readable by those readers.
func (c *Cache) Trim(keep int64) (chunks int, bytes int64) {
	c.Flush()
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.probation.bytes+c.protected.bytes > max(keep, 0) {
		victim := c.probation.back()
		if victim == nil {
			victim = c.protected.back()
		}
		if victim == nil {
			break
		}
		c.removeDiskLocked(victim)
		c.evictions.Add(1)
		chunks++
		bytes += victim.size
	}
	return chunks, bytes
}
