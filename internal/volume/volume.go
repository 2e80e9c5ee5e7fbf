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
	"sync"
	"sync/atomic"
	"time"

	"github.com/opencontainers/go-digest"
	"golang.org/x/sys/unix"

	"github.com/slacker-dev/slacker/internal/atomicfile"
	"github.com/slacker-dev/slacker/internal/blockmap"
	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/runs"
)

// BlockSize is the copy-on-write unit.
const BlockSize = blockmap.BlockSize

// ErrClosed: the volume was closed or deleted. It is no errdefs kind: no edge
// answers it differently from any other failure (FUSE gives EIO). A range outside
// the volume is errdefs.ErrOutOfRange (FUSE gives ENOSPC).
var ErrClosed = errors.New("volume closed")

// BaseReader reads the volume's base snapshot: verified bytes, holes and anything
// past the base's end as zeros. The node gives each volume one (package prefetch's
// Reader, which also fetches ahead and accounts for what the volume read). It must
// be safe for concurrent use.
type BaseReader interface {
	ReadAt(ctx context.Context, p []byte, off int64) error
}

// Meta is the persistent record of a volume (volume.json).
type Meta struct {
	Version int           `json:"version"`
	Base    digest.Digest `json:"base,omitempty"` // base snapshot; empty for a blank volume
	Size    int64         `json:"size"`
	Created time.Time     `json:"created"`
}

const metaVersion = 1

// Stats are a volume's counters since it was opened. What its reads of the base
// moved is its BaseReader's to count.
type Stats struct {
	ReadBytes    int64 `json:"read_bytes"`    // bytes read by the guest
	WrittenBytes int64 `json:"written_bytes"` // bytes written by the guest
	DeltaBytes   int64 `json:"delta_bytes"`   // bytes of blocks present in the delta
	DeltaRuns    int64 `json:"delta_runs"`    // runs of the delta's block set (metadata size)
}

// Volume is an open writable volume. All methods are safe for concurrent use.
type Volume struct {
	dir    string
	meta   Meta
	base   *blockmap.Map
	reader BaseReader
	data   *os.File

	mu      sync.Mutex // guards present, pending, unsynced, uend, ubuf
	present *runs.Set  // blocks whose current content is in the data file
	pending []runs.Run // runs written since the last Sync

	// The unsynced file lists every run of pending (and of a Sync under way)
	// before the write that added it returns: see unsynced.go. It is replaced
	// (by Sync and Open) holding syncMu too.
	unsynced *os.File
	uend     int64  // its length: where the next record goes
	ubuf     []byte // records being appended
	uhdr     []byte // its header, naming this boot

	syncMu  sync.Mutex // serializes Sync; guards journal, synced, records
	journal *os.File
	synced  *runs.Set // runs recorded in the journal
	records int

	writeMu sync.RWMutex // writes hold it shared; Snapshot exclusively
	stripes [1024]sync.Mutex

	closed atomic.Bool

	readBytes, writtenBytes atomic.Int64
}

// Create makes a new volume in dir (which must not exist): a clone of the snapshot
// base (digest baseID, or nil/"" for a blank volume) with the given virtual size,
// reading base through r (nil for a blank volume). No data is copied.
func Create(dir string, baseID digest.Digest, base *blockmap.Map, size int64, r BaseReader) (*Volume, error) {
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
		u, err := os.OpenFile(filepath.Join(dir, unsyncedName), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		_, err = u.Write(unsyncedHeader(bootID()))
		if cerr := u.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		return writeMeta(dir, meta)
	}()
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("create volume %s: %w", dir, err)
	}
	return Open(dir, base, r)
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

// files writes the volume's record and rewrites its journal (tests inject faults
// through its FS).
var files atomicfile.Writer

func writeMeta(dir string, m Meta) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return files.WriteFile(filepath.Join(dir, "volume.json"), b, 0o600)
}

// Open opens an existing volume. base must be the map of Meta.Base (nil if blank),
// read through r (nil if blank).
func Open(dir string, base *blockmap.Map, r BaseReader) (*Volume, error) {
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
	if r == nil {
		if meta.Base != "" {
			return nil, fmt.Errorf("open volume %s: no reader for its base snapshot %s", dir, meta.Base)
		}
		r = zeros{}
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
	v := &Volume{dir: dir, meta: meta, base: base, reader: r, data: data, journal: journal,
		present: runs.New(), synced: runs.New(), uhdr: unsyncedHeader(bootID())}
	n, err := replayJournal(journal, v.synced, meta.Size/BlockSize)
	if err != nil {
		data.Close()
		journal.Close()
		return nil, fmt.Errorf("open volume %s: %w", dir, err)
	}
	v.records = n
	for _, r := range v.synced.Runs() {
		v.present.Add(r.Start, r.End)
	}
	// Writes acknowledged by a process of this boot that was killed before it
	// synced them: present, and pending so the next Sync journals them.
	if err := v.recoverUnsynced(); err != nil {
		data.Close()
		journal.Close()
		return nil, fmt.Errorf("open volume %s: %w", dir, err)
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
	delta, runs := v.present.Count()*BlockSize, int64(v.present.Len())
	v.mu.Unlock()
	return Stats{ReadBytes: v.readBytes.Load(), WrittenBytes: v.writtenBytes.Load(), DeltaBytes: delta, DeltaRuns: runs}
}

// zeros is the base of a blank volume.
type zeros struct{}

func (zeros) ReadAt(ctx context.Context, p []byte, off int64) error {
	clear(p)
	return nil
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
	v.present.Segments(off/BlockSize, (end+BlockSize-1)/BlockSize, func(s, e int64, in bool) {
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
		if err := v.reader.ReadAt(ctx, dst, s.from); err != nil {
			return 0, err
		}
	}
	v.readBytes.Add(int64(len(p)))
	return len(p), eof
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
	// The run is listed in the unsynced file before it is pending and before the
	// write returns: a kill of the daemon from here on loses none of it.
	w := runs.Run{Start: first, End: last + 1}
	v.mu.Lock()
	if k := len(v.pending); k > 0 && v.pending[k-1].End >= w.Start && v.pending[k-1].Start <= w.End {
		p := &v.pending[k-1]
		if w.Start < p.Start || w.End > p.End { // blocks not listed yet
			if err := v.logRuns(w); err != nil {
				v.mu.Unlock()
				return 0, fmt.Errorf("write [%d, %d): %w", off, end, err)
			}
			p.Start, p.End = min(p.Start, w.Start), max(p.End, w.End)
		}
	} else {
		if err := v.logRuns(w); err != nil {
			v.mu.Unlock()
			return 0, fmt.Errorf("write [%d, %d): %w", off, end, err)
		}
		v.pending = append(v.pending, w)
	}
	v.present.Add(w.Start, w.End)
	v.mu.Unlock()
	v.writtenBytes.Add(int64(len(p)))
	return len(p), nil
}

func (v *Volume) isPresent(blk int64) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.present.Contains(blk)
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
	if err := v.reader.ReadAt(ctx, buf, blk*BlockSize); err != nil {
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
	// The punched blocks read as zeros from the delta. Blocks the delta did not
	// hold read as zeros from the base only where it has a hole: where it has data,
	// they join the delta (as zeros, which take no space and become holes at the
	// next snapshot). A discard of free space the image never used (a trim) so
	// adds nothing.
	v.mu.Lock()
	defer v.mu.Unlock()
	var added []runs.Run
	for _, pc := range v.base.Lookup(first, last-first) {
		if pc.Hole {
			continue
		}
		added = append(added, runs.Run{Start: pc.Offset / BlockSize, End: (pc.Offset + pc.Length + BlockSize - 1) / BlockSize})
	}
	if len(added) == 0 {
		return nil
	}
	if err := v.logRuns(added...); err != nil {
		return fmt.Errorf("zero [%d, %d): %w", off, end, err)
	}
	for _, r := range added {
		v.present.Add(r.Start, r.End)
	}
	v.pending = append(v.pending, added...)
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
	mark := v.uend // the unsynced file lists pend before mark, later writes after
	v.mu.Unlock()
	crash("sync-taken")
	// On a failure the runs are pending again, and still in the unsynced file.
	if err := v.data.Sync(); err != nil {
		v.requeue(pend)
		return fmt.Errorf("sync delta data: %w", err)
	}
	crash("sync-data")
	if err := appendRecords(v.journal, pend); err != nil {
		v.requeue(pend)
		return err
	}
	crash("sync-journaled")
	v.records += len(pend)
	for _, r := range pend {
		v.synced.Add(r.Start, r.End)
	}
	// pend is in the journal: the unsynced file need only list what came since.
	v.mu.Lock()
	err := v.trimUnsynced(mark)
	v.mu.Unlock()
	return errors.Join(err, v.maybeCompact())
}

func (v *Volume) requeue(pend []runs.Run) {
	v.mu.Lock()
	v.pending = append(pend, v.pending...)
	v.mu.Unlock()
}

// maybeCompact rewrites the journal when it holds many more records than runs.
// Callers hold syncMu (or own v exclusively).
func (v *Volume) maybeCompact() error {
	if v.records <= 4*v.synced.Len()+1024 {
		return nil
	}
	synced := v.synced.Runs()
	f, err := rewriteJournal(filepath.Join(v.dir, "journal"), synced)
	if f != nil {
		v.journal.Close()
		v.journal = f
		v.records = len(synced)
	}
	if err != nil {
		return fmt.Errorf("compact journal: %w", err)
	}
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
	v.closeFiles()
	return err
}

// closeFiles closes the volume's files. Callers hold syncMu.
func (v *Volume) closeFiles() {
	v.data.Close()
	v.journal.Close()
	v.mu.Lock()
	v.unsynced.Close()
	v.mu.Unlock()
}

// Delete closes the volume and removes its directory.
func (v *Volume) Delete() error {
	v.closed.Store(true)
	v.syncMu.Lock()
	v.closeFiles()
	v.syncMu.Unlock()
	if err := os.RemoveAll(v.dir); err != nil {
		return fmt.Errorf("delete volume %s: %w", v.dir, err)
	}
	return nil
}
