package store

import (
	"fmt"
	"sync"

	"github.com/klauspost/compress/zstd"
	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/errdefs"
)

// How a backend keeps an object's bytes. An object is always named by the digest
// of its plain content, whatever its encoding: the encoding is the backend's
// business, recorded beside the object (S3 metadata, a pack's object list), and
// every read decodes and verifies the plain bytes before returning them.
const (
	// EncodingRaw: the stored bytes are the content.
	EncodingRaw = ""
	// EncodingZstd: the stored bytes are one zstd frame of the content, with the
	// content's size in its header.
	EncodingZstd = "zstd"
)

// MaxEncodedObject is the largest object EncodeObject compresses. Chunks (256 KiB by
// default, 64 MiB at most) and block maps are below it; larger objects are kept raw,
// so that decoding never needs more memory than one object of this size.
const MaxEncodedObject = 64 << 20

// encodeMinSaving is the least share of an object compression must save for the
// compressed form to be kept (1/16, about 6%): below it, the decode on every read
// costs more than the bytes saved on the wire.
const encodeMinSaving = 16

var (
	encOnce sync.Once
	encoder *zstd.Encoder
	decoder *zstd.Decoder
)

func codecs() (*zstd.Encoder, *zstd.Decoder) {
	encOnce.Do(func() {
		var err error
		// EncodeAll and DecodeAll are safe for concurrent use; one of each serves every
		// goroutine. The default level (zstd 3) compresses a 256 KiB chunk in about a
		// millisecond; decoding is several times faster.
		encoder, err = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1),
			zstd.WithZeroFrames(true), zstd.WithEncoderCRC(false))
		if err != nil {
			panic(fmt.Sprintf("zstd encoder: %v", err))
		}
		decoder, err = zstd.NewReader(nil, zstd.WithDecoderConcurrency(0),
			zstd.WithDecoderMaxMemory(MaxEncodedObject), zstd.WithDecoderMaxWindow(MaxEncodedObject))
		if err != nil {
			panic(fmt.Sprintf("zstd decoder: %v", err))
		}
	})
	return encoder, decoder
}

// EncodeObject returns how a backend that compresses should keep plain: its zstd
// frame and EncodingZstd when that saves at least a sixteenth of the bytes, else
// plain itself and EncodingRaw (data that does not compress, and objects over
// MaxEncodedObject).
func EncodeObject(plain []byte) ([]byte, string) {
	if len(plain) == 0 || len(plain) > MaxEncodedObject {
		return plain, EncodingRaw
	}
	enc, _ := codecs()
	out := enc.EncodeAll(plain, make([]byte, 0, len(plain)-len(plain)/encodeMinSaving))
	if len(out) > len(plain)-len(plain)/encodeMinSaving {
		return plain, EncodingRaw
	}
	return out, EncodingZstd
}

// DecodeObject returns the content of object d (size bytes) from what a backend
// stored with encoding, verified against d. Stored bytes that do not decode, decode
// to another size or hash to another digest are errdefs.ErrCorrupt; an encoding
// this version does not know is errdefs.ErrUnsupported. Nothing is allocated beyond
// size (checked against the frame header before decoding).
func DecodeObject(d digest.Digest, size int64, encoding string, stored []byte) ([]byte, error) {
	var plain []byte
	switch encoding {
	case EncodingRaw:
		plain = stored
	case EncodingZstd:
		if size < 0 || size > MaxEncodedObject {
			return nil, fmt.Errorf("object %s: compressed object of %d bytes out of range: object %w", d, size, errdefs.ErrCorrupt)
		}
		var h zstd.Header
		if err := h.Decode(stored); err != nil || !h.HasFCS || h.FrameContentSize != uint64(size) {
			return nil, fmt.Errorf("object %s: compressed form does not describe %d bytes (%v): object %w", d, size, err, errdefs.ErrCorrupt)
		}
		_, dec := codecs()
		out, err := dec.DecodeAll(stored, make([]byte, 0, size))
		if err != nil {
			return nil, fmt.Errorf("object %s: decompress: %v: object %w", d, err, errdefs.ErrCorrupt)
		}
		plain = out
	default:
		return nil, fmt.Errorf("object %s: stored with encoding %q, which this version cannot read: %w", d, encoding, errdefs.ErrUnsupported)
	}
	if int64(len(plain)) != size {
		return nil, fmt.Errorf("object %s: %d bytes, want %d: object %w", d, len(plain), size, errdefs.ErrCorrupt)
	}
	if err := Verify(d, plain); err != nil {
		return nil, err
	}
	return plain, nil
}

// ParseCompress reads a store location's compress parameter: "zstd" (or a true
// value) compresses, "none" (or a false value) does not.
func ParseCompress(v string) (bool, error) {
	switch v {
	case EncodingZstd, "1", "true", "yes":
		return true, nil
	case "none", "0", "false", "no":
		return false, nil
	}
	return false, fmt.Errorf("compress %q: want zstd or none", v)
}
