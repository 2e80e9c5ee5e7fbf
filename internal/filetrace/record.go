package filetrace

import (
	"slices"
	"sync"

	"github.com/slacker-dev/slacker/internal/runs"
	"github.com/slacker-dev/slacker/internal/trace"
)

// maxExtents bounds the extents kept of one file (a start reads the first of a
// big file's extents, and a fragmented one is rare in an image built at once),
// and maxAllExtents those of all files (6 MiB of them).
const (
	maxExtents    = 1024
	maxAllExtents = 1 << 18
)

// Recorder notes the files a start opens on a filesystem and where their bytes
// lie, to make a trace's files from the blocks the start read.
type Recorder struct {
	w *Watcher

	mu      sync.Mutex
	files   []recorded
	extents int // kept, of all files
}

type recorded struct {
	path    string
	extents []Extent
}

// Record starts recording the files opened on the filesystem mounted at root
// (which must start at byte 0 of the volume whose blocks Files is given).
func Record(root string) (*Recorder, error) {
	r := &Recorder{}
	w, err := Watch(root, r.note)
	if err != nil {
		return nil, err
	}
	r.w = w
	return r, nil
}

func (r *Recorder) note(path string, fd int) {
	r.mu.Lock()
	full := len(r.files) >= trace.MaxFiles || len(path) > trace.MaxPath
	room := maxAllExtents - r.extents
	r.mu.Unlock()
	if full {
		return
	}
	var exts []Extent
	if room > 0 {
		var err error
		if exts, err = Extents(fd, min(maxExtents, room)); err != nil {
			exts = nil // opened, its bytes unknown: the trace lists it without ranges
		}
	}
	r.mu.Lock()
	r.files = append(r.files, recorded{path: path, extents: exts})
	r.extents += len(exts)
	r.mu.Unlock()
}

// Stop ends the recording (what was recorded stays) and says why it ended early
// if it did. Safe to call more than once.
func (r *Recorder) Stop() error { return r.w.Stop() }

// Files stops the recording and returns the files recorded, in the order they
// were first opened, each with the byte ranges of it that lie in blocks (sorted,
// disjoint runs of blockSize blocks of the volume, from byte 0: what the start
// read of the volume).
func (r *Recorder) Files(blocks []runs.Run, blockSize int64) []trace.File {
	r.Stop()
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]trace.File, 0, len(r.files))
	budget := trace.MaxRuns
	for _, f := range r.files {
		rs := fileRanges(f.extents, blocks, blockSize)
		if len(rs) > budget {
			rs = rs[:budget]
		}
		budget -= len(rs)
		out = append(out, trace.File{Path: f.path, Ranges: rs})
	}
	return out
}

// fileRanges returns the byte ranges of a file (its extents) that lie in blocks,
// sorted and merged.
func fileRanges(extents []Extent, blocks []runs.Run, blockSize int64) [][2]int64 {
	in := runs.New() // of bytes of the file: merges what meets or overlaps
	for _, e := range extents {
		pStart, pEnd := e.Physical, e.Physical+e.Length
		// The first run that ends after the extent starts.
		i, _ := slices.BinarySearchFunc(blocks, pStart, func(r runs.Run, p int64) int {
			if r.End*blockSize <= p {
				return -1
			}
			return 1
		})
		for ; i < len(blocks) && blocks[i].Start*blockSize < pEnd; i++ {
			a, b := max(pStart, blocks[i].Start*blockSize), min(pEnd, blocks[i].End*blockSize)
			in.Add(e.Logical+a-pStart, e.Logical+b-pStart)
		}
	}
	if in.Len() == 0 {
		return nil
	}
	out := make([][2]int64, 0, in.Len())
	for _, r := range in.Runs() {
		out = append(out, [2]int64{r.Start, r.End})
	}
	return out
}
