package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash"
	"io"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/errdefs"
)

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

// VerifyingReader wraps r, which should yield the content of d (size bytes, or any
// size if size < 0). The Read that reaches the end of r returns an error wrapping
// errdefs.ErrCorrupt instead of io.EOF if the content does not match. Backends use it to
// implement Get.
func VerifyingReader(r io.Reader, d digest.Digest, size int64) io.Reader {
	return &verifyingReader{r: r, want: d, size: size, h: d.Algorithm().Hash()}
}

type verifyingReader struct {
	r    io.Reader
	want digest.Digest
	size int64
	n    int64
	h    hash.Hash
	err  error
}

func (v *verifyingReader) Read(p []byte) (int, error) {
	if v.err != nil {
		return 0, v.err
	}
	n, err := v.r.Read(p)
	v.h.Write(p[:n])
	v.n += int64(n)
	if v.size >= 0 && v.n > v.size {
		v.err = fmt.Errorf("object %s: more than %d bytes: object %w", v.want, v.size, errdefs.ErrCorrupt)
		return 0, v.err
	}
	if err == io.EOF {
		got := digest.NewDigest(v.want.Algorithm(), v.h)
		switch {
		case v.size >= 0 && v.n != v.size:
			v.err = fmt.Errorf("object %s: %d bytes, want %d: object %w", v.want, v.n, v.size, errdefs.ErrCorrupt)
		case got != v.want:
			v.err = fmt.Errorf("object %s: content hashes to %s: object %w", v.want, got, errdefs.ErrCorrupt)
		default:
			v.err = io.EOF
		}
		return n, v.err
	}
	if err != nil {
		v.err = err
	}
	return n, err
}

// Verify returns an error wrapping errdefs.ErrCorrupt unless b hashes to d.
func Verify(d digest.Digest, b []byte) error {
	if got := d.Algorithm().FromBytes(b); got != d {
		return fmt.Errorf("object %s: content hashes to %s: object %w", d, got, errdefs.ErrCorrupt)
	}
	return nil
}

// VerifyingBody is the Get reader of a backend that streams a remote body: the
// body's bytes, verified as VerifyingReader does, with an error of the read other
// than the end or a mismatch (a connection cut mid-transfer, a deadline) passed
// through mapErr once and named after d. Close closes the body, then calls done
// (e.g. to cancel the request's context).
func VerifyingBody(body io.ReadCloser, d digest.Digest, size int64, mapErr func(error) error, done func()) io.ReadCloser {
	return &verifyingBody{body: body, vr: VerifyingReader(body, d, size), d: d, mapErr: mapErr, done: done}
}

type verifyingBody struct {
	body   io.ReadCloser
	vr     io.Reader
	d      digest.Digest
	mapErr func(error) error
	done   func()
}

func (b *verifyingBody) Read(p []byte) (int, error) {
	n, err := b.vr.Read(p)
	if err != nil && err != io.EOF && !errors.Is(err, errdefs.ErrCorrupt) {
		err = fmt.Errorf("get %s: %w", b.d, b.mapErr(err))
	}
	return n, err
}

func (b *verifyingBody) Close() error {
	err := b.body.Close()
	if b.done != nil {
		b.done()
	}
	return err
}

// ReadRange is GetRange for a backend whose unit of verification is the whole
// object: it reads the object whole through s.Get (verified), then cuts the range
// out. A range that does not lie inside the object is errdefs.ErrInvalid.
func ReadRange(ctx context.Context, s Store, d digest.Digest, off, length int64) ([]byte, error) {
	if err := CheckDigest(d); err != nil {
		return nil, err
	}
	b, err := ReadAll(ctx, s, d)
	if err != nil {
		return nil, err
	}
	if off < 0 || length < 0 || off+length > int64(len(b)) {
		return nil, fmt.Errorf("get %s [%d, +%d) of %d bytes: %w", d, off, length, len(b), errdefs.ErrInvalid)
	}
	return b[off : off+length : off+length], nil
}
