package ocistore

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/store"
)

// Checkpoints make a cold index cheap. A node that starts with an empty index
// would otherwise read one manifest per pack (hundreds for one image). A checkpoint
// is a blob listing many packs with their objects, under a manifest tagged
// i-<hex of the blob>: a refresh reads the checkpoints it has not seen (two
// requests each) and only the manifests of packs no checkpoint covers. Writers
// checkpoint their own packs every CheckpointEvery packs, when their uploads pause
// and when they close; a refresh that had to read minCheckpointRead manifests one
// by one checkpoints them for the next node; past maxCheckpoints they are merged. A
// checkpoint's word about a pack counts only while the pack's own tag is listed, so
// a stale checkpoint never brings back a deleted pack; and like every index entry
// it is checked by the digests of the bytes it leads to, never trusted with data.
const (
	// IndexMediaType is the artifact type of a checkpoint manifest and its layer's.
	IndexMediaType = "application/vnd.slacker.index.v1"
	// MaxCheckpointSize bounds a checkpoint blob.
	MaxCheckpointSize = 64 << 20
)

var indexTagRE = regexp.MustCompile(`^i-[0-9a-f]{64}$`)

func indexTag(d digest.Digest) string { return "i-" + d.Encoded() }

// encodeCheckpoint lists packs, one per line: "<pack hex> <size> <created unix
// seconds> <objects>", objects as in labels.PackObjects.
func encodeCheckpoint(packs []*pack) []byte {
	var b bytes.Buffer
	for _, p := range packs {
		fmt.Fprintf(&b, "%s %d %d ", p.blob.Encoded(), p.size, p.created.Unix())
		for i, e := range p.entries {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(formatEntry(e))
		}
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// decodeCheckpoint parses a checkpoint; every pack in it must be well formed.
func decodeCheckpoint(b []byte) ([]*pack, error) {
	if len(b) > MaxCheckpointSize {
		return nil, fmt.Errorf("checkpoint of %d bytes over %d: object %w", len(b), MaxCheckpointSize, errdefs.ErrCorrupt)
	}
	var packs []*pack
	for n, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		if line == "" && len(b) == 0 {
			break
		}
		f := strings.Split(line, " ")
		if len(f) != 4 {
			return nil, fmt.Errorf("checkpoint line %d: %d fields: object %w", n+1, len(f), errdefs.ErrCorrupt)
		}
		blob := digest.NewDigestFromEncoded(digest.SHA256, f[0])
		size, err1 := strconv.ParseInt(f[1], 10, 64)
		created, err2 := strconv.ParseInt(f[2], 10, 64)
		if blob.Validate() != nil || err1 != nil || err2 != nil || size < 0 || strconv.FormatInt(size, 10) != f[1] {
			return nil, fmt.Errorf("checkpoint line %d: bad pack %q: object %w", n+1, truncate(line), errdefs.ErrCorrupt)
		}
		entries, err := parseObjects(blob, size, f[3])
		if err != nil {
			return nil, fmt.Errorf("checkpoint line %d: %w", n+1, err)
		}
		packs = append(packs, &pack{blob: blob, size: size, entries: entries, created: time.Unix(created, 0).UTC()})
	}
	return packs, nil
}

// writeCheckpoint stores a checkpoint of packs (blob, then its manifest).
func (s *Store) writeCheckpoint(ctx context.Context, packs []*pack) (string, error) {
	b := encodeCheckpoint(packs)
	d := digest.FromBytes(b)
	m := ocispec.Manifest{
		MediaType:    ocispec.MediaTypeImageManifest,
		ArtifactType: IndexMediaType,
		Config:       ocispec.Descriptor{MediaType: ocispec.MediaTypeEmptyJSON, Digest: emptyDigest, Size: int64(len(emptyJSON))},
		Layers:       []ocispec.Descriptor{{MediaType: IndexMediaType, Digest: d, Size: int64(len(b))}},
	}
	m.SchemaVersion = 2
	mb, err := json.Marshal(m)
	if err != nil {
		return "", err
	}
	if err := s.ensureConfig(ctx); err != nil {
		return "", err
	}
	if err := s.c.uploadBlob(ctx, d, b); err != nil {
		return "", err
	}
	tag := indexTag(d)
	if err := s.c.putManifest(ctx, tag, mb); err != nil {
		return "", err
	}
	return tag, nil
}

// readCheckpoint reads the checkpoint at tag; its blob is verified by digest.
func (s *Store) readCheckpoint(ctx context.Context, tag string) ([]*pack, error) {
	mb, err := s.c.getManifest(ctx, tag)
	if err != nil {
		return nil, err
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(mb, &m); err != nil || m.ArtifactType != IndexMediaType || len(m.Layers) != 1 ||
		store.CheckDigest(m.Layers[0].Digest) != nil || m.Layers[0].Size <= 0 || m.Layers[0].Size > MaxCheckpointSize ||
		indexTag(m.Layers[0].Digest) != tag {
		return nil, fmt.Errorf("checkpoint %s: not a Slacker index: object %w", tag, errdefs.ErrCorrupt)
	}
	l := m.Layers[0]
	rc, err := s.c.readRange(ctx, l.Digest, 0, l.Size)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(store.VerifyingReader(rc, l.Digest, l.Size))
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", tag, err)
	}
	return decodeCheckpoint(b)
}

// checkpointLater writes a checkpoint of packs in the background, best effort: a
// checkpoint only saves later refreshes some requests.
func (s *Store) checkpointLater(packs []*pack, why string) {
	s.bgWG.Add(1)
	go func() {
		defer s.bgWG.Done()
		ctx, cancel := context.WithTimeout(context.Background(), s.o.Timeout)
		defer cancel()
		tag, err := s.writeCheckpoint(ctx, packs)
		if err != nil {
			s.log.Warn("index-checkpoint-failed", "packs", len(packs), "err", err)
			return
		}
		s.mu.Lock()
		s.checkpoints[tag] = true
		s.mu.Unlock()
		s.log.Debug("index-checkpoint", "tag", tag, "packs", len(packs), "why", why)
	}()
}

// ownPack records a pack this node uploaded, and checkpoints its packs every
// CheckpointEvery, or once uploads have been quiet for CheckpointQuiet (the end of
// a snapshot), so that other nodes read its last packs from a checkpoint too.
func (s *Store) ownPack(p *pack) {
	s.mu.Lock()
	s.own = append(s.own, p)
	var batch []*pack
	if len(s.own) >= s.o.CheckpointEvery {
		batch, s.own = s.own, nil
	}
	if s.quiet == nil {
		s.quiet = time.AfterFunc(s.o.CheckpointQuiet, s.checkpointRest)
	} else {
		s.quiet.Reset(s.o.CheckpointQuiet)
	}
	s.mu.Unlock()
	if batch != nil {
		s.checkpointLater(batch, "own packs")
	}
}

func (s *Store) checkpointRest() {
	s.mu.Lock()
	batch := s.own
	s.own = nil
	s.mu.Unlock()
	if len(batch) > 0 {
		s.checkpointLater(batch, "uploads paused")
	}
}
