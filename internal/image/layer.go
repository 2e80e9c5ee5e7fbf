package image

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"

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
	// LayerMapPath is the snapshot's block map, carried in the layer when it is at
	// most MaxCarriedMap bytes (EncodeLayerMap), so that a pull need not fetch it
	// from the store.
	LayerMapPath = ".slacker/blockmap"
	// MaxCarriedMap bounds a block map carried in a layer.
	MaxCarriedMap = 1 << 20
	// MaxLayerSize bounds a Slacker layer: the descriptor, the README, a carried
	// block map and tar framing.
	MaxLayerSize = MaxSize + MaxCarriedMap + 64<<10
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
func EncodeLayer(d *Descriptor) ([]byte, error) { return EncodeLayerMap(d, nil) }

// EncodeLayerMap is EncodeLayer with the snapshot's encoded block map carried in
// the layer (LayerMapPath), if blockMap is not nil. The map must be d's snapshot's
// (its digest is the snapshot ID) and at most MaxCarriedMap bytes.
func EncodeLayerMap(d *Descriptor, blockMap []byte) ([]byte, error) {
	if blockMap != nil {
		if len(blockMap) > MaxCarriedMap {
			return nil, fmt.Errorf("%w: block map of %d bytes, more than %d to carry", ErrMalformed, len(blockMap), MaxCarriedMap)
		}
		if got := digest.FromBytes(blockMap); got != d.Snapshot {
			return nil, fmt.Errorf("%w: the block map to carry is snapshot %s, not the image's %s", ErrMalformed, got, d.Snapshot)
		}
	}
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
	}{{LayerDescriptorPath, desc}, {LayerReadmePath, []byte(readme)}, {LayerMapPath, blockMap}} {
		if f.data == nil {
			continue
		}
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
	d, _, err := DecodeLayerMap(r)
	return d, err
}

// DecodeLayerMap is DecodeLayer that also returns the block map the layer
// carries (nil if none). A carried map is checked against the descriptor's
// snapshot (the map's digest is the snapshot ID): one that is not the
// snapshot's, or is larger than MaxCarriedMap, is ErrMalformed. The map is not
// decoded here (blockmap.Decode does that where it is used).
func DecodeLayerMap(r io.Reader) (*Descriptor, []byte, error) {
	lr := &io.LimitedReader{R: r, N: MaxLayerSize + 1}
	tr := tar.NewReader(lr)
	var d *Descriptor
	var blockMap []byte
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			if d != nil { // what follows the descriptor is not needed to run it
				break
			}
			if lr.N <= 0 {
				return nil, nil, fmt.Errorf("%w: layer larger than %d bytes", ErrNotSlackerLayer, MaxLayerSize)
			}
			return nil, nil, fmt.Errorf("%w: %v", ErrNotSlackerLayer, err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		switch strings.TrimPrefix(h.Name, "./") {
		case LayerDescriptorPath:
			if d != nil {
				return nil, nil, fmt.Errorf("%w: two descriptors in the layer", ErrMalformed)
			}
			if h.Size > MaxSize {
				return nil, nil, fmt.Errorf("%w: descriptor of %d bytes", ErrMalformed, h.Size)
			}
			b, err := io.ReadAll(io.LimitReader(tr, MaxSize+1))
			if err != nil {
				return nil, nil, fmt.Errorf("%w: %v", ErrMalformed, err)
			}
			if d, err = Decode(b); err != nil {
				return nil, nil, err
			}
		case LayerMapPath:
			if blockMap != nil {
				return nil, nil, fmt.Errorf("%w: two block maps in the layer", ErrMalformed)
			}
			if h.Size > MaxCarriedMap {
				return nil, nil, fmt.Errorf("%w: carried block map of %d bytes, more than %d", ErrMalformed, h.Size, MaxCarriedMap)
			}
			b, err := io.ReadAll(io.LimitReader(tr, MaxCarriedMap+1))
			if err != nil { // a torn map is no map: the pull fetches it from the store
				blockMap = nil
				break
			}
			blockMap = b
		}
	}
	if d == nil {
		return nil, nil, ErrNotSlackerLayer
	}
	if blockMap != nil {
		if got := digest.FromBytes(blockMap); got != d.Snapshot {
			return nil, nil, fmt.Errorf("%w: the layer carries the block map of %s, not of its snapshot %s", ErrMalformed, got, d.Snapshot)
		}
	}
	return d, blockMap, nil
}
