package corpus

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// DefaultRepoPrefix is the repository namespace images are pushed under:
// REGISTRY/hellobench/NAME:latest.
const DefaultRepoPrefix = "hellobench"

// PushOptions configures Push.
type PushOptions struct {
	// Registry is host:port of an OCI distribution registry. Loopback and
	// private addresses are spoken to over plain HTTP.
	Registry string
	// Prefix is the repository namespace; empty means DefaultRepoPrefix.
	Prefix string
	// Names limits the push to these images; empty pushes every tagged image.
	Names []string
	// Progress gets one line per image; nil discards.
	Progress io.Writer
}

// PushResult is one pushed image.
type PushResult struct {
	Name string `json:"name"`
	// Ref is the full reference, e.g. 127.0.0.1:5000/hellobench/redis:latest.
	Ref     string  `json:"ref"`
	Digest  string  `json:"digest"`
	Size    int64   `json:"size"`
	Seconds float64 `json:"seconds"`
	// Mounted counts layers mounted from a repository pushed earlier instead
	// of being uploaded again.
	Mounted int `json:"mounted"`
}

// Ref returns the reference an image of the corpus is pushed to.
func Ref(registry, prefix, name string) string {
	if prefix == "" {
		prefix = DefaultRepoPrefix
	}
	return fmt.Sprintf("%s/%s/%s:latest", registry, prefix, name)
}

// Push pushes images of the corpus in dir to a registry, each to its own
// repository with tag latest, with gzip OCI layers that containerd and Docker
// pull. A layer that an earlier image of the same push already uploaded is
// mounted across repositories, so shared layers cross the wire once. It does
// not need root. Credentials, if the registry wants any, come from the Docker
// config (~/.docker/config.json).
func Push(ctx context.Context, dir string, opts PushOptions) ([]PushResult, error) {
	if opts.Progress == nil {
		opts.Progress = io.Discard
	}
	p, err := layout.FromPath(filepath.Join(dir, "oci"))
	if err != nil {
		return nil, fmt.Errorf("open corpus layout in %s: %w", dir, err)
	}
	l := &Layout{Dir: filepath.Join(dir, "oci")}
	tags, err := l.Tags()
	if err != nil {
		return nil, err
	}
	var names []string
	if len(opts.Names) > 0 {
		for _, n := range opts.Names {
			if _, ok := tags[n]; !ok {
				return nil, fmt.Errorf("no image %q in the corpus (see `corpus list`)", n)
			}
		}
		names = slices.Clone(opts.Names)
	} else {
		for n := range tags {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	// Plain HTTP for the local registries this is meant for; TLS elsewhere.
	nameOpts := []name.Option{name.Insecure}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	uploadedIn := map[string]name.Reference{} // layer digest -> a ref already holding it
	var out []PushResult
	for _, n := range names {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		desc := tags[n]
		img, err := p.Image(desc.Digest)
		if err != nil {
			return out, fmt.Errorf("image %s: %w", n, err)
		}
		ref, err := name.ParseReference(Ref(opts.Registry, opts.Prefix, n), nameOpts...)
		if err != nil {
			return out, fmt.Errorf("image %s: %w", n, err)
		}
		layers, err := img.Layers()
		if err != nil {
			return out, err
		}
		mi := &mountImage{Image: img, layers: make([]v1.Layer, len(layers))}
		res := PushResult{Name: n, Ref: ref.String(), Digest: desc.Digest.String()}
		for i, ly := range layers {
			d, err := ly.Digest()
			if err != nil {
				return out, err
			}
			sz, _ := ly.Size()
			res.Size += sz
			if from, ok := uploadedIn[d.String()]; ok {
				mi.layers[i] = &remote.MountableLayer{Layer: ly, Reference: from}
				res.Mounted++
			} else {
				mi.layers[i] = ly
			}
		}
		t0 := time.Now()
		if err := remote.Write(ref, mi, remote.WithContext(ctx), remote.WithTransport(transport),
			remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
			return out, fmt.Errorf("push %s to %s: %w", n, ref, err)
		}
		res.Seconds = time.Since(t0).Seconds()
		for _, ly := range layers {
			if d, err := ly.Digest(); err == nil {
				if _, ok := uploadedIn[d.String()]; !ok {
					uploadedIn[d.String()] = ref
				}
			}
		}
		fmt.Fprintf(opts.Progress, "pushed %-40s %9s in %5.1fs (%d of %d layers mounted from earlier pushes)\n",
			ref, HumanBytes(res.Size), res.Seconds, res.Mounted, len(layers))
		out = append(out, res)
	}
	return out, nil
}

// mountImage is an image whose layers may be MountableLayers.
type mountImage struct {
	v1.Image
	layers []v1.Layer
}

func (m *mountImage) Layers() ([]v1.Layer, error) { return m.layers, nil }

func (m *mountImage) LayerByDigest(h v1.Hash) (v1.Layer, error) {
	for _, l := range m.layers {
		if d, err := l.Digest(); err == nil && d == h {
			return l, nil
		}
	}
	return m.Image.LayerByDigest(h)
}
