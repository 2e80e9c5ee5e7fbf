package ocistore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sync/errgroup"

	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/labels"
	"github.com/slacker-dev/slacker/internal/store"
)

var _ store.Refs = (*Store)(nil)

// Records (store.Refs) are tags too: the record named N is the manifest tagged
// r-<first 48 hex digits of sha256(N)>, whose one layer is the record's bytes and
// whose annotation gives N (tags cannot hold every name: they are at most 128
// characters, without '/'). Replacing a record is one manifest PUT, atomic in the
// registry; the blob goes first, so a reader sees the old record or the new one,
// whole, and verifies it against its digest. Old record blobs are left to the
// registry's garbage collection (deleting one could race a PutRef of the same
// bytes).
const (
	// RefMediaType is the artifact type of a record manifest and its layer's type.
	RefMediaType = "application/vnd.slacker.ref.v1"
)

var refTagRE = regexp.MustCompile(`^r-[0-9a-f]{48}$`)

func refTag(name string) string {
	sum := sha256.Sum256([]byte(name))
	return "r-" + hex.EncodeToString(sum[:24])
}

// refNames remembers the name behind each record tag (a tag is derived from its
// name, so the mapping never changes).
type refNames struct {
	mu    sync.Mutex
	names map[string]string
}

func (s *Store) PutRef(ctx context.Context, name string, b []byte) error {
	if err := store.CheckRefName(name); err != nil {
		return err
	}
	if len(b) > store.MaxRefSize {
		return fmt.Errorf("put record %s: %d bytes, more than %d: %w", name, len(b), store.MaxRefSize, errdefs.ErrInvalid)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("put record %s: %w", name, err)
	}
	cctx, cancel := s.bound(ctx)
	defer cancel()
	d := digest.FromBytes(b)
	m := ocispec.Manifest{
		MediaType:    ocispec.MediaTypeImageManifest,
		ArtifactType: RefMediaType,
		Config:       ocispec.Descriptor{MediaType: ocispec.MediaTypeEmptyJSON, Digest: emptyDigest, Size: int64(len(emptyJSON))},
		Layers:       []ocispec.Descriptor{{MediaType: RefMediaType, Digest: d, Size: int64(len(b))}},
		Annotations: map[string]string{
			labels.RefName:            name,
			ocispec.AnnotationCreated: time.Now().UTC().Format(time.RFC3339Nano),
		},
	}
	m.SchemaVersion = 2
	mb, err := json.Marshal(m)
	if err != nil {
		return err
	}
	err = s.ensureConfig(cctx)
	if err == nil {
		var ok bool
		if ok, err = s.c.headBlob(cctx, d); err == nil && !ok {
			err = s.c.uploadBlob(cctx, d, b)
		}
	}
	if err == nil {
		err = s.c.putManifest(cctx, refTag(name), mb)
	}
	if err != nil {
		return fmt.Errorf("put record %s: %w", name, err)
	}
	s.refs.remember(refTag(name), name)
	return nil
}

func (s *Store) GetRef(ctx context.Context, name string) ([]byte, error) {
	if err := store.CheckRefName(name); err != nil {
		return nil, err
	}
	cctx, cancel := s.bound(ctx)
	defer cancel()
	m, err := s.refManifest(cctx, refTag(name))
	if err != nil {
		return nil, fmt.Errorf("get record %s: %w", name, err)
	}
	if m.Annotations[labels.RefName] != name {
		return nil, fmt.Errorf("get record %s: the registry's record is named %q: object %w", name, m.Annotations[labels.RefName], errdefs.ErrCorrupt)
	}
	l := m.Layers[0]
	if l.Size == 0 {
		return []byte{}, store.Verify(l.Digest, nil)
	}
	rc, err := s.c.readRange(cctx, l.Digest, 0, l.Size)
	if err != nil {
		return nil, fmt.Errorf("get record %s: %w", name, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(store.VerifyingReader(rc, l.Digest, l.Size))
	if err != nil {
		if !errors.Is(err, errdefs.ErrCorrupt) {
			err = s.c.mapErr(cctx, "read record", err)
		}
		return nil, fmt.Errorf("get record %s: %w", name, err)
	}
	return b, nil
}

// refManifest reads and checks the record manifest at tag.
func (s *Store) refManifest(ctx context.Context, tag string) (*ocispec.Manifest, error) {
	b, err := s.c.getManifest(ctx, tag)
	if err != nil {
		return nil, err
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(b, &m); err != nil || m.ArtifactType != RefMediaType || len(m.Layers) != 1 ||
		store.CheckDigest(m.Layers[0].Digest) != nil || m.Layers[0].Size < 0 || m.Layers[0].Size > store.MaxRefSize {
		return nil, fmt.Errorf("record manifest %s is not a Slacker record: object %w", tag, errdefs.ErrCorrupt)
	}
	return &m, nil
}

func (s *Store) ListRefs(ctx context.Context, prefix string, fn func(name string) error) error {
	cctx, cancel := s.bound(ctx)
	defer cancel()
	tags, err := s.c.tags(cctx)
	if err != nil {
		return fmt.Errorf("list records: %w", err)
	}
	var unknown []string
	var names []string
	for _, t := range tags {
		if !refTagRE.MatchString(t) {
			continue
		}
		if n, ok := s.refs.lookup(t); ok {
			names = append(names, n)
		} else {
			unknown = append(unknown, t)
		}
	}
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(cctx)
	g.SetLimit(8)
	for _, t := range unknown {
		g.Go(func() error {
			m, err := s.refManifest(gctx, t)
			if errors.Is(err, errdefs.ErrNotFound) || errors.Is(err, errdefs.ErrCorrupt) {
				return nil // deleted since the listing, or not ours
			}
			if err != nil {
				return err
			}
			n := m.Annotations[labels.RefName]
			if store.CheckRefName(n) != nil || refTag(n) != t {
				return nil
			}
			s.refs.remember(t, n)
			mu.Lock()
			names = append(names, n)
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("list records: %w", err)
	}
	for _, n := range names {
		if !strings.HasPrefix(n, prefix) {
			continue
		}
		if err := fn(n); err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) DeleteRef(ctx context.Context, name string) error {
	if err := store.CheckRefName(name); err != nil {
		return err
	}
	cctx, cancel := s.bound(ctx)
	defer cancel()
	md, err := s.c.manifestDigest(cctx, refTag(name))
	if err == nil {
		err = s.c.deleteManifest(cctx, md)
	}
	if err != nil {
		return fmt.Errorf("delete record %s: %w", name, err)
	}
	return nil
}

func (r *refNames) remember(tag, name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.names == nil {
		r.names = map[string]string{}
	}
	r.names[tag] = name
}

func (r *refNames) lookup(tag string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n, ok := r.names[tag]
	return n, ok
}
