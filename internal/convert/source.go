package convert

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Source is an opened image.
type Source struct {
	Image     v1.Image
	Reference string // how the user named it
	Kind      string // "oci-layout", "oci-archive", "docker-archive", "registry"
	cleanup   func()
}

// Close releases temporary files the source needed.
func (s *Source) Close() {
	if s.cleanup != nil {
		s.cleanup()
	}
}

// OpenOptions tune Open.
type OpenOptions struct {
	// TempDir receives an unpacked OCI archive (default os.TempDir()).
	TempDir  string
	Insecure bool // plain HTTP to a registry
}

// Open opens an image named by spec:
//
//	oci:DIR[:TAG]             OCI layout directory (or just DIR if it has an oci-layout file)
//	oci-archive:FILE[:TAG]    OCI layout in a tar (or a FILE.tar holding oci-layout)
//	docker-archive:FILE[:TAG] `docker save` tar (or a FILE.tar holding manifest.json)
//	docker://REF or REF       a registry reference
func Open(ctx context.Context, spec string, opts OpenOptions) (*Source, error) {
	kind, rest := "", spec
	for _, k := range []string{"oci:", "oci-archive:", "docker-archive:", "docker://"} {
		if strings.HasPrefix(spec, k) {
			kind, rest = strings.TrimSuffix(strings.TrimSuffix(k, "//"), ":"), strings.TrimPrefix(spec, k)
		}
	}
	path, tag := splitTag(rest)
	if kind == "" {
		if fi, err := os.Stat(rest); err == nil {
			path, tag = rest, ""
			if fi.IsDir() {
				kind = "oci"
			} else if kind, err = sniffTar(rest); err != nil {
				return nil, err
			}
		} else if fi, err := os.Stat(path); err == nil && !fi.IsDir() {
			if kind, err = sniffTar(path); err != nil {
				return nil, err
			}
		} else if fi, err := os.Stat(path); err == nil && fi.IsDir() {
			kind = "oci"
		} else {
			kind = "docker"
		}
	}
	switch kind {
	case "oci":
		img, err := fromLayout(path, tag)
		if err != nil {
			return nil, err
		}
		return &Source{Image: img, Reference: spec, Kind: "oci-layout"}, nil
	case "oci-archive":
		dir, err := os.MkdirTemp(opts.TempDir, "slacker-oci-archive-")
		if err != nil {
			return nil, err
		}
		if err := untar(path, dir); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("unpack OCI archive %s: %w", path, err)
		}
		img, err := fromLayout(dir, tag)
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		return &Source{Image: img, Reference: spec, Kind: "oci-archive", cleanup: func() { os.RemoveAll(dir) }}, nil
	case "docker-archive":
		var t *name.Tag
		if tag != "" {
			nt, err := name.NewTag(tag)
			if err != nil {
				return nil, fmt.Errorf("docker-archive tag %q: %w", tag, err)
			}
			t = &nt
		}
		img, err := tarball.ImageFromPath(path, t)
		if err != nil {
			return nil, fmt.Errorf("open docker-archive %s: %w", path, err)
		}
		return &Source{Image: img, Reference: spec, Kind: "docker-archive"}, nil
	default:
		ref, err := name.ParseReference(rest, insecure(opts.Insecure)...)
		if err != nil {
			return nil, fmt.Errorf("image %q is not a file, a directory or a registry reference: %w", spec, err)
		}
		img, err := remote.Image(ref, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain),
			remote.WithPlatform(v1.Platform{OS: "linux", Architecture: runtime.GOARCH}))
		if err != nil {
			return nil, fmt.Errorf("fetch image %s from its registry: %w", ref, err)
		}
		return &Source{Image: img, Reference: ref.Name(), Kind: "registry"}, nil
	}
}

func insecure(b bool) []name.Option {
	if b {
		return []name.Option{name.Insecure}
	}
	return nil
}

// splitTag splits "path:tag"; a colon that belongs to the path (no tag) is kept.
func splitTag(s string) (string, string) {
	i := strings.LastIndex(s, ":")
	if i < 0 || strings.Contains(s[i:], "/") {
		return s, ""
	}
	return s[:i], s[i+1:]
}

// sniffTar tells an OCI archive from a docker-archive.
func sniffTar(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return "", fmt.Errorf("%s: a tar with neither oci-layout nor manifest.json: not an image archive", path)
		}
		if err != nil {
			return "", fmt.Errorf("%s: not an image archive: %w", path, err)
		}
		switch strings.TrimPrefix(h.Name, "./") {
		case "oci-layout":
			return "oci-archive", nil
		case "manifest.json":
			return "docker-archive", nil
		}
	}
}

// fromLayout picks the image tagged tag (or the only one) in an OCI layout.
func fromLayout(dir, tag string) (v1.Image, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("open OCI layout %s: %w", dir, err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		return nil, fmt.Errorf("open OCI layout %s: %w", dir, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	var cands []v1.Descriptor
	var tags []string
	for _, d := range im.Manifests {
		t := d.Annotations["org.opencontainers.image.ref.name"]
		tags = append(tags, t)
		if tag == "" || t == tag {
			cands = append(cands, d)
		}
	}
	if len(cands) != 1 {
		return nil, fmt.Errorf("OCI layout %s: %d images match tag %q (tags there: %s); name one as DIR:TAG",
			dir, len(cands), tag, strings.Join(tags, ", "))
	}
	d := cands[0]
	if d.MediaType.IsIndex() {
		child, err := idx.ImageIndex(d.Digest)
		if err != nil {
			return nil, err
		}
		cm, err := child.IndexManifest()
		if err != nil {
			return nil, err
		}
		for _, m := range cm.Manifests {
			if m.Platform == nil || (m.Platform.OS == "linux" && m.Platform.Architecture == runtime.GOARCH) {
				return child.Image(m.Digest)
			}
		}
		return nil, fmt.Errorf("OCI layout %s: no linux/%s image in the index", dir, runtime.GOARCH)
	}
	return idx.Image(d.Digest)
}

// untar unpacks an OCI archive's blobs and index (regular files and dirs only; no
// names outside dir).
func untar(path, dir string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		clean := filepath.Clean("/" + h.Name)
		if clean == "/" {
			continue
		}
		target := filepath.Join(dir, clean)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o700); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil {
				return err
			}
			out, err := os.OpenFile(target, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(out, tr)
			out.Close()
			if err != nil {
				return err
			}
		default:
			return fmt.Errorf("entry %q: unexpected type %c in an OCI archive", h.Name, h.Typeflag)
		}
	}
}
