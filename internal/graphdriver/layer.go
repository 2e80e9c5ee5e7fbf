package graphdriver

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/errdefs"
)

// A Slacker layer is an ordinary, valid layer tar holding one entry: a hard link
// named LayerEntryName whose link target is Explanation, with the layer's Marker as
// JSON in the PAX record MarkerKey. The entry has no content, so Docker's tar-split
// reassembles it on push without reading any file from the driver, and any other
// unpacker (stock dockerd, containerd, umoci) fails on the dangling hard link with
// an error that quotes Explanation. See docs/format.md.
const (
	// MarkerKey is the PAX record carrying the marker.
	MarkerKey = "SLACKER.layer"
	// LayerEntryName is the one entry's name.
	LayerEntryName = ".slacker-layer"
	// Explanation is the hard link's target: what a stock unpacker prints when it
	// fails on a Slacker layer. It names no path separator and stays under the
	// 255-byte limit of a file name.
	Explanation = "SLACKER LAYER - run this image with the slacker graph driver on a node sharing its store. " +
		"For stock Docker, flatten it there (docker export, docker import) or commit with graphdriver.shared_store off. " +
		"See docker.md in Slacker's docs"
	// MarkerVersion is the only marker version read and written.
	MarkerVersion = 1
	// maxLayerPeek bounds how much of a layer is read to recognize a Slacker layer.
	maxLayerPeek = 64 << 10
)

// ErrNotSlackerLayer is returned by ReadLayer for an ordinary layer
// (errdefs.ErrUnsupported).
var ErrNotSlackerLayer = errdefs.New(errdefs.ErrUnsupported, "not a Slacker layer")

// ErrMalformedLayer wraps every error of a layer that claims to be a Slacker layer
// but is not a valid one (errdefs.ErrInvalid).
var ErrMalformedLayer = errdefs.New(errdefs.ErrInvalid, "malformed Slacker layer")

// Marker is what a Slacker layer says.
type Marker struct {
	Version int `json:"version"`
	// Snapshot is the whole filesystem after this layer (snapshots are flattened).
	Snapshot digest.Digest `json:"snapshot"`
	// Parent is the snapshot the layer was made on, for information: applying the
	// layer ignores it, since Snapshot is complete.
	Parent digest.Digest `json:"parent,omitempty"`
	// Store is the location of the store holding the snapshot on the node that made
	// the layer: a node that cannot find the snapshot says where it was.
	Store string `json:"store,omitempty"`
	// Size is the bytes of files the layer adds or changes (Docker's layer size).
	Size int64 `json:"size"`
}

func (m Marker) validate() error {
	if m.Version != MarkerVersion {
		return fmt.Errorf("%w: version %d (this Slacker reads version %d; upgrade it)", ErrMalformedLayer, m.Version, MarkerVersion)
	}
	if err := m.Snapshot.Validate(); err != nil || m.Snapshot.Algorithm() != digest.SHA256 {
		return fmt.Errorf("%w: snapshot %q is not a sha256 digest", ErrMalformedLayer, m.Snapshot)
	}
	if m.Parent != "" {
		if err := m.Parent.Validate(); err != nil || m.Parent.Algorithm() != digest.SHA256 {
			return fmt.Errorf("%w: parent %q is not a sha256 digest", ErrMalformedLayer, m.Parent)
		}
	}
	if m.Size < 0 {
		return fmt.Errorf("%w: negative size", ErrMalformedLayer)
	}
	return nil
}

// EncodeLayer returns the Slacker layer tar of m. The bytes depend on m only, so one
// snapshot always makes one layer digest.
func EncodeLayer(m Marker) ([]byte, error) {
	if err := m.validate(); err != nil {
		return nil, err
	}
	js, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := &tar.Header{
		Typeflag:   tar.TypeLink,
		Name:       LayerEntryName,
		Linkname:   Explanation,
		Mode:       0o644,
		ModTime:    time.Unix(0, 0),
		PAXRecords: map[string]string{MarkerKey: string(js)},
		Format:     tar.FormatPAX,
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// IsSlackerLayer reports whether the start of a layer tar (at least its first
// header and PAX records; a short read at the end of the stream is fine) is a Slacker
// layer's.
func IsSlackerLayer(prefix []byte) bool {
	hdr, err := tar.NewReader(bytes.NewReader(prefix)).Next()
	if err != nil {
		return false
	}
	_, ok := hdr.PAXRecords[MarkerKey]
	return ok
}

// DecodeLayer reads a whole layer tar (at most maxLayerPeek bytes are accepted for a
// Slacker layer). It returns ErrNotSlackerLayer for an ordinary layer and an error
// wrapping ErrMalformedLayer for one that carries a marker but breaks the format.
func DecodeLayer(b []byte) (Marker, error) {
	var m Marker
	tr := tar.NewReader(bytes.NewReader(b))
	hdr, err := tr.Next()
	if err != nil {
		return m, ErrNotSlackerLayer
	}
	js, ok := hdr.PAXRecords[MarkerKey]
	if !ok {
		return m, ErrNotSlackerLayer
	}
	if len(b) > maxLayerPeek {
		return m, fmt.Errorf("%w: %d bytes (a Slacker layer is one header)", ErrMalformedLayer, len(b))
	}
	if hdr.Typeflag != tar.TypeLink || hdr.Name != LayerEntryName || hdr.Size != 0 {
		return m, fmt.Errorf("%w: entry %q of type %q", ErrMalformedLayer, hdr.Name, hdr.Typeflag)
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(js)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return m, fmt.Errorf("%w: marker: %v", ErrMalformedLayer, err)
	}
	if dec.More() {
		return m, fmt.Errorf("%w: data after the marker", ErrMalformedLayer)
	}
	if err := m.validate(); err != nil {
		return m, err
	}
	if _, err := tr.Next(); err != io.EOF {
		return m, fmt.Errorf("%w: more than one entry", ErrMalformedLayer)
	}
	return m, nil
}
