package main

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/stargz-snapshotter/estargz"
	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// convert writes the image TAG of the OCI layout at --layout as an eStargz image
// into a new OCI layout at --out (same tag). With --prioritized (one path per line,
// in the order a recorded run first read them), each file is placed at the front
// of the topmost layer that holds it, followed by the prefetch landmark, so that
// the snapshotter fetches those files first when it mounts the layer; layers with
// none get the no-prefetch landmark. This is what ctr-remote optimize does with the
// files its analyzer recorded.
func convert(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("convert", flag.ExitOnError)
	layout := fs.String("layout", "", "source OCI layout directory (required)")
	tag := fs.String("tag", "", "the image's tag in the source layout (required)")
	out := fs.String("out", "", "the OCI layout directory to write (required; replaced)")
	prioritized := fs.String("prioritized", "", "file listing the paths to place first, one per line")
	fs.Parse(args)
	if *layout == "" || *tag == "" || *out == "" || fs.NArg() != 0 {
		return errors.New("--layout, --tag and --out are required, and nothing else")
	}
	var want []string
	if *prioritized != "" {
		var err error
		if want, err = readPaths(*prioritized); err != nil {
			return err
		}
	}
	src := ociLayout(*layout)
	m, cfg, err := src.image(*tag)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(*out); err != nil {
		return err
	}
	dst := ociLayout(*out)
	if err := dst.init(); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(*out, "tar-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	// Uncompressed tars first: the prioritized files are placed by which layer
	// holds them, topmost first, as the container sees them.
	tars := make([]string, len(m.Layers))
	owner := map[string]int{} // path -> topmost layer holding it
	for i, l := range m.Layers {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		tars[i] = filepath.Join(tmp, fmt.Sprintf("layer-%d.tar", i))
		names, err := src.unpackTar(l, tars[i])
		if err != nil {
			return fmt.Errorf("layer %d (%s): %w", i, l.Digest, err)
		}
		for _, n := range names {
			owner[n] = i
		}
	}
	perLayer := make([][]string, len(m.Layers))
	placed := 0
	for _, p := range want {
		if i, ok := owner[p]; ok {
			perLayer[i] = append(perLayer[i], p)
			placed++
		}
	}
	if len(want) > 0 {
		fmt.Fprintf(os.Stderr, "prioritized: %d of %d recorded paths are files of the image\n", placed, len(want))
	}

	newManifest := m
	newManifest.Layers = make([]ocispec.Descriptor, len(m.Layers))
	cfg.RootFS.DiffIDs = make([]digest.Digest, len(m.Layers))
	for i := range m.Layers {
		start := time.Now()
		desc, diffID, err := dst.writeEStargz(tars[i], perLayer[i])
		if err != nil {
			return fmt.Errorf("layer %d (%s): %w", i, m.Layers[i].Digest, err)
		}
		os.Remove(tars[i])
		newManifest.Layers[i] = desc
		cfg.RootFS.DiffIDs[i] = diffID
		fmt.Fprintf(os.Stderr, "layer %d/%d: %s -> %s, %d bytes, %d prioritized files, %.1fs\n",
			i+1, len(m.Layers), m.Layers[i].Digest.Encoded()[:12], desc.Digest.Encoded()[:12], desc.Size, len(perLayer[i]), time.Since(start).Seconds())
	}
	cb, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	if newManifest.Config, err = dst.writeBlob(ocispec.MediaTypeImageConfig, cb); err != nil {
		return err
	}
	newManifest.MediaType = ocispec.MediaTypeImageManifest
	mb, err := json.Marshal(newManifest)
	if err != nil {
		return err
	}
	md, err := dst.writeBlob(ocispec.MediaTypeImageManifest, mb)
	if err != nil {
		return err
	}
	md.Annotations = map[string]string{ocispec.AnnotationRefName: *tag}
	return dst.writeIndex(md)
}

// readPaths reads one path per line, cleaned to the form estargz uses (no leading
// slash), duplicates dropped, order kept.
func readPaths(file string) ([]string, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	seen := map[string]bool{}
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		p := cleanName(sc.Text())
		if p == "" || seen[p] {
			continue
		}
		seen[p] = true
		out = append(out, p)
	}
	return out, sc.Err()
}

// cleanName is a tar entry's or a recorded path's name relative to the root.
func cleanName(p string) string {
	p = strings.TrimSpace(p)
	if p == "" {
		return ""
	}
	p = strings.TrimPrefix(path.Clean("/"+p), "/")
	return p
}

type ociLayout string

func (o ociLayout) blob(d digest.Digest) string {
	return filepath.Join(string(o), "blobs", d.Algorithm().String(), d.Encoded())
}

func (o ociLayout) readJSON(d digest.Digest, v any) error {
	b, err := os.ReadFile(o.blob(d))
	if err != nil {
		return err
	}
	if digest.FromBytes(b) != d {
		return fmt.Errorf("blob %s does not match its digest", d)
	}
	return json.Unmarshal(b, v)
}

// image finds tag in the layout's index and reads its manifest and config.
func (o ociLayout) image(tag string) (ocispec.Manifest, ocispec.Image, error) {
	var m ocispec.Manifest
	var cfg ocispec.Image
	b, err := os.ReadFile(filepath.Join(string(o), "index.json"))
	if err != nil {
		return m, cfg, err
	}
	var idx ocispec.Index
	if err := json.Unmarshal(b, &idx); err != nil {
		return m, cfg, fmt.Errorf("%s/index.json: %w", o, err)
	}
	for _, d := range idx.Manifests {
		if d.Annotations[ocispec.AnnotationRefName] != tag {
			continue
		}
		if d.MediaType != ocispec.MediaTypeImageManifest && d.MediaType != "application/vnd.docker.distribution.manifest.v2+json" {
			return m, cfg, fmt.Errorf("%s: %s is a %s, not an image manifest", o, tag, d.MediaType)
		}
		if err := o.readJSON(d.Digest, &m); err != nil {
			return m, cfg, err
		}
		if err := o.readJSON(m.Config.Digest, &cfg); err != nil {
			return m, cfg, err
		}
		return m, cfg, nil
	}
	return m, cfg, fmt.Errorf("%s: no image tagged %q", o, tag)
}

// unpackTar writes layer l's uncompressed tar to file and returns the names of
// the regular files in it.
func (o ociLayout) unpackTar(l ocispec.Descriptor, file string) ([]string, error) {
	f, err := os.Open(o.blob(l.Digest))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(l.MediaType, "gzip") {
		gz, err := gzip.NewReader(bufio.NewReaderSize(f, 1<<20))
		if err != nil {
			return nil, err
		}
		defer gz.Close()
		r = gz
	} else if !strings.HasSuffix(l.MediaType, ".tar") {
		return nil, fmt.Errorf("layer media type %s is not supported", l.MediaType)
	}
	w, err := os.Create(file)
	if err != nil {
		return nil, err
	}
	defer w.Close()
	tr := tar.NewReader(io.TeeReader(r, w))
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg {
			names = append(names, cleanName(h.Name))
		}
	}
	// The tar's end-of-archive padding is not read by Next: copy the rest.
	if _, err := io.Copy(w, r); err != nil {
		return nil, err
	}
	return names, w.Close()
}

func (o ociLayout) init() error {
	if err := os.MkdirAll(filepath.Join(string(o), "blobs", "sha256"), 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(string(o), ocispec.ImageLayoutFile), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644)
}

func (o ociLayout) writeBlob(mediaType string, b []byte) (ocispec.Descriptor, error) {
	d := digest.FromBytes(b)
	if err := os.WriteFile(o.blob(d), b, 0o644); err != nil {
		return ocispec.Descriptor{}, err
	}
	return ocispec.Descriptor{MediaType: mediaType, Digest: d, Size: int64(len(b))}, nil
}

func (o ociLayout) writeIndex(manifest ocispec.Descriptor) error {
	idx := ocispec.Index{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageIndex,
		Manifests: []ocispec.Descriptor{manifest}}
	b, err := json.Marshal(idx)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(string(o), "index.json"), b, 0o644)
}

// writeEStargz converts the tar at file to an eStargz blob in the layout and
// returns its descriptor (with the TOC digest and uncompressed size annotations
// the snapshotter reads) and its diff ID.
func (o ociLayout) writeEStargz(file string, prioritized []string) (ocispec.Descriptor, digest.Digest, error) {
	f, err := os.Open(file)
	if err != nil {
		return ocispec.Descriptor{}, "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ocispec.Descriptor{}, "", err
	}
	var opts []estargz.Option
	var missed []string
	if len(prioritized) > 0 {
		opts = append(opts, estargz.WithPrioritizedFiles(prioritized), estargz.WithAllowPrioritizeNotFound(&missed))
	}
	blob, err := estargz.Build(io.NewSectionReader(f, 0, fi.Size()), opts...)
	if err != nil {
		return ocispec.Descriptor{}, "", err
	}
	if len(missed) > 0 {
		// Listed as regular files of this layer, so only a tar without the
		// parents' directory entries gets here: say so rather than lose them.
		fmt.Fprintf(os.Stderr, "warning: %d prioritized files could not be placed first (e.g. %s)\n", len(missed), missed[0])
	}
	defer blob.Close()
	tmp, err := os.CreateTemp(filepath.Join(string(o), "blobs", "sha256"), ".estargz-")
	if err != nil {
		return ocispec.Descriptor{}, "", err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return ocispec.Descriptor{}, "", err
	}
	dg := digest.Canonical.Digester()
	n, err := io.Copy(io.MultiWriter(tmp, dg.Hash()), blob)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return ocispec.Descriptor{}, "", err
	}
	d := dg.Digest()
	usize, err := blob.UncompressedSize()
	if err != nil {
		return ocispec.Descriptor{}, "", err
	}
	if err := os.Rename(tmp.Name(), o.blob(d)); err != nil {
		return ocispec.Descriptor{}, "", err
	}
	desc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayerGzip, Digest: d, Size: n,
		Annotations: map[string]string{
			estargz.TOCJSONDigestAnnotation:         blob.TOCDigest().String(),
			estargz.StoreUncompressedSizeAnnotation: strconv.FormatInt(usize, 10),
		}}
	return desc, blob.DiffID(), nil
}
