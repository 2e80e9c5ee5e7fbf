package rig

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Change is a deterministic change to the top of an image, as a developer makes
// between two pushes: one new file.
type Change struct {
	// Tag names the changed image (its reference is the original's with this tag).
	Tag string
	// Path is the file's absolute path; Content its bytes.
	Path    string
	Content []byte
}

// ChangeTime is the modification time of a Change's file and directories, fixed so
// the same change makes the same layer.
var ChangeTime = time.Date(2015, 6, 1, 0, 0, 0, 0, time.UTC)

// PushResult is the outcome of a PushChange.
type PushResult struct {
	// Ref is the changed image's reference.
	Ref string
	// Took is what the developer waits: making the change's layer (or commit) and
	// pushing it.
	Took time.Duration
	// Parts splits Took where the system has steps (commit, push).
	Parts map[string]time.Duration
	// Bytes is what was uploaded (to the registry and the store), where known.
	Bytes int64
}

// Developer is a System that can publish a change to an image it published: the
// development cycle's push.
type Developer interface {
	PushChange(ctx context.Context, img Image, ref string, ch Change) (PushResult, error)
}

// Traffic is what a node moved since Cold.
type Traffic struct {
	// RegistryBytes came from the registry: manifests, configs, descriptors, layers.
	RegistryBytes int64 `json:"registry_bytes"`
	// StoreBytes came from the chunk store (block maps and chunks).
	StoreBytes int64 `json:"store_bytes"`
}

// TrafficCounter is a System that can tell what its node moved since Cold.
type TrafficCounter interface {
	Traffic(ctx context.Context) (Traffic, error)
}

// changeTar is the layer tar of ch: the file and its parent directories.
func changeTar(ch Change) ([]byte, error) {
	if !path.IsAbs(ch.Path) || path.Clean(ch.Path) != ch.Path || ch.Path == "/" {
		return nil, fmt.Errorf("change path %q is not a clean absolute file path", ch.Path)
	}
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	rel := strings.TrimPrefix(ch.Path, "/")
	parts := strings.Split(rel, "/")
	for i := 1; i < len(parts); i++ {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.Join(parts[:i], "/") + "/", Mode: 0o755, ModTime: ChangeTime, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: rel, Mode: 0o644, Size: int64(len(ch.Content)), ModTime: ChangeTime, Format: tar.FormatPAX}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(ch.Content); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// pullSize is what pulling img moves: its layers, config and manifest.
func pullSize(img v1.Image) (int64, error) {
	m, err := img.Manifest()
	if err != nil {
		return 0, err
	}
	raw, err := img.RawManifest()
	if err != nil {
		return 0, err
	}
	n := m.Config.Size + int64(len(raw))
	for _, l := range m.Layers {
		n += l.Size
	}
	return n, nil
}

type changedSizes struct {
	layer, config, manifest, oldConfig, oldManifest int64
}

// writeChangedLayout writes an OCI layout at dir holding img with ch on top, tagged
// ch.Tag. The image's own blobs are symbolic links to the corpus layout's; only the
// new layer, config and manifest are written.
func writeChangedLayout(img Image, ch Change, dir string) (changedSizes, error) {
	var sz changedSizes
	base, err := loadImage(img.Layout, img.Tag)
	if err != nil {
		return sz, err
	}
	raw, err := changeTar(ch)
	if err != nil {
		return sz, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return sz, err
	}
	changed, err := mutate.Append(base, mutate.Addendum{Layer: layer, MediaType: types.OCILayer,
		History: v1.History{Created: v1.Time{Time: ChangeTime}, CreatedBy: "hellobench change " + ch.Tag + ": " + ch.Path}})
	if err != nil {
		return sz, err
	}
	blobs := filepath.Join(dir, "blobs", "sha256")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		return sz, err
	}
	put := func(d v1.Hash, b []byte) error {
		return os.WriteFile(filepath.Join(blobs, d.Hex), b, 0o644)
	}
	baseLayers, err := base.Layers()
	if err != nil {
		return sz, err
	}
	for _, l := range baseLayers {
		d, err := l.Digest()
		if err != nil {
			return sz, err
		}
		src, err := filepath.Abs(filepath.Join(img.Layout, "blobs", d.Algorithm, d.Hex))
		if err != nil {
			return sz, err
		}
		if err := os.Symlink(src, filepath.Join(blobs, d.Hex)); err != nil && !os.IsExist(err) {
			return sz, err
		}
	}
	rc, err := layer.Compressed()
	if err != nil {
		return sz, err
	}
	gz, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		return sz, err
	}
	ld, err := layer.Digest()
	if err != nil {
		return sz, err
	}
	if err := put(ld, gz); err != nil {
		return sz, err
	}
	cfg, err := changed.RawConfigFile()
	if err != nil {
		return sz, err
	}
	cd, err := changed.ConfigName()
	if err != nil {
		return sz, err
	}
	man, err := changed.RawManifest()
	if err != nil {
		return sz, err
	}
	md, err := changed.Digest()
	if err != nil {
		return sz, err
	}
	mt, err := changed.MediaType()
	if err != nil {
		return sz, err
	}
	if err := put(cd, cfg); err != nil {
		return sz, err
	}
	if err := put(md, man); err != nil {
		return sz, err
	}
	idx := v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex, Manifests: []v1.Descriptor{{
		MediaType: mt, Digest: md, Size: int64(len(man)),
		Annotations: map[string]string{"org.opencontainers.image.ref.name": ch.Tag},
	}}}
	ib, err := json.Marshal(idx)
	if err != nil {
		return sz, err
	}
	if err := os.WriteFile(filepath.Join(dir, "index.json"), ib, 0o644); err != nil {
		return sz, err
	}
	if err := os.WriteFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644); err != nil {
		return sz, err
	}
	oldCfg, err := base.RawConfigFile()
	if err != nil {
		return sz, err
	}
	oldMan, err := base.RawManifest()
	if err != nil {
		return sz, err
	}
	sz = changedSizes{layer: int64(len(gz)), config: int64(len(cfg)), manifest: int64(len(man)),
		oldConfig: int64(len(oldCfg)), oldManifest: int64(len(oldMan))}
	return sz, nil
}
