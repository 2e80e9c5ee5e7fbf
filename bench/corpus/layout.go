package corpus

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// RefNameAnnotation tags a manifest in an OCI layout's index.json.
const RefNameAnnotation = "org.opencontainers.image.ref.name"

// Layout is one OCI image layout directory holding every image of the corpus,
// each tagged with its workload name (index.json's ref.name annotation), so
// layers shared by several images are stored once. Blobs are written to a temp
// file and renamed to their digest; index.json is replaced atomically. It is
// safe for concurrent use inside one process; the corpus lock keeps other
// processes out.
type Layout struct {
	Dir string
	mu  sync.Mutex
}

// OpenLayout opens dir as an OCI layout, creating an empty one if needed.
func OpenLayout(dir string) (*Layout, error) {
	l := &Layout{Dir: dir}
	if err := os.MkdirAll(l.BlobsDir(), 0o755); err != nil {
		return nil, fmt.Errorf("open layout %s: %w", dir, err)
	}
	ol := filepath.Join(dir, "oci-layout")
	if _, err := os.Stat(ol); errors.Is(err, os.ErrNotExist) {
		if err := atomicWrite(ol, []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
			return nil, err
		}
	}
	if _, err := os.Stat(l.indexPath()); errors.Is(err, os.ErrNotExist) {
		if err := l.writeIndex(&v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex}); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// BlobsDir is the layout's blobs/sha256 directory.
func (l *Layout) BlobsDir() string { return filepath.Join(l.Dir, "blobs", "sha256") }

// BlobPath is where the blob with digest ("sha256:...") lives.
func (l *Layout) BlobPath(digest string) string {
	return filepath.Join(l.BlobsDir(), strings.TrimPrefix(digest, "sha256:"))
}

// HasBlob reports whether the blob is present with the given size (-1: any).
func (l *Layout) HasBlob(digest string, size int64) bool {
	fi, err := os.Stat(l.BlobPath(digest))
	return err == nil && fi.Mode().IsRegular() && (size < 0 || fi.Size() == size)
}

// WriteJSONBlob stores v as a JSON blob and returns its descriptor.
func (l *Layout) WriteJSONBlob(v any, mt types.MediaType) (v1.Descriptor, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return v1.Descriptor{}, err
	}
	sum := sha256.Sum256(b)
	hexd := hex.EncodeToString(sum[:])
	desc := v1.Descriptor{MediaType: mt, Size: int64(len(b)), Digest: v1.Hash{Algorithm: "sha256", Hex: hexd}}
	if l.HasBlob(desc.Digest.String(), desc.Size) {
		return desc, nil
	}
	if err := atomicWrite(filepath.Join(l.BlobsDir(), hexd), b); err != nil {
		return v1.Descriptor{}, err
	}
	return desc, nil
}

// ReadJSONBlob decodes a JSON blob.
func (l *Layout) ReadJSONBlob(digest string, v any) error {
	b, err := os.ReadFile(l.BlobPath(digest))
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

func (l *Layout) indexPath() string { return filepath.Join(l.Dir, "index.json") }

func (l *Layout) readIndex() (*v1.IndexManifest, error) {
	b, err := os.ReadFile(l.indexPath())
	if err != nil {
		return nil, fmt.Errorf("read layout index: %w", err)
	}
	var idx v1.IndexManifest
	if err := json.Unmarshal(b, &idx); err != nil {
		return nil, fmt.Errorf("decode %s: %w", l.indexPath(), err)
	}
	return &idx, nil
}

func (l *Layout) writeIndex(idx *v1.IndexManifest) error {
	b, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return err
	}
	return atomicWrite(l.indexPath(), b)
}

// Tag points name at desc, replacing what name pointed at before.
func (l *Layout) Tag(name string, desc v1.Descriptor) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	idx, err := l.readIndex()
	if err != nil {
		return err
	}
	var keep []v1.Descriptor
	for _, d := range idx.Manifests {
		if d.Annotations[RefNameAnnotation] != name {
			keep = append(keep, d)
		}
	}
	desc.Annotations = map[string]string{RefNameAnnotation: name}
	keep = append(keep, desc)
	sort.Slice(keep, func(i, j int) bool {
		return keep[i].Annotations[RefNameAnnotation] < keep[j].Annotations[RefNameAnnotation]
	})
	idx.Manifests = keep
	return l.writeIndex(idx)
}

// Untag removes name from the index; a missing name is not an error.
func (l *Layout) Untag(name string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	idx, err := l.readIndex()
	if err != nil {
		return err
	}
	var keep []v1.Descriptor
	for _, d := range idx.Manifests {
		if d.Annotations[RefNameAnnotation] != name {
			keep = append(keep, d)
		}
	}
	idx.Manifests = keep
	return l.writeIndex(idx)
}

// Tags returns every tagged manifest by name.
func (l *Layout) Tags() (map[string]v1.Descriptor, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	idx, err := l.readIndex()
	if err != nil {
		return nil, err
	}
	out := map[string]v1.Descriptor{}
	for _, d := range idx.Manifests {
		if n := d.Annotations[RefNameAnnotation]; n != "" {
			out[n] = d
		}
	}
	return out, nil
}

// Manifest reads a tagged image's manifest and config.
func (l *Layout) Manifest(desc v1.Descriptor) (*v1.Manifest, *v1.ConfigFile, error) {
	var m v1.Manifest
	if err := l.ReadJSONBlob(desc.Digest.String(), &m); err != nil {
		return nil, nil, fmt.Errorf("manifest %s: %w", desc.Digest, err)
	}
	var c v1.ConfigFile
	if err := l.ReadJSONBlob(m.Config.Digest.String(), &c); err != nil {
		return nil, nil, fmt.Errorf("config %s: %w", m.Config.Digest, err)
	}
	return &m, &c, nil
}

// GC removes blobs that no tagged manifest reaches and that keep does not
// name, and returns the bytes freed.
func (l *Layout) GC(keep map[string]bool) (int64, error) {
	tags, err := l.Tags()
	if err != nil {
		return 0, err
	}
	live := map[string]bool{}
	for k := range keep {
		live[strings.TrimPrefix(k, "sha256:")] = true
	}
	for _, d := range tags {
		m, _, err := l.Manifest(d)
		if err != nil {
			return 0, err
		}
		live[d.Digest.Hex] = true
		live[m.Config.Digest.Hex] = true
		for _, ld := range m.Layers {
			live[ld.Digest.Hex] = true
		}
	}
	ents, err := os.ReadDir(l.BlobsDir())
	if err != nil {
		return 0, err
	}
	var freed int64
	for _, e := range ents {
		if live[e.Name()] {
			continue
		}
		if fi, err := e.Info(); err == nil {
			freed += fi.Size()
		}
		if err := os.Remove(filepath.Join(l.BlobsDir(), e.Name())); err != nil {
			return freed, err
		}
	}
	return freed, nil
}

// atomicWrite writes b to a temp file next to path, syncs it and renames it.
func atomicWrite(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
