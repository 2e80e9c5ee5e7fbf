package archive_test

import (
	"bytes"
	"errors"
	"io"
	"runtime"
	"testing"

	"github.com/slacker-dev/slacker/internal/archive"
	"github.com/slacker-dev/slacker/internal/errdefs"
)

func TestDecompress(t *testing.T) {
	tarball := layer(t, file("a", "hello"), dir("d"), file("d/b", string(bytes.Repeat([]byte("0123456789"), 100000))))
	tests := []struct {
		name    string
		in      []byte
		want    []byte
		wantErr error
	}{
		{name: "plain tar", in: tarball, want: tarball},
		{name: "gzip", in: compress(t, "gzip", tarball), want: tarball},
		{name: "zstd", in: compress(t, "zstd", tarball), want: tarball},
		{name: "gzip members", in: append(compress(t, "gzip", tarball[:1000]), compress(t, "gzip", tarball[1000:])...), want: tarball},
		{name: "zstd frames", in: append(compress(t, "zstd", tarball[:1000]), compress(t, "zstd", tarball[1000:])...), want: tarball},
		{name: "empty", in: nil, want: nil},
		{name: "short", in: []byte("ab"), want: []byte("ab")},
		{name: "xz", in: []byte("\xfd7zXZ\x00\x00\x04\xe6\xd6\xb4\x46"), wantErr: errdefs.ErrUnsupported},
		{name: "bzip2", in: []byte("BZh91AY&SY\x00\x00"), wantErr: errdefs.ErrUnsupported},
		{name: "tar whose first name looks like bzip2", in: layer(t, file("BZh91", "x")), want: layer(t, file("BZh91", "x"))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rc, err := archive.Decompress(bytes.NewReader(tc.in))
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				return
			}
			must(t, err)
			defer rc.Close()
			got, err := io.ReadAll(rc)
			must(t, err)
			if !bytes.Equal(got, tc.want) {
				t.Errorf("got %d bytes, want %d", len(got), len(tc.want))
			}
		})
	}
}

// TestDecompressZstdWindow feeds a frame whose header asks for a 2 GiB window: the
// decoder must refuse it rather than reserve the memory.
func TestDecompressZstdWindow(t *testing.T) {
	// Magic, frame header descriptor 0 (no content size, not single segment), window
	// descriptor exponent 21 (2^31 bytes), then a last raw block of 4 bytes.
	frame := []byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, 21 << 3, 0x21, 0x00, 0x00, 'd', 'a', 't', 'a'}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	rc, err := archive.Decompress(bytes.NewReader(frame))
	if err == nil {
		_, err = io.ReadAll(rc)
		rc.Close()
	}
	runtime.ReadMemStats(&after)
	if !errors.Is(err, archive.ErrLimit) {
		t.Fatalf("err = %v, want ErrLimit", err)
	}
	t.Logf("error: %v", err)
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20 {
		t.Errorf("refusing the frame allocated %d MiB", alloc>>20)
	}
}

// TestDecompressBombMemory decompresses 1 GiB bombs in full and checks the memory
// allocated stays far below the output size.
func TestDecompressBombMemory(t *testing.T) {
	for _, kind := range []string{"gzip", "zstd"} {
		t.Run(kind, func(t *testing.T) {
			in := bomb(t, kind, bombSpec{n: 1, size: 1 << 30})
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			rc, err := archive.Decompress(bytes.NewReader(in))
			must(t, err)
			n, err := io.CopyBuffer(io.Discard, rc, make([]byte, 1<<20))
			must(t, err)
			must(t, rc.Close())
			runtime.ReadMemStats(&after)
			if n != 1<<30+512+1024 {
				t.Errorf("decompressed %d bytes", n)
			}
			alloc := after.TotalAlloc - before.TotalAlloc
			t.Logf("%d compressed bytes -> %d bytes, %d KiB allocated", len(in), n, alloc>>10)
			if alloc > 32<<20 {
				t.Errorf("allocated %d MiB to decompress", alloc>>20)
			}
		})
	}
}
