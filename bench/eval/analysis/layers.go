package analysis

import (
	"archive/tar"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"github.com/klauspost/compress/gzip"
)

// BlockSize is the granularity of block-level deduplication (the paper's 4 KB).
const BlockSize = 4096

// key is a truncated content hash: 128 bits are plenty to tell apart the few
// million blocks of a corpus.
type key [16]byte

func keyOf(b []byte) key {
	s := sha256.Sum256(b)
	var k key
	copy(k[:], s[:])
	return k
}

// Layer is what one layer blob holds.
type Layer struct {
	Digest string `json:"digest"`
	// GzBytes is the blob's size, TarBytes the uncompressed tar's.
	GzBytes  int64 `json:"gz_bytes"`
	TarBytes int64 `json:"tar_bytes"`
	// Files counts non-directory entries (regular files, symlinks, hard links,
	// devices), Dirs directories, FileBytes the regular files' bytes. Whiteouts are
	// not counted.
	Files     int   `json:"files"`
	Dirs      int   `json:"dirs"`
	FileBytes int64 `json:"file_bytes"`

	// files maps each distinct file content to its size; blocks each distinct 4 KiB
	// block (the last one of a file may be shorter) to its length.
	files  map[key]int64
	blocks map[key]int32
}

// ReadLayer reads a gzip layer blob: counts, and the content hashes of its files
// and blocks.
func ReadLayer(blob string) (*Layer, error) {
	f, err := os.Open(blob)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	l := &Layer{GzBytes: fi.Size(), files: map[key]int64{}, blocks: map[key]int32{}}
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("layer %s: %w", blob, err)
	}
	cr := &countReader{r: zr}
	if err := l.read(cr); err != nil {
		return nil, fmt.Errorf("layer %s: %w", blob, err)
	}
	// The tar may end before the stream does (padding after the end blocks).
	if _, err := io.Copy(io.Discard, cr); err != nil {
		return nil, fmt.Errorf("layer %s: %w", blob, err)
	}
	l.TarBytes = cr.n
	return l, nil
}

// ReadTar reads an uncompressed layer tar (for tests and callers that decompress).
func ReadTar(r io.Reader) (*Layer, error) {
	l := &Layer{files: map[key]int64{}, blocks: map[key]int32{}}
	cr := &countReader{r: r}
	err := l.read(cr)
	io.Copy(io.Discard, cr)
	l.TarBytes = cr.n
	return l, err
}

type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func (l *Layer) read(r io.Reader) error {
	tr := tar.NewReader(r)
	buf := make([]byte, BlockSize)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if strings.HasPrefix(path.Base(h.Name), ".wh.") {
			continue
		}
		switch h.Typeflag {
		case tar.TypeDir:
			l.Dirs++
			continue
		case tar.TypeReg:
		default:
			l.Files++
			continue
		}
		l.Files++
		l.FileBytes += h.Size
		fh := sha256.New()
		for {
			n, err := io.ReadFull(tr, buf)
			if n > 0 {
				fh.Write(buf[:n])
				l.blocks[keyOf(buf[:n])] = int32(n)
			}
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				break
			}
			if err != nil {
				return err
			}
		}
		var k key
		copy(k[:], fh.Sum(nil))
		l.files[k] = h.Size
	}
}

// Dedup accumulates distinct file contents and blocks over layers.
type Dedup struct {
	// Raw is the file bytes added, duplicates included.
	Raw    int64
	files  map[key]int64
	blocks map[key]int32
}

// NewDedup returns an empty accumulator.
func NewDedup() *Dedup { return &Dedup{files: map[key]int64{}, blocks: map[key]int32{}} }

// Add counts l's file bytes into Raw and its contents into the distinct sets.
func (d *Dedup) Add(l *Layer) {
	d.Raw += l.FileBytes
	for k, n := range l.files {
		d.files[k] = n
	}
	for k, n := range l.blocks {
		d.blocks[k] = n
	}
}

// FileBytes is the size of the distinct file contents; BlockBytes of the distinct
// blocks.
func (d *Dedup) FileBytes() int64 {
	var t int64
	for _, n := range d.files {
		t += n
	}
	return t
}

func (d *Dedup) BlockBytes() int64 {
	var t int64
	for _, n := range d.blocks {
		t += int64(n)
	}
	return t
}
