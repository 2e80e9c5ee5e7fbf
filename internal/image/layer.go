package image

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"time"

	"github.com/slacker-dev/slacker/internal/errdefs"
)

// The Slacker layer: how a Slacker image travels as an ordinary OCI image. Its one
// layer is a tiny uncompressed tar carrying the descriptor (Slacker's
// backward-compatible trick: the layer names a snapshot instead of holding files).
const (
	// LayerDescriptorPath is the descriptor's path inside the layer tar.
	LayerDescriptorPath = ".slacker/image.json"
	// LayerReadmePath explains the image to whoever unpacks the layer.
	LayerReadmePath = ".slacker/README"
	// MaxLayerSize bounds a Slacker layer: the descriptor, the README and tar framing.
	MaxLayerSize = MaxSize + 64<<10
)

// ErrNotSlackerLayer: a layer tar that is not a Slacker layer (errdefs.ErrUnsupported).
var ErrNotSlackerLayer = errdefs.New(errdefs.ErrUnsupported, "not a Slacker layer")

// Readme is the text of LayerReadmePath for d.
func Readme(d *Descriptor) string {
	return fmt.Sprintf(`This is a Slacker image. Its root filesystem is the Slacker snapshot
%s (%d bytes), fetched lazily by slackerd; this layer only names it.

Run it with containerd and the Slacker snapshotter (ctr/nerdctl --snapshotter slacker,
or CRI with snapshotter = "slacker"), or with slacker run. A runtime that unpacks this
layer instead gets only this directory. See docs/containerd.md.
`, d.Snapshot, d.Size)
}

// EncodeLayer returns the Slacker layer tar of d. It is reproducible: the same
// descriptor gives the same bytes.
func EncodeLayer(d *Descriptor) ([]byte, error) {
	desc, err := d.Encode()
	if err != nil {
		return nil, err
	}
	mtime := d.Created.UTC().Truncate(time.Second)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := func(name string, typ byte, mode int64, size int) *tar.Header {
		return &tar.Header{Name: name, Typeflag: typ, Mode: mode, Size: int64(size), ModTime: mtime, Format: tar.FormatPAX}
	}
	if err := tw.WriteHeader(hdr(".slacker/", tar.TypeDir, 0o755, 0)); err != nil {
		return nil, err
	}
	readme := Readme(d)
	for _, f := range []struct {
		name string
		data []byte
	}{{LayerDescriptorPath, desc}, {LayerReadmePath, []byte(readme)}} {
		if err := tw.WriteHeader(hdr(f.name, tar.TypeReg, 0o644, len(f.data))); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// DecodeLayer finds and decodes the descriptor in an uncompressed layer tar of at
// most MaxLayerSize bytes. A tar without it is ErrNotSlackerLayer.
func DecodeLayer(r io.Reader) (*Descriptor, error) {
	lr := &io.LimitedReader{R: r, N: MaxLayerSize + 1}
	tr := tar.NewReader(lr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil, ErrNotSlackerLayer
		}
		if err != nil {
			if lr.N <= 0 {
				return nil, fmt.Errorf("%w: layer larger than %d bytes", ErrNotSlackerLayer, MaxLayerSize)
			}
			return nil, fmt.Errorf("%w: %v", ErrNotSlackerLayer, err)
		}
		if h.Typeflag != tar.TypeReg || (h.Name != LayerDescriptorPath && h.Name != "./"+LayerDescriptorPath) {
			continue
		}
		if h.Size > MaxSize {
			return nil, fmt.Errorf("%w: descriptor of %d bytes", ErrMalformed, h.Size)
		}
		b, err := io.ReadAll(io.LimitReader(tr, MaxSize+1))
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
		}
		return Decode(b)
	}
}
