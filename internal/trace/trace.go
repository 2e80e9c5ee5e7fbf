package trace

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/blockmap"
	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/runs"
)

// Version is the version Encode writes. Decode reads it, version 2 (the same
// record without files) and version 1 (nor runs).
const Version = 3

// MaxRuns bounds the block runs of a trace (about 1.5 MB encoded at most).
const MaxRuns = 1 << 16

// maxBlock bounds a run's end: blocks of a volume of blockmap.MaxSize.
const maxBlock = blockmap.MaxSize / blockmap.BlockSize

// MaxChunks bounds a trace: 16384 chunks is 4 GiB of 256 KiB chunks, far more than
// any start-up reads, and about 1.6 MB encoded (records hold at most 16 MiB).
const MaxChunks = 16384

// MaxChunkSize bounds one chunk's size in a trace.
const MaxChunkSize = 64 << 20

// MaxFiles bounds the files of a trace, and MaxPath the length of one's path.
const (
	MaxFiles = 16384
	MaxPath  = 4096
)

// ErrMalformed is returned by Decode for malformed input (errdefs.ErrInvalid). A
// caller tells it from the store's errors: a malformed trace is recorded anew.
var ErrMalformed = errdefs.New(errdefs.ErrInvalid, "invalid start-up trace")

// Trace is the start-up reads of one snapshot.
type Trace struct {
	Version  int           `json:"version"`
	Snapshot digest.Digest `json:"snapshot"`
	// Window is how long after the clone was made reads were recorded.
	Window time.Duration `json:"window"`
	// Created is when the trace was recorded.
	Created time.Time `json:"created"`
	// Chunks are the snapshot's chunks in the order the container first read them.
	Chunks []Chunk `json:"chunks"`
	// Runs are the blocks (of blockmap.BlockSize) of the volume it read in the
	// window, as [start, end) runs in increasing order, neither overlapping nor
	// touching (version 2): what a start-up layout gathers (node.LayoutStartup).
	Runs [][2]int64 `json:"runs,omitempty"`
	// Files are the files of the snapshot's filesystem that start-up opened, in
	// the order it first opened them, each with the byte ranges of it that the
	// runs cover (version 3; recorded where the node mounted the filesystem
	// itself: a shared image root). A node warms its mount of the filesystem
	// from them (package filetrace).
	Files []File `json:"files,omitempty"`
}

// File is one file start-up opened: its path from the filesystem's root
// (absolute, clean) and the byte ranges of it start-up read, as [start, end)
// in increasing order, neither overlapping nor touching (none: opened, or read
// where the runs did not record).
type File struct {
	Path   string     `json:"path"`
	Ranges [][2]int64 `json:"ranges,omitempty"`
}

// SetRuns records rs (sorted, disjoint runs of blocks, as runs.Set gives them) as
// the trace's runs, the first MaxRuns of them.
func (t *Trace) SetRuns(rs []runs.Run) {
	t.Runs = make([][2]int64, 0, min(len(rs), MaxRuns))
	for _, r := range rs[:min(len(rs), MaxRuns)] {
		t.Runs = append(t.Runs, [2]int64{r.Start, r.End})
	}
}

// RunBlocks is the number of blocks the runs cover.
func (t *Trace) RunBlocks() int64 {
	var n int64
	for _, r := range t.Runs {
		n += r[1] - r[0]
	}
	return n
}

// Chunk is one chunk of the snapshot.
type Chunk struct {
	Digest digest.Digest `json:"digest"`
	Size   int64         `json:"size"`
}

// RefPrefix starts the name of every trace record.
const RefPrefix = "traces/"

// RefName is the name of the store record holding snapshot's trace.
func RefName(snapshot digest.Digest) string {
	return RefPrefix + snapshot.Algorithm().String() + "-" + snapshot.Encoded()
}

// SnapshotOf returns the snapshot whose trace a record named name holds.
func SnapshotOf(name string) (digest.Digest, bool) {
	rest, ok := strings.CutPrefix(name, RefPrefix)
	if !ok {
		return "", false
	}
	alg, hex, ok := strings.Cut(rest, "-")
	if !ok {
		return "", false
	}
	d := digest.NewDigestFromEncoded(digest.Algorithm(alg), hex)
	if d.Validate() != nil {
		return "", false
	}
	return d, true
}

// New makes a trace of chunks (in first-read order; later duplicates are dropped,
// and chunks beyond MaxChunks).
func New(snapshot digest.Digest, window time.Duration, chunks []blockmap.Chunk) *Trace {
	t := &Trace{Version: Version, Snapshot: snapshot, Window: window, Created: time.Now().UTC()}
	seen := make(map[digest.Digest]bool, len(chunks))
	for _, c := range chunks {
		if seen[c.Digest] || len(t.Chunks) == MaxChunks {
			continue
		}
		seen[c.Digest] = true
		t.Chunks = append(t.Chunks, Chunk{Digest: c.Digest, Size: c.Size})
	}
	return t
}

// BlockmapChunks returns the chunks as the cache takes them.
func (t *Trace) BlockmapChunks() []blockmap.Chunk {
	out := make([]blockmap.Chunk, len(t.Chunks))
	for i, c := range t.Chunks {
		out[i] = blockmap.Chunk{Digest: c.Digest, Size: c.Size}
	}
	return out
}

// Bytes is the sum of the chunks' sizes.
func (t *Trace) Bytes() int64 {
	var n int64
	for _, c := range t.Chunks {
		n += c.Size
	}
	return n
}

// Encode checks t and encodes it.
func Encode(t *Trace) ([]byte, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	return json.Marshal(t)
}

// Decode decodes and checks an encoded trace.
func Decode(b []byte) (*Trace, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var t Trace
	if err := dec.Decode(&t); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: trailing data", ErrMalformed)
	}
	if err := t.check(); err != nil {
		return nil, err
	}
	return &t, nil
}

func (t *Trace) check() error {
	if t.Version < 1 || t.Version > Version {
		return fmt.Errorf("%w: version %d (this program reads 1 to %d)", ErrMalformed, t.Version, Version)
	}
	if t.Version == 1 && t.Runs != nil {
		return fmt.Errorf("%w: runs in a version 1 trace", ErrMalformed)
	}
	if t.Version < 3 && t.Files != nil {
		return fmt.Errorf("%w: files in a version %d trace", ErrMalformed, t.Version)
	}
	if err := checkFiles(t.Files); err != nil {
		return err
	}
	if len(t.Runs) > MaxRuns {
		return fmt.Errorf("%w: %d runs, at most %d", ErrMalformed, len(t.Runs), MaxRuns)
	}
	var prev int64 = -1
	for i, r := range t.Runs {
		if r[0] <= prev || r[1] <= r[0] || r[1] > maxBlock {
			return fmt.Errorf("%w: run %d [%d, %d) out of order or range", ErrMalformed, i, r[0], r[1])
		}
		prev = r[1]
	}
	if err := t.Snapshot.Validate(); err != nil {
		return fmt.Errorf("%w: snapshot: %v", ErrMalformed, err)
	}
	if t.Window < 0 {
		return fmt.Errorf("%w: negative window", ErrMalformed)
	}
	if len(t.Chunks) > MaxChunks {
		return fmt.Errorf("%w: %d chunks, at most %d", ErrMalformed, len(t.Chunks), MaxChunks)
	}
	seen := make(map[digest.Digest]bool, len(t.Chunks))
	for i, c := range t.Chunks {
		if err := c.Digest.Validate(); err != nil {
			return fmt.Errorf("%w: chunk %d: %v", ErrMalformed, i, err)
		}
		if c.Size <= 0 || c.Size > MaxChunkSize {
			return fmt.Errorf("%w: chunk %d: size %d", ErrMalformed, i, c.Size)
		}
		if seen[c.Digest] {
			return fmt.Errorf("%w: chunk %d (%s) listed twice", ErrMalformed, i, c.Digest)
		}
		seen[c.Digest] = true
	}
	return nil
}

// checkFiles checks a trace's files: bounded, each path absolute and clean (no
// "..": a reader opens it under its mount's root), each file listed once, its
// ranges in order.
func checkFiles(fs []File) error {
	if len(fs) > MaxFiles {
		return fmt.Errorf("%w: %d files, at most %d", ErrMalformed, len(fs), MaxFiles)
	}
	seen := make(map[string]bool, len(fs))
	ranges := 0
	for i, f := range fs {
		if len(f.Path) > MaxPath || !strings.HasPrefix(f.Path, "/") || path.Clean(f.Path) != f.Path ||
			f.Path == "/" || strings.ContainsRune(f.Path, 0) {
			return fmt.Errorf("%w: file %d: path %.100q", ErrMalformed, i, f.Path)
		}
		if seen[f.Path] {
			return fmt.Errorf("%w: file %d (%.100q) listed twice", ErrMalformed, i, f.Path)
		}
		seen[f.Path] = true
		if ranges += len(f.Ranges); ranges > MaxRuns {
			return fmt.Errorf("%w: more than %d file ranges", ErrMalformed, MaxRuns)
		}
		var prev int64 = -1
		for j, r := range f.Ranges {
			if r[0] <= prev || r[1] <= r[0] || r[1] > blockmap.MaxSize {
				return fmt.Errorf("%w: file %d: range %d [%d, %d) out of order or range", ErrMalformed, i, j, r[0], r[1])
			}
			prev = r[1]
		}
	}
	return nil
}
