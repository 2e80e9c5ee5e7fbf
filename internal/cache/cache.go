package cache

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/opencontainers/go-digest"
	"golang.org/x/sync/singleflight"

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
	// Prefetches bounds the background prefetches at once (64): enough to keep a
	// sequential reader's readahead window (16 MiB of 256 KiB chunks) in flight.
	Prefetches int
	Logger     *slog.Logger
}

// Stats are the cache's counters.
type Stats struct {
	MemHits      int64 `json:"mem_hits"`
	DiskHits     int64 `json:"disk_hits"`
	Misses       int64 `json:"misses"`
	FetchedBytes int64 `json:"fetched_bytes"`
	Evictions    int64 `json:"evictions"`
	Corrupt      int64 `json:"corrupt"`    // cached chunks found corrupt and dropped
	Prefetched   int64 `json:"prefetched"` // chunks fetched ahead of a sequential reader
	DiskBytes    int64 `json:"disk_bytes"`
	DiskChunks   int   `json:"disk_chunks"`
	MemBytes     int64 `json:"mem_bytes"`
	MaxBytes     int64 `json:"max_bytes"`
}

// Cache is safe for concurrent use.
type Cache struct {
	dir      string
	max      int64
	src      Source
	log      *slog.Logger
	sf       singleflight.Group
	tok      atomic.Uint64
	memN     int64
	noDisk   bool
	prefetch chan struct{}  // slots for background prefetches
	pfMu     sync.Mutex     // guards closed against pfWG.Add
	pfWG     sync.WaitGroup // running prefetches
	closed   bool
	writes   chan pendingWrite // disk-tier writes, done in the background
	wg       sync.WaitGroup

	mu        sync.Mutex
	disk      map[string]*lruItem // by digest
	probation *lru
	protected *lru
	mem       map[string]*memEntry
	memLRU    *lru

	memHits, diskHits, misses, fetched, evictions, corrupt, prefetched atomic.Int64
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
	c := &Cache{dir: opts.Dir, max: opts.MaxBytes, src: src, log: log, memN: opts.MemBytes, noDisk: opts.NoDisk,
		disk: map[string]*lruItem{}, probation: newLRU(), protected: newLRU(),
		mem: map[string]*memEntry{}, memLRU: newLRU(), writes: make(chan pendingWrite, 64),
		prefetch: make(chan struct{}, cmp.Or(max(opts.Prefetches, 0), 64))}
	ents, err := os.ReadDir(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("open cache: %w", err)
	}
	for _, e := range ents {
		name := e.Name()
		if strings.HasPrefix(name, "tmp-") {
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
		c.mu.Unlock()
	}
}

// Flush waits until every chunk queued for the disk tier is written.
func (c *Cache) Flush() {
	done := make(chan struct{})
	c.writes <- pendingWrite{flush: done}
	<-done
}

// Close waits for prefetches and pending disk-tier writes. The cache must not be
// used after.
func (c *Cache) Close() {
	c.pfMu.Lock()
	if c.closed {
		c.pfMu.Unlock()
		return
	}
	c.closed = true
	c.pfMu.Unlock()
	c.pfWG.Wait()
	close(c.writes)
	c.wg.Wait()
}

func (c *Cache) path(d digest.Digest) string { return filepath.Join(c.dir, d.Encoded()) }

// ReadChunk fills p with bytes [off, off+len(p)) of chunk ch. It reports whether the
// cache had the chunk and how many bytes this call fetched from the store.
func (c *Cache) ReadChunk(ctx context.Context, ch blockmap.Chunk, p []byte, off int64) (hit bool, fetched int64, err error) {
	if off < 0 || off+int64(len(p)) > ch.Size {
		return false, 0, fmt.Errorf("read [%d, +%d) of chunk %s of %d bytes: %w", off, len(p), ch.Digest, ch.Size, errdefs.ErrInvalid)
	}
	data, hit, fetched, err := c.Get(ctx, ch)
	if err != nil {
		return false, 0, err
	}
	copy(p, data[off:])
	return hit, fetched, nil
}

type result struct {
	data    []byte
	hit     bool
	fetched int64
	leader  uint64
}

// Get returns the whole chunk (callers must not modify it).
func (c *Cache) Get(ctx context.Context, ch blockmap.Chunk) (data []byte, hit bool, fetched int64, err error) {
	key := ch.Digest.String()
	c.mu.Lock()
	if m, ok := c.mem[key]; ok {
		c.memLRU.remove(m.item)
		c.memLRU.pushFront(m.item)
		if it, ok := c.disk[key]; ok {
			c.touchLocked(it)
		}
		c.mu.Unlock()
		c.memHits.Add(1)
		return m.data, true, 0, nil
	}
	c.mu.Unlock()
	me := c.tok.Add(1)
	// The load runs detached from one caller's cancellation so that an interrupted
	// reader does not fail the others waiting on the same chunk; the fetcher bounds it.
	ch2 := c.sf.DoChan(key, func() (any, error) {
		return c.load(context.WithoutCancel(ctx), ch, me)
	})
	select {
	case r := <-ch2:
		if r.Err != nil {
			return nil, false, 0, r.Err
		}
		res := r.Val.(*result)
		if res.leader == me {
			return res.data, res.hit, res.fetched, nil
		}
		return res.data, true, 0, nil // another reader's load served us
	case <-ctx.Done():
		return nil, false, 0, fmt.Errorf("read chunk %s: %w", ch.Digest, ctx.Err())
	}
}

// load finds ch on disk or fetches it, and puts it in the memory tier.
func (c *Cache) load(ctx context.Context, ch blockmap.Chunk, leader uint64) (*result, error) {
	key := ch.Digest.String()
	c.mu.Lock()
	if m, ok := c.mem[key]; ok { // loaded while we queued
		c.mu.Unlock()
		return &result{data: m.data, hit: true, leader: leader}, nil
	}
	_, onDisk := c.disk[key]
	c.mu.Unlock()
	if onDisk {
		data, err := os.ReadFile(c.path(ch.Digest))
		if err == nil && int64(len(data)) == ch.Size && store.Verify(ch.Digest, data) == nil {
			c.diskHits.Add(1)
			c.mu.Lock()
			if it, ok := c.disk[key]; ok {
				c.touchLocked(it)
			}
			c.addMemLocked(key, data)
			c.mu.Unlock()
			return &result{data: data, hit: true, leader: leader}, nil
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
	return &result{data: data, fetched: int64(len(data)), leader: leader}, nil
}

// Prefetch loads chunks into the cache in the background. Chunks already cached
// or loading are skipped, and so are chunks beyond the prefetches allowed at once:
// prefetch never queues work or blocks the caller. It returns how many of the
// leading chunks of cs are cached or on their way. fetched, if set, is called with
// the bytes each load moved from the store.
func (c *Cache) Prefetch(cs []blockmap.Chunk, fetched func(n int64)) int {
	if bs, ok := c.src.(BatchSource); ok && len(cs) > 1 && bs.BatchReads() {
		if c.prefetchBatch(bs, cs, fetched) {
			return len(cs)
		}
		return 0
	}
	for i, ch := range cs {
		key := ch.Digest.String()
		c.mu.Lock()
		_, inMem := c.mem[key]
		_, onDisk := c.disk[key]
		c.mu.Unlock()
		if inMem || onDisk {
			continue
		}
		select {
		case c.prefetch <- struct{}{}:
		default:
			return i
		}
		c.pfMu.Lock()
		if c.closed {
			c.pfMu.Unlock()
			<-c.prefetch
			return i
		}
		c.pfWG.Add(1)
		c.pfMu.Unlock()
		go func() {
			defer func() { <-c.prefetch; c.pfWG.Done() }()
			me := c.tok.Add(1)
			v, err, _ := c.sf.Do(key, func() (any, error) { return c.load(context.Background(), ch, me) })
			if err != nil {
				return
			}
			if r := v.(*result); r.leader == me && r.fetched > 0 {
				c.prefetched.Add(1)
				if fetched != nil {
					fetched(r.fetched)
				}
			}
		}()
	}
	return len(cs)
}

// BatchSource is an optional ability of a Source: fetching several chunks at once
// (package fetch's FetchMany), which a store may serve with fewer requests. fn is
// called once for each distinct chunk, never concurrently.
type BatchSource interface {
	FetchMany(ctx context.Context, cs []blockmap.Chunk, fn func(c blockmap.Chunk, data []byte, err error))
	// BatchReads reports whether FetchMany saves requests; if not, Prefetch keeps
	// to one fetch per chunk.
	BatchReads() bool
}

// prefetchBatch is Prefetch through a BatchSource: the chunks not cached go in one
// background batch, taking one prefetch slot. Each is registered with the
// singleflight group, so a reader that misses on one of them waits for the batch
// instead of fetching it again.
func (c *Cache) prefetchBatch(bs BatchSource, cs []blockmap.Chunk, fetched func(n int64)) bool {
	var todo []blockmap.Chunk
	seen := map[digest.Digest]bool{}
	c.mu.Lock()
	for _, ch := range cs {
		key := ch.Digest.String()
		_, inMem := c.mem[key]
		_, onDisk := c.disk[key]
		if !inMem && !onDisk && !seen[ch.Digest] {
			seen[ch.Digest] = true
			todo = append(todo, ch)
		}
	}
	c.mu.Unlock()
	if len(todo) == 0 {
		return true
	}
	select {
	case c.prefetch <- struct{}{}:
	default:
		return false
	}
	c.pfMu.Lock()
	if c.closed {
		c.pfMu.Unlock()
		<-c.prefetch
		return false
	}
	c.pfWG.Add(1)
	c.pfMu.Unlock()
	type delivery struct {
		data []byte
		err  error
	}
	results := make(map[digest.Digest]chan delivery, len(todo))
	waits := make([]<-chan singleflight.Result, len(todo))
	me := c.tok.Add(1)
	// Registered before returning, so a reader that misses on one of these chunks
	// from now on joins the batch. If a reader is loading one already, DoChan joins
	// that load and the batch's copy is dropped.
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
	go func() {
		defer func() { <-c.prefetch; c.pfWG.Done() }()
		bs.FetchMany(context.Background(), todo, func(ch blockmap.Chunk, data []byte, err error) {
			if r, ok := results[ch.Digest]; ok {
				r <- delivery{data, err}
			}
		})
		for _, w := range waits {
			v := <-w
			if v.Err != nil {
				continue
			}
			if r := v.Val.(*result); r.leader == me && r.fetched > 0 {
				c.prefetched.Add(1)
				if fetched != nil {
					fetched(r.fetched)
				}
			}
		}
	}()
	return true
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
	}
	return nil
}

// insert puts data in the memory tier and queues it for the disk tier. When the
// writer is behind, the disk copy is skipped: the chunk can be fetched again.
func (c *Cache) insert(d digest.Digest, data []byte) {
	c.mu.Lock()
	c.addMemLocked(d.String(), data)
	c.mu.Unlock()
	if c.noDisk {
		return
	}
	select {
	case c.writes <- pendingWrite{d: d, data: data}:
	default:
		c.log.Debug("cache-write-skipped", "chunk", d, "reason", "disk writer behind")
	}
}

func (c *Cache) writeFile(d digest.Digest, data []byte) error {
	f, err := os.CreateTemp(c.dir, "tmp-*")
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(f.Name())
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return err
	}
	// No fsync: after a crash a torn file fails verification and is fetched again.
	if err := os.Rename(f.Name(), c.path(d)); err != nil {
		os.Remove(f.Name())
		return err
	}
	return nil
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
		victim.seg.remove(victim)
		delete(c.disk, victim.key)
		os.Remove(c.path(digest.Digest(victim.key)))
		c.evictions.Add(1)
	}
}

func (c *Cache) drop(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if it, ok := c.disk[key]; ok {
		it.seg.remove(it)
		delete(c.disk, key)
	}
	os.Remove(c.path(digest.Digest(key)))
}

// Stats returns the cache's counters.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Stats{
		MemHits: c.memHits.Load(), DiskHits: c.diskHits.Load(), Misses: c.misses.Load(),
		FetchedBytes: c.fetched.Load(), Evictions: c.evictions.Load(), Corrupt: c.corrupt.Load(), Prefetched: c.prefetched.Load(),
		DiskBytes: c.probation.bytes + c.protected.bytes, DiskChunks: len(c.disk),
		MemBytes: c.memLRU.bytes, MaxBytes: c.max,
	}
}

// DropMemory empties the memory tier (benchmarks use it to measure a cold read
// from the disk tier).
func (c *Cache) DropMemory() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mem = map[string]*memEntry{}
	c.memLRU = newLRU()
}

// Purge empties both tiers. Chunks being read stay readable by those readers.
func (c *Cache) Purge() {
	c.Flush()
	c.mu.Lock()
	defer c.mu.Unlock()
	for key, it := range c.disk {
		it.seg.remove(it)
		delete(c.disk, key)
		os.Remove(c.path(digest.Digest(key)))
	}
	c.mem = map[string]*memEntry{}
	c.memLRU = newLRU()
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
		victim.seg.remove(victim)
		delete(c.disk, victim.key)
		os.Remove(c.path(digest.Digest(victim.key)))
		c.evictions.Add(1)
		chunks++
		bytes += victim.size
	}
	return chunks, bytes
}
