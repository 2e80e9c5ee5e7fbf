package archive

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/slacker-dev/slacker/internal/errdefs"
)

// MaxZstdWindow is the largest zstd window Decompress accepts (128 MiB, what
// `zstd --long=27` writes). A frame asking for more is refused before any large
// allocation, so a crafted frame header cannot make the decoder reserve gigabytes.
const MaxZstdWindow = 128 << 20

var (
	magicGzip = []byte{0x1f, 0x8b}
	magicZstd = []byte{0x28, 0xb5, 0x2f, 0xfd}
	magicXz   = []byte{0xfd, '7', 'z', 'X', 'Z', 0x00}
	// bzip2: "BZh", a block-size digit, then the first block's magic (pi).
	magicBzip2Block = []byte{0x31, 0x41, 0x59, 0x26, 0x53, 0x59}
)

func isBzip2(h []byte) bool {
	return len(h) >= 10 && h[0] == 'B' && h[1] == 'Z' && h[2] == 'h' &&
		h[3] >= '1' && h[3] <= '9' && bytes.Equal(h[4:10], magicBzip2Block)
}

// Decompress sniffs the first bytes of a layer blob and returns the uncompressed tar
// stream: gzip (multi-member streams included), zstd (multi-frame, window at most
// MaxZstdWindow, one decoding goroutine) or plain tar, passed through. xz and bzip2,
// which the OCI image spec does not allow, fail with errdefs.ErrUnsupported.
//
// Memory stays bounded whatever the input (a few hundred KiB for gzip, about the
// window for zstd); how many bytes come out is not bounded here: limit that with
// Options.MaxBytes and the size of the target filesystem. Close releases the decoder.
func Decompress(r io.Reader) (io.ReadCloser, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	head, err := br.Peek(10)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("sniff layer compression: %w", err)
	}
	switch {
	case bytes.HasPrefix(head, magicGzip):
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("open gzip layer: %w", err)
		}
		return zr, nil
	case bytes.HasPrefix(head, magicZstd):
		zr, err := zstd.NewReader(br,
			zstd.WithDecoderConcurrency(1),
			zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxWindow(MaxZstdWindow),
			zstd.WithDecoderMaxMemory(MaxZstdWindow),
		)
		if err != nil {
			return nil, fmt.Errorf("open zstd layer: %w", err)
		}
		return zstdReader{zr}, nil
	case bytes.HasPrefix(head, magicXz):
		return nil, errdefs.Errorf(errdefs.ErrUnsupported, "unsupported layer compression: xz")
	case isBzip2(head):
		return nil, errdefs.Errorf(errdefs.ErrUnsupported, "unsupported layer compression: bzip2")
	default:
		return io.NopCloser(br), nil
	}
}

// zstdReader reports a frame that asks for more memory than allowed as ErrLimit.
type zstdReader struct{ d *zstd.Decoder }

func (z zstdReader) Read(b []byte) (int, error) {
	n, err := z.d.Read(b)
	if errors.Is(err, zstd.ErrWindowSizeExceeded) || errors.Is(err, zstd.ErrDecoderSizeExceeded) {
		err = fmt.Errorf("%w: zstd window over %d MiB: %w", ErrLimit, MaxZstdWindow>>20, err)
	}
	return n, err
}

func (z zstdReader) Close() error {
	z.d.Close()
	return nil
}
