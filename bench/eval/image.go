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

	"github.com/slacker-dev/slacker/bench/corpus"
	"github.com/slacker-dev/slacker/bench/rig"
)

// DefaultImages is where the evaluation keeps the images it makes itself (an OCI
// layout of its own, so it never writes into the HelloBench corpus).
const DefaultImages = "/var/tmp/slacker-eval/images"

// LayerFunc fills an empty directory with one layer's files.
type LayerFunc func(dir string) error

// BuildImage writes an image of the given layers into the OCI layout at dir, tagged
// name, unless the layout already has that tag (name images by what they hold, so a
// present tag is the same image). It returns the image as systems publish it.
func BuildImage(ctx context.Context, dir, name string, fills []LayerFunc) (rig.Image, error) {
	l, err := corpus.OpenLayout(dir)
	if err != nil {
		return rig.Image{}, err
	}
	layers := make([]layerBlob, len(fills))
	build := func() error {
		work, err := os.MkdirTemp(dir, "build-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(work)
		for i, fill := range fills {
			ld := filepath.Join(work, fmt.Sprint(i))
			if err := os.Mkdir(ld, 0o755); err != nil {
				return err
			}
			if err := fill(ld); err != nil {
				return fmt.Errorf("image %s layer %d: %w", name, i+1, err)
			}
			// Every file at buildTime: the same files make the same layer, whenever
			// they were written.
			b, err := corpus.WriteLayerFromDirAt(ctx, ld, l.BlobsDir(), buildTime)
			if err != nil {
				return fmt.Errorf("image %s layer %d: %w", name, i+1, err)
			}
			os.RemoveAll(ld)
			layers[i] = layerBlob{b}
		}
		return nil
	}
	return assemble(l, name, layers, build)
}

// buildTime is the time of every image the evaluation builds: its config's and
// history's, and every file's in its layers, so that an image built twice is the
// same image.
var buildTime = time.Date(2015, 6, 1, 0, 0, 0, 0, time.UTC)

// assemble returns the image tagged name in l if present; otherwise it runs build
// (which fills layers) and writes the config, manifest and tag.
func assemble(l *corpus.Layout, name string, layers []layerBlob, build func() error) (rig.Image, error) {
	img := rig.Image{Name: name, Layout: l.Dir, Tag: name}
	if tags, err := l.Tags(); err != nil {
		return img, err
	} else if d, ok := tags[name]; ok {
		if m, _, err := l.Manifest(d); err == nil {
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
	if err := build(); err != nil {
		return img, err
	}
	created := v1.Time{Time: buildTime}
	cfg := v1.ConfigFile{Architecture: "amd64", OS: "linux", Created: created, RootFS: v1.RootFS{Type: "layers"},
		Config: v1.Config{Cmd: []string{"/bin/true"}, Labels: map[string]string{"org.slacker.eval.image": name}}}
	m := v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1}
	for i, b := range layers {
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

// SynthImage writes the corpus builder's synthetic image of spec (the paper's
// random images: files of random bytes, the same bytes for the same spec) into the
// evaluation's OCI layout at dir, unless it is there, so the HelloBench corpus is
// never written to.
func SynthImage(ctx context.Context, dir string, spec corpus.SynthSpec) (rig.Image, error) {
	if err := spec.Validate(); err != nil {
		return rig.Image{}, err
	}
	if spec.Name == "" {
		spec.Name = spec.DefaultName()
	}
	l, err := corpus.OpenLayout(dir)
	if err != nil {
		return rig.Image{}, err
	}
	layers := make([]layerBlob, spec.Layers)
	build := func() error {
		for i := range layers {
			b, err := corpus.WriteSynthLayer(ctx, spec, i, l.BlobsDir())
			if err != nil {
				return err
			}
			layers[i] = layerBlob{b}
		}
		return nil
	}
	return assemble(l, spec.Name, layers, build)
}

type layerBlob struct{ corpus.Blob }
