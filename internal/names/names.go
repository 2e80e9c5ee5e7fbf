package names

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/atomicfile"
	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/image"
)

// Store is a directory of names and chains.
type Store struct {
	dir   string
	files atomicfile.Writer // writes every entry (a test injects faults through its FS)
}

// Open opens (creating) the store in dir.
func Open(dir string) (*Store, error) {
	for _, sub := range []string{"images", "chains"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
			return nil, fmt.Errorf("open name store: %w", err)
		}
	}
	return &Store{dir: dir}, nil
}

// Normalize returns the canonical form of an image name: a reference with a tag
// (":latest" added when none) or a digest. Names without a registry stay local
// ("debian" -> "debian:latest"); names with one are kept as given.
func Normalize(s string) (string, error) {
	ref, err := name.ParseReference(s, name.WithDefaultRegistry(""), name.WithDefaultTag("latest"))
	if err != nil {
		return "", errdefs.Errorf(errdefs.ErrInvalid, "image name %q: %w", s, err)
	}
	n := ref.Name()
	return strings.TrimPrefix(n, "library/"), nil
}

// Entry is a stored name.
type Entry struct {
	Name       string            `json:"name"`
	Descriptor *image.Descriptor `json:"descriptor"`
	Updated    time.Time         `json:"updated"`
	// Attached is the artifact the descriptor was pulled from when it was found
	// attached to the ordinary image of that name (registry.Attached); empty
	// otherwise.
	Attached digest.Digest `json:"attached,omitempty"`
}

func (s *Store) imagePath(n string) string {
	return filepath.Join(s.dir, "images", digest.FromString(n).Encoded()+".json")
}

// Put names d (replacing what the name pointed to).
func (s *Store) Put(n string, d *image.Descriptor) error { return s.PutAttached(n, d, "") }

// PutAttached names d, found attached to the ordinary image n as the artifact
// attached.
func (s *Store) PutAttached(n string, d *image.Descriptor, attached digest.Digest) error {
	n, err := Normalize(n)
	if err != nil {
		return err
	}
	enc, err := d.Encode()
	if err != nil {
		return fmt.Errorf("name %s: %w", n, err)
	}
	b, err := json.Marshal(struct {
		Name       string          `json:"name"`
		Descriptor json.RawMessage `json:"descriptor"`
		Updated    time.Time       `json:"updated"`
		Attached   digest.Digest   `json:"attached,omitempty"`
	}{n, enc, time.Now().UTC(), attached})
	if err != nil {
		return err
	}
	if err := s.files.WriteFile(s.imagePath(n), b, 0o600); err != nil {
		return fmt.Errorf("name %s: %w", n, err)
	}
	return nil
}

// Get returns the descriptor named n.
func (s *Store) Get(n string) (*Entry, error) {
	nn, err := Normalize(n)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(s.imagePath(nn))
	if errors.Is(err, os.ErrNotExist) {
		return nil, errdefs.Errorf(errdefs.ErrNotFound, "image %s: no such image", n)
	}
	if err != nil {
		return nil, err
	}
	return decodeEntry(b)
}

func decodeEntry(b []byte) (*Entry, error) {
	var raw struct {
		Name       string          `json:"name"`
		Descriptor json.RawMessage `json:"descriptor"`
		Updated    time.Time       `json:"updated"`
		Attached   digest.Digest   `json:"attached,omitempty"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("name store entry: %w", err)
	}
	d, err := image.Decode(raw.Descriptor)
	if err != nil {
		return nil, fmt.Errorf("name store entry %s: %w", raw.Name, err)
	}
	return &Entry{Name: raw.Name, Descriptor: d, Updated: raw.Updated, Attached: raw.Attached}, nil
}

// List returns every entry, sorted by name.
func (s *Store) List() ([]*Entry, error) {
	ents, err := os.ReadDir(filepath.Join(s.dir, "images"))
	if err != nil {
		return nil, err
	}
	var out []*Entry
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(s.dir, "images", e.Name()))
		if err != nil {
			continue // deleted meanwhile
		}
		en, err := decodeEntry(b)
		if err != nil {
			return nil, err
		}
		out = append(out, en)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Delete removes a name (not the snapshots it names).
func (s *Store) Delete(n string) error {
	nn, err := Normalize(n)
	if err != nil {
		return err
	}
	if err := os.Remove(s.imagePath(nn)); errors.Is(err, os.ErrNotExist) {
		return errdefs.Errorf(errdefs.ErrNotFound, "image %s: no such image", n)
	} else if err != nil {
		return err
	}
	return nil
}

// Chain returns the snapshot made for an OCI chain ID (or any other conversion key).
func (s *Store) Chain(key digest.Digest) (digest.Digest, error) {
	b, err := os.ReadFile(filepath.Join(s.dir, "chains", key.Encoded()))
	if errors.Is(err, os.ErrNotExist) {
		return "", errdefs.Errorf(errdefs.ErrNotFound, "chain %s: no such image", key)
	}
	if err != nil {
		return "", err
	}
	d := digest.Digest(strings.TrimSpace(string(b)))
	if err := d.Validate(); err != nil {
		return "", fmt.Errorf("chain %s: corrupt entry: %w", key, err)
	}
	return d, nil
}

// PutChain records the snapshot made for key.
func (s *Store) PutChain(key, snapshot digest.Digest) error {
	if err := s.files.WriteFile(filepath.Join(s.dir, "chains", key.Encoded()), []byte(snapshot.String()+"\n"), 0o600); err != nil {
		return fmt.Errorf("chain %s: %w", key, err)
	}
	return nil
}

// ForgetChain removes a chain entry (e.g. when its snapshot is gone from the store).
func (s *Store) ForgetChain(key digest.Digest) error {
	err := os.Remove(filepath.Join(s.dir, "chains", key.Encoded()))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}
