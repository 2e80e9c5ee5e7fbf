package ocistore

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/labels"
	"github.com/slacker-dev/slacker/internal/store"
)

// Media types and annotations of a pack manifest (see docs/stores.md).
const (
	// PackMediaType is the artifact type of a pack manifest and the media type of
	// its one layer, the pack blob: objects laid end to end.
	PackMediaType = "application/vnd.slacker.pack.v1"
	// MaxManifestSize bounds a pack manifest (registries refuse more than 4 MiB).
	MaxManifestSize = 4 << 20
)

// emptyJSON is the OCI empty descriptor's content, the config of every pack.
var (
	emptyJSON   = []byte("{}")
	emptyDigest = digest.FromBytes(emptyJSON)
)

// tagRE matches the tag of a pack: "p-" and the pack blob's hex digest.
var tagRE = regexp.MustCompile(`^p-[0-9a-f]{64}$`)

// packTag is the tag naming the pack whose blob is d: identical packs made by two
// nodes get one tag and one manifest, and a tag never moves to other content.
func packTag(d digest.Digest) string { return "p-" + d.Encoded() }

// entry is one object of a pack: size bytes of content, kept as stored bytes at off
// in the pack blob, with encoding enc (store.EncodingRaw: stored == size).
type entry struct {
	d                 digest.Digest
	off, size, stored int64
	enc               string
}

// rawEntry is an entry for an object kept as it is.
func rawEntry(d digest.Digest, off, size int64) entry {
	return entry{d: d, off: off, size: size, stored: size}
}

// formatEntry is e as a pack lists it: "<hex>:<size>" for a raw object,
// "<hex>:<size>:<encoding>:<stored>" for an encoded one.
func formatEntry(e entry) string {
	s := e.d.Encoded() + ":" + strconv.FormatInt(e.size, 10)
	if e.enc != store.EncodingRaw {
		s += ":" + e.enc + ":" + strconv.FormatInt(e.stored, 10)
	}
	return s
}

// pack is a decoded pack manifest.
type pack struct {
	blob     digest.Digest // the pack blob
	size     int64
	entries  []entry
	created  time.Time
	manifest digest.Digest // the manifest's own digest (to delete it)
}

// encodeManifest makes the manifest of a pack blob holding entries, in order.
func encodeManifest(blob digest.Digest, entries []entry, created time.Time) ([]byte, error) {
	var b strings.Builder
	var size int64
	for i, e := range entries {
		if e.off != size {
			return nil, fmt.Errorf("pack %s: object %d at %d, want %d", blob, i, e.off, size)
		}
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(formatEntry(e))
		size += e.stored
	}
	m := ocispec.Manifest{
		MediaType:    ocispec.MediaTypeImageManifest,
		ArtifactType: PackMediaType,
		Config:       ocispec.Descriptor{MediaType: ocispec.MediaTypeEmptyJSON, Digest: emptyDigest, Size: int64(len(emptyJSON))},
		Layers:       []ocispec.Descriptor{{MediaType: PackMediaType, Digest: blob, Size: size}},
		Annotations: map[string]string{
			labels.PackObjects:        b.String(),
			ocispec.AnnotationCreated: created.UTC().Format(time.RFC3339),
		},
	}
	m.SchemaVersion = 2
	out, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	if len(out) > MaxManifestSize {
		return nil, fmt.Errorf("pack %s: manifest of %d bytes over %d: %w", blob, len(out), MaxManifestSize, errdefs.ErrInvalid)
	}
	return out, nil
}

// decodeManifest parses and checks a pack manifest. Everything in it comes from
// the registry, so nothing is trusted: the objects must tile the blob exactly.
func decodeManifest(b []byte) (*pack, error) {
	if len(b) > MaxManifestSize {
		return nil, fmt.Errorf("pack manifest of %d bytes over %d: object %w", len(b), MaxManifestSize, errdefs.ErrCorrupt)
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("pack manifest: %v: object %w", err, errdefs.ErrCorrupt)
	}
	if m.SchemaVersion != 2 || m.ArtifactType != PackMediaType || len(m.Layers) != 1 || m.Layers[0].MediaType != PackMediaType {
		return nil, fmt.Errorf("pack manifest: not a Slacker pack (artifact type %q, %d layers): object %w", m.ArtifactType, len(m.Layers), errdefs.ErrCorrupt)
	}
	l := m.Layers[0]
	if store.CheckDigest(l.Digest) != nil || l.Size < 0 {
		return nil, fmt.Errorf("pack manifest: pack blob %q of %d bytes: object %w", l.Digest, l.Size, errdefs.ErrCorrupt)
	}
	p := &pack{blob: l.Digest, size: l.Size, manifest: digest.FromBytes(b)}
	if t, err := time.Parse(time.RFC3339, m.Annotations[ocispec.AnnotationCreated]); err == nil {
		p.created = t
	}
	entries, err := parseObjects(l.Digest, l.Size, m.Annotations[labels.PackObjects])
	if err != nil {
		return nil, err
	}
	p.entries = entries
	return p, nil
}

// parseObjects parses a list of objects ("<hex>:<size>[:<encoding>:<stored>],...")
// whose stored bytes must tile the size bytes of pack blob exactly.
func parseObjects(blob digest.Digest, size int64, list string) ([]entry, error) {
	if list == "" {
		return nil, fmt.Errorf("pack %s: no objects: object %w", blob, errdefs.ErrCorrupt)
	}
	var entries []entry
	var off int64
	for item := range strings.SplitSeq(list, ",") {
		e, ok := parseEntry(item, off, size-off)
		if !ok {
			return nil, fmt.Errorf("pack %s: bad object %q at %d: object %w", blob, truncate(item), off, errdefs.ErrCorrupt)
		}
		entries = append(entries, e)
		off += e.stored
	}
	if off != size {
		return nil, fmt.Errorf("pack %s: objects cover %d of its %d bytes: object %w", blob, off, size, errdefs.ErrCorrupt)
	}
	return entries, nil
}

// parseEntry parses one listed object stored at off, with at most room bytes of the
// blob left for it. Numbers must be in canonical form, an encoded object's plain size
// within store.MaxEncodedObject and its encoding one this version reads.
func parseEntry(item string, off, room int64) (entry, bool) {
	f := strings.Split(item, ":")
	if len(f) != 2 && len(f) != 4 {
		return entry{}, false
	}
	d := digest.NewDigestFromEncoded(digest.SHA256, f[0])
	n, ok := canonicalSize(f[1])
	if d.Validate() != nil || !ok {
		return entry{}, false
	}
	e := rawEntry(d, off, n)
	if len(f) == 4 {
		stored, ok := canonicalSize(f[3])
		if !ok || f[2] != store.EncodingZstd || n > store.MaxEncodedObject {
			return entry{}, false
		}
		e.enc, e.stored = f[2], stored
	}
	return e, e.stored <= room
}

func canonicalSize(s string) (int64, bool) {
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil && n >= 0 && strconv.FormatInt(n, 10) == s
}

func truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
