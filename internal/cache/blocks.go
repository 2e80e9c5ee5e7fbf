package cache

import (
	"errors"
	"io"
	"io/fs"

	"github.com/opencontainers/go-digest"
	"github.com/zeebo/xxh3"
	"golang.org/x/sys/unix"

	"github.com/slacker-dev/slacker/internal/blockmap"
	"github.com/slacker-dev/slacker/internal/store"
)

// sumBlock is the unit of the block checksums: the block of the filesystems the
// cache serves (ext4 over a loop device reads 4 KiB blocks), which is the
// store's.
const sumBlock = blockmap.BlockSize

var _ [sumBlock - store.SumBlock]struct{} // the two are one size
var _ [store.SumBlock - sumBlock]struct{}

// DefaultSumChunks is how many chunks' block checksums a cache keeps unless told:
// 4 GiB of 256 KiB chunks, in about 11 MiB of memory (see Options.SumChunks).
const DefaultSumChunks = 16384

// DefaultOpenFiles is how many chunk files a cache keeps open unless told: a
// quarter of the process's descriptor limit, between 256 and 8192. A random reader
// over more chunks than that opens a file per read it misses (a few µs).
func DefaultOpenFiles() int {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return 256
	}
	return int(min(max(rl.Cur/4, 256), 8192))
}

// ObjectFiles is an optional ability of the store behind the cache's Source (found
// by type assertion where the cache is opened; package store/local has it): the
// local file holding an object's bytes exactly as stored, for a reader that checks
// what it reads itself. The file may be missing, and its bytes are not verified.
type ObjectFiles interface {
	ObjectFile(d digest.Digest) string
}

// ObjectSums is an optional ability of a store with ObjectFiles (package
// store/local has it): block checksums it keeps with an object's file, taken from
// bytes that had just matched the object's digest. With them, the first read of a
// chunk in a local store reads only the blocks it needs, as later ones do, instead
// of loading the chunk whole to verify it.
type ObjectSums interface {
	ObjectSums(d digest.Digest) (store.BlockSums, bool)
}

// sumEntry holds the checksums of the 4 KiB blocks of one chunk, taken when the
// chunk was verified whole against its digest (by this cache, seeded with its
// seed, or by the local store, with a seed of its own). sums is never modified.
type sumEntry struct {
	size int64
	seed uint64
	sums []uint64
	item *lruItem // in Cache.sumLRU, size 1
	// object is the local store's file of the chunk, once looked up (with no disk
	// tier): kept so that a random reader does not build the path on every read.
	object string
}

// blockSums returns the checksums of data's 4 KiB blocks (the last may be
// shorter), or nil when the cache makes no partial reads.
func (c *Cache) blockSums(data []byte) []uint64 {
	if c.sumN <= 0 {
		return nil
	}
	return store.SumBlocks(data, c.seed)
}

// setSumsLocked keeps the block checksums of a chunk just verified whole, taken
// with seed.
func (c *Cache) setSumsLocked(key string, size int64, seed uint64, sums []uint64) {
	if sums == nil {
		return
	}
	if s, ok := c.sums[key]; ok {
		c.sumLRU.remove(s.item)
		c.sumLRU.pushFront(s.item)
		return
	}
	it := &lruItem{key: key, size: 1}
	c.sums[key] = &sumEntry{size: size, seed: seed, sums: sums, item: it}
	c.sumLRU.pushFront(it)
	for c.sumLRU.bytes > int64(c.sumN) {
		c.dropSumsLocked(c.sumLRU.back().key)
	}
}

func (c *Cache) dropSumsLocked(key string) {
	if s, ok := c.sums[key]; ok {
		c.sumLRU.remove(s.item)
		delete(c.sums, key)
	}
}

// readBlocks fills p with bytes [off, off+len(p)) of ch read from a local file of
// the chunk (its disk-tier file, or with no disk tier the local store's object),
// only the 4 KiB blocks p covers, each checked against the checksum taken when the
// chunk was last verified whole (or kept by the local store). It reports false,
// with p's content undefined, when it cannot: no checksums, no file, a read error,
// or damage (which it logs, counts and cleans up). The caller then loads the chunk
// whole and verifies it. fresh says the checksums were just taken from the store:
// the chunk's first read.
func (c *Cache) readBlocks(ch blockmap.Chunk, p []byte, off int64) (ok, fresh bool) {
	if c.sumN <= 0 || len(p) == 0 {
		return false, false
	}
	key := ch.Digest.String()
	c.mu.Lock()
	s, ok := c.sums[key]
	if !ok && c.storeSums != nil {
		c.mu.Unlock()
		if bs, found := c.storeSums.ObjectSums(ch.Digest); found && bs.Size == ch.Size {
			c.mu.Lock()
			if _, taken := c.sums[key]; !taken { // else another reader took them meanwhile
				c.setSumsLocked(key, bs.Size, bs.Seed, bs.Sums)
				c.storeSumHits.Add(1)
				fresh = true
			}
		} else {
			c.mu.Lock()
		}
		s, ok = c.sums[key]
	}
	if !ok || s.size != ch.Size {
		c.mu.Unlock()
		return false, false
	}
	path, onDisk := "", false
	if it, ok := c.disk[key]; ok {
		path, onDisk = c.path(ch.Digest), true
		c.touchLocked(it)
	} else if c.noDisk && c.objects != nil {
		if s.object == "" {
			s.object = c.objects.ObjectFile(ch.Digest)
		}
		path = s.object
	}
	if path == "" {
		c.mu.Unlock()
		return false, false
	}
	c.sumLRU.remove(s.item)
	c.sumLRU.pushFront(s.item)
	sums, seed := s.sums, s.seed
	c.mu.Unlock()

	first := off / sumBlock
	start := first * sumBlock
	end := min((off+int64(len(p))+sumBlock-1)/sumBlock*sumBlock, ch.Size)
	buf := p // read in place when p is whole blocks (the usual 4 KiB-aligned read)
	inPlace := start == off && end-start == int64(len(p))
	if !inPlace {
		buf = make([]byte, end-start)
	}
	of, err := c.files.open(path)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, errFilesClosed) {
			c.log.Warn("cache-file-open-failed", "chunk", ch.Digest, "path", path, "err", err)
		}
		return false, false // gone (evicted, collected): a whole load finds out
	}
	if fresh {
		// The rest of the chunk is likely read soon (it holds the neighbours of
		// these blocks in the image): the kernel reads it ahead into the page
		// cache while this read waits only for its own blocks, as a whole load
		// of the chunk did, but without holding this read for it or hashing it.
		unix.Fadvise(of.fd, 0, ch.Size, unix.FADV_WILLNEED)
	}
	n, err := of.readAt(buf, start)
	c.files.release(of)
	if err != nil && !errors.Is(err, io.EOF) {
		clear(buf) // nothing unchecked is left in the caller's buffer
		c.log.Warn("cache-file-read-failed", "chunk", ch.Digest, "path", path, "offset", start, "err", err,
			"action", "loading the chunk whole")
		return false, false
	}
	bad := int64(-1)
	if n < len(buf) { // a file shorter than its chunk
		bad = first + int64(n)/sumBlock
	}
	for i := int64(0); bad < 0 && i*sumBlock < int64(len(buf)); i++ {
		b := buf[i*sumBlock : min((i+1)*sumBlock, int64(len(buf)))]
		if xxh3.HashSeed(b, seed) != sums[first+i] {
			bad = first + i
		}
	}
	if bad >= 0 {
		clear(buf)
		c.blocksDamaged(ch, path, onDisk, bad)
		return false, false
	}
	if !inPlace {
		copy(p, buf[off-start:])
	}
	c.partialReads.Add(1)
	c.partialBytes.Add(int64(len(buf)))
	if fresh {
		c.misses.Add(1)
		c.inPlace.Add(ch.Size)
	}
	return true, fresh
}

// warmStoreFile readies ch, a chunk of a local store read by the block, without
// reading it: its block checksums taken from the store (as its first read would
// take them) and the kernel asked to read its object file into the page cache,
// in the background. Loading such a chunk whole, to hash it and hold a copy in
// memory, would cost a fetch's CPU for bytes already on the node, on a start's
// critical path. It reports false when it cannot (the store keeps no checksums
// of ch, or its file is gone); the caller then loads ch whole. took says this
// call took the checksums: the chunk's first use, which counts as a move from
// the store (FromStoreFile) as readBlocks counts one.
func (c *Cache) warmStoreFile(ch blockmap.Chunk) (ok, took bool) {
	if !c.storeBacked() || c.storeSums == nil {
		return false, false
	}
	key := ch.Digest.String()
	c.mu.Lock()
	_, known := c.sums[key]
	c.mu.Unlock()
	if !known {
		bs, found := c.storeSums.ObjectSums(ch.Digest)
		if !found || bs.Size != ch.Size {
			return false, false
		}
		c.mu.Lock()
		if _, taken := c.sums[key]; !taken { // else a reader took them meanwhile
			c.setSumsLocked(key, bs.Size, bs.Seed, bs.Sums)
			c.storeSumHits.Add(1)
			took = true
		}
		c.mu.Unlock()
	}
	c.mu.Lock()
	s, known := c.sums[key]
	if known && s.object == "" {
		s.object = c.objects.ObjectFile(ch.Digest)
	}
	path := ""
	if known && s.size == ch.Size {
		path = s.object
	}
	c.mu.Unlock()
	if path == "" {
		return false, false
	}
	of, err := c.files.open(path)
	if err != nil {
		return false, false // gone: a whole load finds out, and says so
	}
	unix.Fadvise(of.fd, 0, ch.Size, unix.FADV_WILLNEED)
	c.files.release(of)
	if took {
		c.misses.Add(1)
		c.inPlace.Add(ch.Size)
	}
	return true, took
}

// blocksDamaged handles a block of a chunk file that no longer matches its
// checksum: the chunk's checksums go, and its disk-tier file with them (a local
// store's object is the store's to repair); the caller loads the chunk whole.
func (c *Cache) blocksDamaged(ch blockmap.Chunk, path string, onDisk bool, block int64) {
	c.sumMismatches.Add(1)
	key := ch.Digest.String()
	c.mu.Lock()
	c.dropSumsLocked(key)
	c.mu.Unlock()
	action := "checksums dropped; loading the chunk whole from the store, verified"
	if onDisk {
		c.corrupt.Add(1)
		c.drop(key)
		action = "file dropped; fetching the chunk again from the store"
	} else {
		c.files.forget(path)
	}
	c.log.Error("cache-chunk-corrupt", "chunk", ch.Digest, "path", path, "offset", block*sumBlock,
		"err", "a 4 KiB block no longer matches the checksum taken when the chunk was verified", "action", action)
}
