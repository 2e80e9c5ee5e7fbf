package volume

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/opencontainers/go-digest"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"

	"github.com/slacker-dev/slacker/internal/blockmap"
	"github.com/slacker-dev/slacker/internal/errdefs"
)

// BlockSize is the copy-on-write unit.
const BlockSize = blockmap.BlockSize

// ErrClosed: the volume was closed or deleted. It is no errdefs kind: no edge
// answers it differently from any other failure (FUSE gives EIO). A range outside
// the volume is errdefs.ErrOutOfRange (FUSE gives ENOSPC).
var ErrClosed = errors.New("volume closed")

// ChunkReader reads verified bytes of base chunks. The node's chunk cache implements
// it. Implementations must be safe for concurrent use.
type ChunkReader interface {
	// ReadChunk fills p with bytes [off, off+len(p)) of chunk c, and reports
	// whether they were already cached and how many bytes it fetched to serve them.
	ReadChunk(ctx context.Context, c blockmap.Chunk, p []byte, off int64) (hit bool, fetched int64, err error)
}

// Prefetcher is an optional ability of a ChunkReader: start loading chunks in the
// background, without waiting, calling fetched with the bytes each load moved. It
// returns how many of the leading chunks are cached or on their way (it may take
// fewer than asked when busy).
type Prefetcher interface {
	Prefetch(cs []blockmap.Chunk, fetched func(n int64)) int
}

// maxReadaheadBytes bounds what is fetched ahead of a sequential reader: 16 MiB
// keeps a 1 Gbit/s link with a 50 ms round trip busy (its bandwidth-delay product
// is 6 MB; docs/BENCHMARKS.md) and is a quarter of the default memory tier.
const maxReadaheadBytes = 16 << 20

// Meta is the persistent record of a volume (volume.json).
type Meta struct {
	Version int           `json:"version"`
	Base    digest.Digest `json:"base,omitempty"` // base snapshot; empty for a blank volume
	Size    int64         `json:"size"`
	Created time.Time     `json:"created"`
}

const metaVersion = 1

// Stats are a volume's counters since it was opened.
type Stats struct {
	ReadBytes     int64 `json:"read_bytes"`      // bytes read by the guest
	WrittenBytes  int64 `json:"written_bytes"`   // bytes written by the guest
	BaseReadBytes int64 `json:"base_read_bytes"` // bytes read from the base snapshot (not holes)
	FetchedBytes  int64 `json:"fetched_bytes"`   // bytes fetched from the store for this volume
	CacheHits     int64 `json:"cache_hits"`      // base chunk reads served by the node cache
	CacheMisses   int64 `json:"cache_misses"`    // base chunk reads that fetched from the store
	DeltaBytes    int64 `json:"delta_bytes"`     // bytes of blocks present in the delta
	DeltaRuns     int64 `json:"delta_runs"`      // runs of the delta's block set (metadata size)
	// BaseReadRuns are the blocks read from the base snapshot, as sorted, disjoint
	// half-open runs of block numbers [start, end) (BlockSize units): which of the
	// image a container read, e.g. to compare two runs. At most MaxReadRuns runs are
	// kept; BaseReadRunsTruncated says that later reads were not recorded.
	BaseReadRuns          [][2]int64 `json:"base_read_runs,omitempty"`
	BaseReadRunsTruncated bool       `json:"base_read_runs_truncated,omitempty"`
}

// MaxReadRuns bounds the runs of base blocks read that a volume records (about 16
// bytes each), so a volume read at random cannot grow its record without bound.
var MaxReadRuns = 16384

// Volume is an open writable volume. All methods are safe for concurrent use.
type Volume struct {
	dir    string
	meta   Meta
	base   *blockmap.Map
	chunks ChunkReader
	data   *os.File

	mu      sync.Mutex // guards present, pending
	present *runSet    // blocks whose current content is in the data file
	pending []run      // runs written since the last Sync

	syncMu  sync.Mutex // serializes Sync; guards journal, synced, records
	journal *os.File
	synced  *runSet // runs recorded in the journal
	records int

	writeMu sync.RWMutex // writes hold it shared; Snapshot exclusively
	stripes [1024]sync.Mutex

	closed atomic.Bool

	raMu     sync.Mutex
	raEnd    int64        // end of the reader's stream: the furthest base read that followed the last
	raStreak int          // consecutive base reads that followed one another
	raAhead  int64        // end of what was last requested ahead of the stream
	raPaused atomic.Int64 // no readahead before this time (unix ns; see PauseReadahead)

	readBytes, writtenBytes, baseReadBytes, fetchedBytes, hits, misses atomic.Int64

	traceMu   sync.Mutex
	baseReads *runSet // blocks read from the base (see Stats.BaseReadRuns)
	truncated bool    // baseReads reached MaxReadRuns

	startUntil  atomic.Int64 // record start-up reads until then (unix ns; 0: not recording)
	startMu     sync.Mutex
	startMax    int
	startSeen   map[digest.Digest]bool
	startChunks []blockmap.Chunk
}

// RecordStartup makes the volume record, for window from now, the base chunks it
// reads in the order it first reads them, up to max chunks (package trace).
func (v *Volume) RecordStartup(window time.Duration, max int) {
	v.startMu.Lock()
	defer v.startMu.Unlock()
	v.startMax, v.startSeen = max, map[digest.Digest]bool{}
	v.startUntil.Store(time.Now().Add(window).UnixNano())
}

// PauseReadahead turns sequential readahead off for d: while a start-up trace is
// replayed, it already fetches what the reader will read, and readahead would
// only fetch past it.
func (v *Volume) PauseReadahead(d time.Duration) {
	v.raPaused.Store(time.Now().Add(d).UnixNano())
}

// AddFetched counts n bytes fetched from the store on the volume's behalf (a
// prefetch made for it elsewhere, e.g. a start-up trace's replay).
func (v *Volume) AddFetched(n int64) { v.fetchedBytes.Add(n) }

// StartupChunks returns the chunks recorded since RecordStartup, in first-read order.
func (v *Volume) StartupChunks() []blockmap.Chunk {
	v.startMu.Lock()
	defer v.startMu.Unlock()
	return slices.Clone(v.startChunks)
}

func (v *Volume) recordStartup(c blockmap.Chunk) {
	// Off the lock: once the window has closed, a read pays one atomic load.
	if until := v.startUntil.Load(); until == 0 || time.Now().UnixNano() > until {
		return
	}
	v.startMu.Lock()
	defer v.startMu.Unlock()
	if v.startSeen[c.Digest] || len(v.startChunks) >= v.startMax {
		return
	}
	v.startSeen[c.Digest] = true
	v.startChunks = append(v.startChunks, c)
}

// Create makes a new volume in dir (which must not exist): a clone of the snapshot
// base (digest baseID, or nil/"" for a blank volume) with the given virtual size.
// No data is copied.
func Create(dir string, baseID digest.Digest, base *blockmap.Map, size int64, chunks ChunkReader) (*Volume, error) {
	if size <= 0 || size%BlockSize != 0 || size > blockmap.MaxSize {
		return nil, fmt.Errorf("create volume: size %d is not a positive multiple of %d", size, BlockSize)
	}
	if base != nil && base.Size > size {
		return nil, fmt.Errorf("create volume: size %d is smaller than the base snapshot's %d", size, base.Size)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create volume: %w", err)
	}
	meta := Meta{Version: metaVersion, Base: baseID, Size: size, Created: time.Now().UTC()}
	err := func() error {
		f, err := os.OpenFile(filepath.Join(dir, "data"), os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := f.Truncate(size); err != nil {
			return err
		}
		j, err := os.OpenFile(filepath.Join(dir, "journal"), os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
		if err != nil {
			return err
		}
		j.Close()
		return writeMeta(dir, meta)
	}()
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("create volume %s: %w", dir, err)
	}
	return Open(dir, base, chunks)
}

// ReadMeta reads a volume's record without opening it.
func ReadMeta(dir string) (Meta, error) {
	var m Meta
	b, err := os.ReadFile(filepath.Join(dir, "volume.json"))
	if err != nil {
		return m, fmt.Errorf("read volume record: %w", err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("read volume record %s: %w", dir, err)
	}
	if m.Version != metaVersion {
		return m, fmt.Errorf("volume record %s has version %d, this build reads %d", dir, m.Version, metaVersion)
	}
	return m, nil
}

func writeMeta(dir string, m Meta) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, "volume.json.tmp")
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, "volume.json")); err != nil {
		return err
	}
	return syncDir(dir)
}

// Open opens an existing volume. base must be the map of Meta.Base (nil if blank).
func Open(dir string, base *blockmap.Map, chunks ChunkReader) (*Volume, error) {
	meta, err := ReadMeta(dir)
	if err != nil {
		return nil, err
	}
	if (meta.Base == "") != (base == nil) {
		return nil, fmt.Errorf("open volume %s: base snapshot %q and the map given disagree", dir, meta.Base)
	}
	if base == nil {
		base = blockmap.Empty(0)
	}
	if base.Size > meta.Size {
		return nil, fmt.Errorf("open volume %s: base of %d bytes exceeds volume size %d", dir, base.Size, meta.Size)
	}
	data, err := os.OpenFile(filepath.Join(dir, "data"), os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("open volume %s: %w", dir, err)
	}
	jpath := filepath.Join(dir, "journal")
	journal, err := os.OpenFile(jpath, os.O_RDWR, 0)
	if err != nil {
		data.Close()
		return nil, fmt.Errorf("open volume %s: %w", dir, err)
	}
	v := &Volume{dir: dir, meta: meta, base: base, chunks: chunks, data: data, journal: journal,
		present: newRunSet(), synced: newRunSet(), baseReads: newRunSet()}
	n, err := replayJournal(journal, v.synced, meta.Size/BlockSize)
	if err != nil {
		data.Close()
		journal.Close()
		return nil, fmt.Errorf("open volume %s: %w", dir, err)
	}
	v.records = n
	for _, r := range v.synced.runs() {
		v.present.add(r.start, r.end)
	}
	if err := v.maybeCompact(); err != nil {
		v.Close()
		return nil, fmt.Errorf("open volume %s: %w", dir, err)
	}
	return v, nil
}

// Dir returns the volume's directory. Meta returns its record. Base returns its base map.
func (v *Volume) Dir() string         { return v.dir }
func (v *Volume) Meta() Meta          { return v.meta }
func (v *Volume) Size() int64         { return v.meta.Size }
func (v *Volume) Base() *blockmap.Map { return v.base }

// Stats returns the volume's counters.
func (v *Volume) Stats() Stats {
	v.mu.Lock()
	delta, runs := v.present.count()*BlockSize, int64(v.present.len())
	v.mu.Unlock()
	st := Stats{
		ReadBytes: v.readBytes.Load(), WrittenBytes: v.writtenBytes.Load(),
		BaseReadBytes: v.baseReadBytes.Load(), FetchedBytes: v.fetchedBytes.Load(),
		CacheHits: v.hits.Load(), CacheMisses: v.misses.Load(),
		DeltaBytes: delta, DeltaRuns: runs,
	}
	v.traceMu.Lock()
	if n := v.baseReads.len(); n > 0 {
		st.BaseReadRuns = make([][2]int64, 0, n)
		for _, r := range v.baseReads.runs() {
			st.BaseReadRuns = append(st.BaseReadRuns, [2]int64{r.start, r.end})
		}
	}
	st.BaseReadRunsTruncated = v.truncated
	v.traceMu.Unlock()
	return st
}

// traceBaseRead records that the blocks covering [off, off+n) were read from the
// base, until MaxReadRuns runs are recorded.
func (v *Volume) traceBaseRead(off, n int64) {
	v.traceMu.Lock()
	defer v.traceMu.Unlock()
	if v.truncated {
		return
	}
	start, end := off/BlockSize, (off+n+BlockSize-1)/BlockSize
	if v.baseReads.len() >= MaxReadRuns && !v.baseReads.touches(start, end) {
		v.truncated = true
		return
	}
	v.baseReads.add(start, end)
}

// ReadAt reads len(p) bytes at off. Reads past the end are short with io.EOF.
func (v *Volume) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	if v.closed.Load() {
		return 0, ErrClosed
	}
	if off < 0 {
		return 0, fmt.Errorf("read at %d: %w", off, errdefs.ErrOutOfRange)
	}
	if off >= v.meta.Size {
		return 0, io.EOF
	}
	var eof error
	if rem := v.meta.Size - off; int64(len(p)) > rem {
		p, eof = p[:rem], io.EOF
	}
	end := off + int64(len(p))
	type seg struct {
		from, to int64
		in       bool
	}
	var segs []seg
	v.mu.Lock()
	v.present.segments(off/BlockSize, (end+BlockSize-1)/BlockSize, func(s, e int64, in bool) {
		segs = append(segs, seg{max(s*BlockSize, off), min(e*BlockSize, end), in})
	})
	v.mu.Unlock()
	for _, s := range segs {
		dst := p[s.from-off : s.to-off]
		if s.in {
			if _, err := v.data.ReadAt(dst, s.from); err != nil {
				return 0, fmt.Errorf("read delta at %d: %w", s.from, err)
			}
			continue
		}
		if err := v.readBase(ctx, dst, s.from); err != nil {
			return 0, err
		}
	}
	v.readBytes.Add(int64(len(p)))
	return len(p), eof
}

// readBase fills dst with the base snapshot's bytes at off.
func (v *Volume) readBase(ctx context.Context, dst []byte, off int64) error {
	clear(dst)
	pieces := v.base.Lookup(off, int64(len(dst)))
	data := 0
	for _, pc := range pieces {
		if !pc.Hole {
			data++
		}
	}
	// One read is one access for readahead, however many chunks it spans.
	for i := len(pieces) - 1; i >= 0; i-- {
		if !pieces[i].Hole {
			v.readahead(off, pieces[i])
			break
		}
	}
	read := func(ctx context.Context, pc blockmap.Piece) error {
		hit, fetched, err := v.chunks.ReadChunk(ctx, pc.Chunk, dst[pc.Offset-off:pc.Offset-off+pc.Length], pc.ChunkOffset)
		if err != nil {
			return fmt.Errorf("read base at %d: %w", pc.Offset, err)
		}
		v.baseReadBytes.Add(pc.Length)
		v.traceBaseRead(pc.Offset, pc.Length)
		v.recordStartup(pc.Chunk)
		v.fetchedBytes.Add(fetched)
		if hit {
			v.hits.Add(1)
		} else {
			v.misses.Add(1)
		}
		return nil
	}
	if data <= 1 {
		for _, pc := range pieces {
			if !pc.Hole {
				return read(ctx, pc)
			}
		}
		return nil
	}
	// A read spanning several chunks fetches them in parallel.
	g, gctx := errgroup.WithContext(ctx)
	for _, pc := range pieces {
		if !pc.Hole {
			g.Go(func() error { return read(gctx, pc) })
		}
	}
	return g.Wait()
}

// readahead is called before each read of the base, from off to the end of its last
// piece pc. When reads follow one
// another through the volume, the chunks that come next are requested in the
// background (cache hits included, so the window moves on with the reader rather
// than stopping where the last one ended): the window doubles with each read in
// sequence, up to maxReadaheadBytes, and is topped up whenever less than half of
// it lies ahead of the reader. A random reader fetches nothing extra. Reads that
// run concurrently (one FUSE request spans several chunks) may arrive a little
// out of order; a few chunks of slack keep them in sequence.
func (v *Volume) readahead(off int64, pc blockmap.Piece) {
	pf, ok := v.chunks.(Prefetcher)
	if !ok || time.Now().UnixNano() < v.raPaused.Load() {
		return
	}
	size := max(pc.Chunk.Size, BlockSize)
	end := pc.Offset + pc.Length
	v.raMu.Lock()
	sequential := v.raEnd > 0 && off >= v.raEnd-size && off <= v.raEnd+size
	if sequential {
		v.raStreak++
		v.raEnd = max(v.raEnd, end)
	} else {
		v.raStreak, v.raEnd, v.raAhead = 0, end, 0
	}
	if v.raStreak < 2 { // a stream starts at the third read in sequence
		v.raMu.Unlock()
		return
	}
	window := min(int64(1)<<min(v.raStreak-1, 20), max(2, maxReadaheadBytes/size)) // chunks
	if v.raAhead-v.raEnd > window*size/2 {
		v.raMu.Unlock()
		return // enough is on its way
	}
	from := max(v.raAhead, v.raEnd)
	next, reach := chunksAfter(v.base, from, int(window-max(0, (v.raAhead-v.raEnd)/size)), pc.Chunk.Digest)
	if len(next) > 0 {
		// Count as requested only what the prefetcher took: the rest is asked
		// for again at the next read.
		if took := pf.Prefetch(next, func(n int64) { v.fetchedBytes.Add(n) }); took > 0 && reach[took-1] > v.raAhead {
			v.raAhead = reach[took-1]
		}
	}
	v.raMu.Unlock()
}

// chunksAfter returns up to n distinct chunks of the extents at or after off (but
// skip), in order, and for each the end of the extent where it was found.
func chunksAfter(m *blockmap.Map, off int64, n int, skip digest.Digest) ([]blockmap.Chunk, []int64) {
	var out []blockmap.Chunk
	var reach []int64
	seen := map[int]bool{}
	i := sort.Search(len(m.Extents), func(i int) bool { return m.Extents[i].End() > off })
	for ; i < len(m.Extents) && len(out) < n; i++ {
		e := m.Extents[i]
		if seen[e.Chunk] || m.Chunks[e.Chunk].Digest == skip {
			continue
		}
		seen[e.Chunk] = true
		out = append(out, m.Chunks[e.Chunk])
		reach = append(reach, e.End())
	}
	return out, reach
}

// lockBlocks locks the stripes of blocks [first, last] in ascending order.
func (v *Volume) lockBlocks(first, last int64) func() {
	n := int64(len(v.stripes))
	if last-first+1 >= n {
		for i := range v.stripes {
			v.stripes[i].Lock()
		}
		return func() {
			for i := range v.stripes {
				v.stripes[i].Unlock()
			}
		}
	}
	a, b := first%n, last%n
	var idx []int64
	if a <= b {
		for i := a; i <= b; i++ {
			idx = append(idx, i)
		}
	} else { // wraps: lock [0, b] then [a, n)
		for i := int64(0); i <= b; i++ {
			idx = append(idx, i)
		}
		for i := a; i < n; i++ {
			idx = append(idx, i)
		}
	}
	for _, i := range idx {
		v.stripes[i].Lock()
	}
	return func() {
		for _, i := range idx {
			v.stripes[i].Unlock()
		}
	}
}

// WriteAt writes p at off into the delta. Partial blocks are completed from the
// base (copy-on-write at BlockSize); blocks written with zeros take no space.
func (v *Volume) WriteAt(ctx context.Context, p []byte, off int64) (int, error) {
	if v.closed.Load() {
		return 0, ErrClosed
	}
	if len(p) == 0 {
		return 0, nil
	}
	end := off + int64(len(p))
	if off < 0 || end > v.meta.Size {
		return 0, fmt.Errorf("write [%d, %d) of a %d-byte volume: %w", off, end, v.meta.Size, errdefs.ErrOutOfRange)
	}
	v.writeMu.RLock()
	defer v.writeMu.RUnlock()
	first, last := off/BlockSize, (end-1)/BlockSize
	unlock := v.lockBlocks(first, last)
	defer unlock()

	pos := off
	for pos < end {
		blk := pos / BlockSize
		inOff := pos - blk*BlockSize
		n := min(BlockSize-inOff, end-pos)
		if inOff != 0 || n != BlockSize {
			if err := v.writePartial(ctx, blk, inOff, p[pos-off:pos-off+n]); err != nil {
				return 0, err
			}
			pos += n
			continue
		}
		// Whole blocks up to the last whole one.
		fullEnd := end / BlockSize * BlockSize
		if err := v.writeBlocks(p[pos-off:fullEnd-off], pos); err != nil {
			return 0, err
		}
		pos = fullEnd
	}
	v.mu.Lock()
	v.present.add(first, last+1)
	if k := len(v.pending); k > 0 && v.pending[k-1].end >= first && v.pending[k-1].start <= last+1 {
		v.pending[k-1].start = min(v.pending[k-1].start, first)
		v.pending[k-1].end = max(v.pending[k-1].end, last+1)
	} else {
		v.pending = append(v.pending, run{first, last + 1})
	}
	v.mu.Unlock()
	v.writtenBytes.Add(int64(len(p)))
	return len(p), nil
}

func (v *Volume) isPresent(blk int64) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.present.contains(blk)
}

// writePartial writes part of block blk: in place if the block is already in the
// delta, otherwise as a whole block completed from the base.
func (v *Volume) writePartial(ctx context.Context, blk, inOff int64, b []byte) error {
	at := blk*BlockSize + inOff
	if v.isPresent(blk) {
		if _, err := v.data.WriteAt(b, at); err != nil {
			return fmt.Errorf("write delta at %d: %w", at, err)
		}
		return nil
	}
	buf := make([]byte, BlockSize)
	if err := v.readBase(ctx, buf, blk*BlockSize); err != nil {
		return fmt.Errorf("copy-on-write of block %d: %w", blk, err)
	}
	copy(buf[inOff:], b)
	return v.writeBlocks(buf, blk*BlockSize)
}

var zeroBlock = make([]byte, BlockSize)

// writeBlocks writes whole blocks b at off; runs of zero blocks become holes.
func (v *Volume) writeBlocks(b []byte, off int64) error {
	for len(b) > 0 {
		zero := bytes.Equal(b[:BlockSize], zeroBlock)
		n := BlockSize
		for n < len(b) && bytes.Equal(b[n:n+BlockSize], zeroBlock) == zero {
			n += BlockSize
		}
		if zero {
			if err := v.punch(off, int64(n)); err != nil {
				return err
			}
		} else if _, err := v.data.WriteAt(b[:n], off); err != nil {
			return fmt.Errorf("write delta at %d: %w", off, err)
		}
		b, off = b[n:], off+int64(n)
	}
	return nil
}

// punch makes [off, off+n) of the data file read as zeros without storing them.
func (v *Volume) punch(off, n int64) error {
	err := unix.Fallocate(int(v.data.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
	if errors.Is(err, unix.EOPNOTSUPP) {
		// A filesystem without hole punching: store the zeros.
		for done := int64(0); done < n; done += BlockSize {
			if _, werr := v.data.WriteAt(zeroBlock[:min(n-done, BlockSize)], off+done); werr != nil {
				return fmt.Errorf("zero delta at %d: %w", off+done, werr)
			}
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("punch delta [%d, +%d): %w", off, n, err)
	}
	return nil
}

// Zero makes [off, off+n) read as zeros (a discard or write-zeroes from the guest).
func (v *Volume) Zero(ctx context.Context, off, n int64) error {
	if n <= 0 {
		return nil
	}
	end := off + n
	if off < 0 || end > v.meta.Size {
		return fmt.Errorf("zero [%d, %d): %w", off, end, errdefs.ErrOutOfRange)
	}
	// Partial blocks at either end are written; whole blocks are punched.
	first := (off + BlockSize - 1) / BlockSize * BlockSize
	last := end / BlockSize * BlockSize
	if first >= last {
		_, err := v.WriteAt(ctx, make([]byte, n), off)
		return err
	}
	if first > off {
		if _, err := v.WriteAt(ctx, make([]byte, first-off), off); err != nil {
			return err
		}
	}
	if end > last {
		if _, err := v.WriteAt(ctx, make([]byte, end-last), last); err != nil {
			return err
		}
	}
	v.writeMu.RLock()
	defer v.writeMu.RUnlock()
	unlock := v.lockBlocks(first/BlockSize, last/BlockSize-1)
	defer unlock()
	if err := v.punch(first, last-first); err != nil {
		return err
	}
	v.mu.Lock()
	v.present.add(first/BlockSize, last/BlockSize)
	v.pending = append(v.pending, run{first / BlockSize, last / BlockSize})
	v.mu.Unlock()
	return nil
}

// Sync makes every write that returned before the call durable.
func (v *Volume) Sync(ctx context.Context) error {
	if v.closed.Load() {
		return ErrClosed
	}
	v.syncMu.Lock()
	defer v.syncMu.Unlock()
	v.mu.Lock()
	pend := v.pending
	v.pending = nil
	v.mu.Unlock()
	if err := v.data.Sync(); err != nil {
		v.requeue(pend)
		return fmt.Errorf("sync delta data: %w", err)
	}
	if err := appendRecords(v.journal, pend); err != nil {
		v.requeue(pend)
		return err
	}
	v.records += len(pend)
	for _, r := range pend {
		v.synced.add(r.start, r.end)
	}
	return v.maybeCompact()
}

func (v *Volume) requeue(pend []run) {
	v.mu.Lock()
	v.pending = append(pend, v.pending...)
	v.mu.Unlock()
}

// maybeCompact rewrites the journal when it holds many more records than runs.
// Callers hold syncMu (or own v exclusively).
func (v *Volume) maybeCompact() error {
	if v.records <= 4*v.synced.len()+1024 {
		return nil
	}
	runs := v.synced.runs()
	f, err := rewriteJournal(filepath.Join(v.dir, "journal"), runs)
	if err != nil {
		return fmt.Errorf("compact journal: %w", err)
	}
	v.journal.Close()
	v.journal = f
	v.records = len(runs)
	return nil
}

// Close syncs and closes the volume.
func (v *Volume) Close() error {
	if v.closed.Load() {
		return nil
	}
	err := v.Sync(context.Background())
	v.syncMu.Lock()
	defer v.syncMu.Unlock()
	if v.closed.Swap(true) {
		return nil
	}
	v.data.Close()
	v.journal.Close()
	return err
}

// Delete closes the volume and removes its directory.
func (v *Volume) Delete() error {
	v.closed.Store(true)
	v.syncMu.Lock()
	v.data.Close()
	v.journal.Close()
	v.syncMu.Unlock()
	if err := os.RemoveAll(v.dir); err != nil {
		return fmt.Errorf("delete volume %s: %w", v.dir, err)
	}
	return nil
}
