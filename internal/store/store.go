package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/errdefs"
)

// The store's errors are errdefs kinds; this is what each means here (backends map
// their native errors to them once, and wrap them with the object and operation):
//   - errdefs.ErrNotFound: the object (or record) does not exist.
//   - errdefs.ErrCorrupt: bytes read or offered do not match the object's digest or
//     size, or a record the store keeps does not decode. Corrupt data is never
//     returned to a caller as if it were valid.
//   - errdefs.ErrInvalid: a malformed argument (digest of an unsupported algorithm, a
//     negative size, a range outside the object, a bad record name).
//   - errdefs.ErrUnavailable: the backend could not be reached or answered with a
//     transient failure; the same call may succeed later.
//   - errdefs.ErrUnsupported: an optional ability the backend lacks (Refs).
//   - a cancelled or expired ctx: an error wrapping ctx.Err().
//
// The messages keep the store's words: "object not found", "object content does not
// match its digest", "store unavailable".

// Info describes a stored object.
type Info struct {
	Digest digest.Digest
	// Size is the object's size: the length of its content. One exception, in
	// List only: a backend that cannot list the plain size of a compressed object
	// (S3 other than MinIO) reports its stored size there; Stat is always exact.
	Size int64
	// Stored is the bytes the backend keeps for the object, smaller than Size for
	// an object it keeps compressed; 0 when it is not known to differ (StoredBytes).
	Stored int64
	// ModTime is when the object was stored (for a Put of an object that already
	// existed, the first time), as the backend knows it; zero if it does not.
	// Garbage collection never deletes an object younger than its grace period,
	// and treats an object of unknown age as young.
	ModTime time.Time
}

// StoredBytes is the bytes the backend keeps for the object.
func (i Info) StoredBytes() int64 {
	if i.Stored > 0 {
		return i.Stored
	}
	return i.Size
}

// Store is a content-addressed object store.
//
// Rules every implementation follows (checked by storetest.Run):
//   - Objects are named by their sha256 digest and are immutable.
//   - All methods are safe for concurrent use, including concurrent Puts of the same
//     object; a reader never sees a partially written object.
//   - Every byte returned by Get or GetRange has been verified against the digest
//     (for GetRange, by whatever means the backend has; the local backend reads and
//     hashes the whole object). A mismatch is reported as errdefs.ErrCorrupt, never
//     served.
//   - A cancelled or expired ctx stops the call and returns an error wrapping
//     ctx.Err().
type Store interface {
	// Put stores exactly size bytes read from r under d. It returns
	// errdefs.ErrCorrupt and stores nothing if the bytes do not hash to d or their
	// count is not size.
	// Put of an object that already exists succeeds and may return without reading r.
	// The object is durable when Put returns nil.
	Put(ctx context.Context, d digest.Digest, size int64, r io.Reader) error

	// Get opens the whole object for reading. The reader verifies the content as it
	// goes: if the bytes do not match d, the Read that would return io.EOF returns an
	// error wrapping errdefs.ErrCorrupt instead. Callers must read to io.EOF before
	// trusting what they read, and must Close the reader. A missing object is
	// errdefs.ErrNotFound.
	Get(ctx context.Context, d digest.Digest) (io.ReadCloser, error)

	// GetRange returns length bytes of the object starting at off. A range that
	// does not lie inside the object is errdefs.ErrInvalid; a missing object
	// errdefs.ErrNotFound.
	GetRange(ctx context.Context, d digest.Digest, off, length int64) ([]byte, error)

	// Stat returns the object's size, or errdefs.ErrNotFound.
	Stat(ctx context.Context, d digest.Digest) (Info, error)

	// List calls fn for every stored object, in no particular order. Objects put or
	// deleted during List may or may not be seen. An error from fn stops List and is
	// returned as is.
	List(ctx context.Context, fn func(Info) error) error

	// Delete removes the object. Deleting an absent object returns errdefs.ErrNotFound.
	// Readers that already opened the object may finish reading it.
	Delete(ctx context.Context, d digest.Digest) error
}

// Exists reports whether s holds d.
func Exists(ctx context.Context, s Store, d digest.Digest) (bool, error) {
	_, err := s.Stat(ctx, d)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, errdefs.ErrNotFound):
		return false, nil
	default:
		return false, err
	}
}

// ReadAll reads the whole object d, verified.
func ReadAll(ctx context.Context, s Store, d digest.Digest) ([]byte, error) {
	return ReadAllSized(ctx, s, d, -1)
}

// ReadAllSized is ReadAll for an object whose size the caller expects (-1: unknown):
// it reads into one buffer of that size instead of growing one. An object of another
// size is errdefs.ErrCorrupt.
func ReadAllSized(ctx context.Context, s Store, d digest.Digest, size int64) ([]byte, error) {
	rc, err := s.Get(ctx, d)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	if m, ok := rc.(*InMemory); ok { // read, decoded and verified already: no copy
		b := m.Bytes()
		if size >= 0 && int64(len(b)) != size {
			return nil, fmt.Errorf("object %s: %d bytes, want %d: object %w", d, len(b), size, errdefs.ErrCorrupt)
		}
		return b, nil
	}
	if size < 0 {
		return io.ReadAll(rc)
	}
	b := make([]byte, size+1) // one spare byte to notice a longer object
	n, err := io.ReadFull(rc, b)
	switch {
	case err == io.ErrUnexpectedEOF && int64(n) < size:
		return nil, fmt.Errorf("object %s: %d bytes, want %d: object %w", d, n, size, errdefs.ErrCorrupt)
	case err == io.ErrUnexpectedEOF || err == io.EOF:
		// n == size: the verifying reader already checked the digest at EOF.
	case err == nil:
		return nil, fmt.Errorf("object %s: more than %d bytes: object %w", d, size, errdefs.ErrCorrupt)
	default:
		return nil, err
	}
	return b[:n:n], nil
}

// PutBytes stores b under its sha256 digest and returns the digest.
func PutBytes(ctx context.Context, s Store, b []byte) (digest.Digest, error) {
	d := digest.FromBytes(b)
	if err := s.Put(ctx, d, int64(len(b)), bytesReader(b)); err != nil {
		return "", err
	}
	return d, nil
}

// CheckDigest returns errdefs.ErrInvalid unless d is a well-formed sha256 digest.
func CheckDigest(d digest.Digest) error {
	if err := d.Validate(); err != nil {
		return fmt.Errorf("digest %q: %w: %v", d, errdefs.ErrInvalid, err)
	}
	if d.Algorithm() != digest.SHA256 {
		return fmt.Errorf("digest %q: %w: only sha256 is supported", d, errdefs.ErrInvalid)
	}
	return nil
}
