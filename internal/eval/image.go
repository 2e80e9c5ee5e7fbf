package eval

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/slacker-dev/slacker/internal/bench/system"
	"github.com/slacker-dev/slacker/internal/hellobench/corpus"
)

// DefaultImages is where the evaluation keeps the images it makes itself (an OCI
// layout of its own, so it never writes into the HelloBench corpus).
const DefaultImages = "/var/tmp/slacker-eval/images"

// LayerFunc fills an empty directory with one layer's files.
type LayerFunc func(dir string) error

// BuildImage writes an image of the given layers into the OCI layout at dir, tagged
// name, unless the layout already has that tag (name images by what they hold, so a
// present tag is the same image). It returns the image as systems publish it.
func BuildImage(ctx context.Context, dir, name string, layers []LayerFunc) (system.Image, error) {
	l, err := corpus.OpenLayout(dir)
	if err != nil {
		return system.Image{}, err
	}
	tags, err := l.Tags()
	if err != nil {
		return system.Image{}, err
	}
	if d, ok := tags[name]; ok {
		m, _, err := l.Manifest(d)
		if err == nil {
			img := system.Image{Name: name, Layout: dir, Tag: name}
			for _, ld := range m.Layers {
				img.CompressedBytes += ld.Size
				if ann, ok := ld.Annotations["org.slacker.eval.usize"]; ok {
					var n int64
					fmt.Sscan(ann, &n)
					img.DataBytes += n
				}
			}
			return img, nil
		}
	}
	work, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return system.Image{}, err
	}
	defer os.RemoveAll(work)
	created := v1.Time{Time: time.Date(2015, 6, 1, 0, 0, 0, 0, time.UTC)}
	cfg := v1.ConfigFile{Architecture: "amd64", OS: "linux", Created: created, RootFS: v1.RootFS{Type: "layers"},
		Config: v1.Config{Cmd: []string{"/bin/true"}, Labels: map[string]string{"org.slacker.eval.image": name}}}
	m := v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1}
	img := system.Image{Name: name, Layout: dir, Tag: name}
	for i, fill := range layers {
		ld := filepath.Join(work, fmt.Sprint(i))
		if err := os.Mkdir(ld, 0o755); err != nil {
			return img, err
		}
		if err := fill(ld); err != nil {
			return img, fmt.Errorf("image %s layer %d: %w", name, i+1, err)
		}
		b, err := corpus.WriteLayerFromDir(ctx, ld, l.BlobsDir())
		if err != nil {
			return img, fmt.Errorf("image %s layer %d: %w", name, i+1, err)
		}
		os.RemoveAll(ld)
		d, err := v1.NewHash(b.Digest)
		if err != nil {
			return img, err
		}
		diff, err := v1.NewHash(b.DiffID)
		if err != nil {
			return img, err
		}
		m.Layers = append(m.Layers, v1.Descriptor{MediaType: types.OCILayer, Size: b.Size, Digest: d,
			Annotations: map[string]string{"org.slacker.eval.usize": fmt.Sprint(b.USize)}})
		cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, diff)
		cfg.History = append(cfg.History, v1.History{Created: created, CreatedBy: fmt.Sprintf("eval: %s layer %d", name, i+1)})
		img.CompressedBytes += b.Size
		img.DataBytes += b.USize
	}
	cd, err := l.WriteJSONBlob(cfg, types.OCIConfigJSON)
	if err != nil {
		return img, err
	}
	m.Config = cd
	md, err := l.WriteJSONBlob(m, types.OCIManifestSchema1)
	if err != nil {
		return img, err
	}
	return img, l.Tag(name, md)
}

// RandomFile writes size deterministic pseudo-random bytes (incompressible, like the
// paper's random images) to path.
func RandomFile(path string, size int64, seed uint64) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	var key [32]byte
	for i := range 8 {
		key[i] = byte(seed >> (8 * i))
	}
	if _, err := io.Copy(f, io.LimitReader(rand.NewChaCha8(key), size)); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
