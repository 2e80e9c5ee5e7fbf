package trace

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/blockmap"
	"github.com/slacker-dev/slacker/internal/errdefs"
)

// Version is the only version Decode accepts.
const Version = 1

// MaxChunks bounds a trace: 16384 chunks is 4 GiB of 256 KiB chunks, far more than
// any start-up reads, and about 1.6 MB encoded (records hold at most 16 MiB).
const MaxChunks = 16384

// MaxChunkSize bounds one chunk's size in a trace.
const MaxChunkSize = 64 << 20

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
	if t.Version != Version {
		return fmt.Errorf("%w: version %d (this program reads %d)", ErrMalformed, t.Version, Version)
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
