package store

import (
	"bytes"
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
