package image

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/slacker-dev/slacker/internal/errdefs"
)

// MediaType of an encoded descriptor (also the OCI artifactType of a pushed image).
const MediaType = "application/vnd.slacker.image.v1+json"

// SchemaVersion is the only version this package reads and writes.
const SchemaVersion = 1

// MaxSize bounds an encoded descriptor.
const MaxSize = 4 << 20

// ErrMalformed is wrapped by every Decode error (errdefs.ErrInvalid).
var ErrMalformed = errdefs.New(errdefs.ErrInvalid, "malformed image descriptor")

// Descriptor names an image's snapshot and carries its configuration.
type Descriptor struct {
	SchemaVersion int           `json:"schemaVersion"`
	MediaType     string        `json:"mediaType"`
	Snapshot      digest.Digest `json:"snapshot"` // the flattened root filesystem
	Size          int64         `json:"size"`     // its virtual size in bytes
	DataSize      int64         `json:"dataSize"` // bytes of it that are not holes
	// Layers is the lineage: one entry per OCI layer converted (and one per commit),
	// bottom first. Converting an image that shares a prefix reuses these snapshots.
	Layers   []Layer             `json:"layers,omitempty"`
	Config   ocispec.ImageConfig `json:"config"`
	Platform ocispec.Platform    `json:"platform,omitzero"`
	Source   *Source             `json:"source,omitempty"`
	Created  time.Time           `json:"created"`
}

// Layer is one step of an image's history.
type Layer struct {
	Snapshot digest.Digest `json:"snapshot"`
	DiffID   digest.Digest `json:"diffID,omitempty"`  // uncompressed OCI layer digest
	ChainID  digest.Digest `json:"chainID,omitempty"` // OCI chain ID up to this layer
	Comment  string        `json:"comment,omitempty"`
}

// Source records where a converted image came from.
type Source struct {
	Reference      string        `json:"reference,omitempty"`
	ManifestDigest digest.Digest `json:"manifestDigest,omitempty"`
	CompressedSize int64         `json:"compressedSize,omitempty"` // sum of its layer blobs
	LayersSize     int64         `json:"layersSize,omitempty"`     // sum of uncompressed layers
}

// Encode returns the descriptor's JSON.
func (d *Descriptor) Encode() ([]byte, error) {
	c := *d
	c.SchemaVersion, c.MediaType = SchemaVersion, MediaType
	if err := c.validate(); err != nil {
		return nil, err
	}
	b, err := json.Marshal(&c)
	if err != nil {
		return nil, err
	}
	if len(b) > MaxSize {
		return nil, fmt.Errorf("%w: %d bytes encoded, more than %d", ErrMalformed, len(b), MaxSize)
	}
	return b, nil
}

// Decode parses and validates an encoded descriptor.
func Decode(b []byte) (*Descriptor, error) {
	if len(b) > MaxSize {
		return nil, fmt.Errorf("%w: %d bytes, more than %d", ErrMalformed, len(b), MaxSize)
	}
	var d Descriptor
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&d); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: trailing data", ErrMalformed)
	}
	if d.SchemaVersion != SchemaVersion {
		return nil, fmt.Errorf("%w: schema version %d (this build reads %d)", ErrMalformed, d.SchemaVersion, SchemaVersion)
	}
	if d.MediaType != MediaType {
		return nil, fmt.Errorf("%w: media type %q, want %q", ErrMalformed, d.MediaType, MediaType)
	}
	if err := d.validate(); err != nil {
		return nil, err
	}
	return &d, nil
}

func checkDigest(what string, d digest.Digest, required bool) error {
	if d == "" && !required {
		return nil
	}
	if err := d.Validate(); err != nil || d.Algorithm() != digest.SHA256 {
		return fmt.Errorf("%w: %s %q is not a sha256 digest", ErrMalformed, what, d)
	}
	return nil
}

func (d *Descriptor) validate() error {
	if err := checkDigest("snapshot", d.Snapshot, true); err != nil {
		return err
	}
	if d.Size <= 0 || d.Size%4096 != 0 || d.DataSize < 0 || d.DataSize > d.Size {
		return fmt.Errorf("%w: size %d / data size %d", ErrMalformed, d.Size, d.DataSize)
	}
	if len(d.Layers) > 1000 {
		return fmt.Errorf("%w: %d layers", ErrMalformed, len(d.Layers))
	}
	for i, l := range d.Layers {
		if err := checkDigest(fmt.Sprintf("layer %d snapshot", i), l.Snapshot, true); err != nil {
			return err
		}
		if err := checkDigest(fmt.Sprintf("layer %d diffID", i), l.DiffID, false); err != nil {
			return err
		}
		if err := checkDigest(fmt.Sprintf("layer %d chainID", i), l.ChainID, false); err != nil {
			return err
		}
	}
	if n := len(d.Layers); n > 0 && d.Layers[n-1].Snapshot != d.Snapshot {
		return fmt.Errorf("%w: the last layer's snapshot %s is not the image's %s", ErrMalformed, d.Layers[n-1].Snapshot, d.Snapshot)
	}
	if d.Source != nil {
		if err := checkDigest("source manifest", d.Source.ManifestDigest, false); err != nil {
			return err
		}
	}
	return nil
}

// ChainID computes the OCI chain ID of a layer given its parent's chain ID (empty
// for the bottom layer) and its diff ID.
func ChainID(parent, diffID digest.Digest) digest.Digest {
	if parent == "" {
		return diffID
	}
	return digest.FromString(parent.String() + " " + diffID.String())
}

// NotInStore is the error every path answers for an image whose snapshot the
// node's store does not have (`slacker pull`, a containerd or CRI pull through the
// snapshotter): the image, the snapshot, the node's store, and what to do.
// It is errdefs.ErrNotFound.
func NotInStore(image string, snapshot digest.Digest, store string) error {
	return errdefs.Errorf(errdefs.ErrNotFound, "%s names snapshot %s, which is not in this node's store (%s): "+
		"the node that pushed it must share the store, or slackerd must be pointed at the store it was pushed to (docs/containerd.md)",
		image, snapshot, store)
}
