package corpus

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"path"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/gzip"
)

// SynthSpec describes a synthetic image: Files files of Size random bytes,
// spread over Layers layers, fully determined by Seed (the same spec gives the
// same blobs, byte for byte, on any machine). These are the random images of
// the paper's push/pull scalability experiment (§4.2, Fig 10).
type SynthSpec struct {
	Files  int
	Size   int64
	Layers int
	Seed   uint64
	// Name is the tag; empty means DefaultName.
	Name string
}

// MaxSynthBytes bounds one synthetic image's content.
const MaxSynthBytes = 64 << 30

// synthTime is the mtime of every synthetic entry.
var synthTime = time.Date(2015, 6, 1, 0, 0, 0, 0, time.UTC)

// filesPerDir keeps directories small.
const filesPerDir = 256

// DefaultName is synth-f<files>-s<size>-l<layers>-r<seed>.
func (s SynthSpec) DefaultName() string {
	return fmt.Sprintf("synth-f%d-s%s-l%d-r%d", s.Files, exactSize(s.Size), s.Layers, s.Seed)
}

// exactSize renders n in the largest binary unit that divides it: 1mib, 64kib, 1000.
func exactSize(n int64) string {
	for _, u := range []struct {
		name string
		size int64
	}{{"gib", 1 << 30}, {"mib", 1 << 20}, {"kib", 1 << 10}} {
		if n >= u.size && n%u.size == 0 {
			return fmt.Sprintf("%d%s", n/u.size, u.name)
		}
	}
	return fmt.Sprint(n)
}

// Validate checks the spec's bounds.
func (s SynthSpec) Validate() error {
	switch {
	case s.Files < 1:
		return errors.New("synthetic image needs at least one file")
	case s.Size < 0:
		return errors.New("negative file size")
	case s.Layers < 1 || s.Layers > s.Files:
		return fmt.Errorf("layers must be in [1, files=%d], got %d", s.Files, s.Layers)
	case s.Size > 0 && int64(s.Files) > MaxSynthBytes/s.Size:
		return fmt.Errorf("%d files of %s exceed the %s bound", s.Files, HumanBytes(s.Size), HumanBytes(MaxSynthBytes))
	}
	return nil
}

// synthLayerFiles returns the half-open range of file indexes in layer l.
func (s SynthSpec) synthLayerFiles(l int) (int, int) {
	return l * s.Files / s.Layers, (l + 1) * s.Files / s.Layers
}

// SynthPath is the path of file i in a synthetic image.
func SynthPath(i int) string {
	return fmt.Sprintf("data/%04d/%07d.bin", i/filesPerDir, i)
}

// synthReader returns the deterministic content of file i.
func synthReader(seed uint64, i int, size int64) io.Reader {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], seed)
	binary.LittleEndian.PutUint64(b[8:], uint64(i))
	key := sha256.Sum256(b[:])
	return io.LimitReader(rand.NewChaCha8(key), size)
}

// WriteSynthLayer writes layer l of spec as a gzip blob into blobs.
func WriteSynthLayer(ctx context.Context, spec SynthSpec, l int, blobs string) (Blob, error) {
	var b Blob
	bw, err := newBlobWriterLevel(blobs, gzip.BestSpeed)
	if err != nil {
		return b, err
	}
	defer bw.abort()
	lo, hi := spec.synthLayerFiles(l)
	dirs := map[string]bool{}
	hdr := func(name string, typ byte, mode, size int64) error {
		b.Entries++
		return bw.tw.WriteHeader(&tar.Header{Typeflag: typ, Name: name, Mode: mode, Size: size,
			ModTime: synthTime, Format: tar.FormatPAX})
	}
	for i := lo; i < hi; i++ {
		if err := ctx.Err(); err != nil {
			return b, err
		}
		p := SynthPath(i)
		for _, d := range []string{"data/", path.Dir(p) + "/"} {
			if !dirs[d] {
				dirs[d] = true
				if err := hdr(d, tar.TypeDir, 0o755, 0); err != nil {
					return b, err
				}
			}
		}
		if err := hdr(p, tar.TypeReg, 0o644, spec.Size); err != nil {
			return b, err
		}
		if _, err := io.Copy(bw.tw, synthReader(spec.Seed, i, spec.Size)); err != nil {
			return b, err
		}
	}
	if err := bw.commit(&b); err != nil {
		return b, err
	}
	return b, nil
}

// Synth writes a synthetic image into the corpus layout and tags it. It needs
// no root. Its record (records/NAME.json) has category "synthetic".
func (c *Corpus) Synth(ctx context.Context, spec SynthSpec) (*ImageRecord, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if spec.Name == "" {
		spec.Name = spec.DefaultName()
	}
	unlock, err := c.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := c.checkFree(); err != nil {
		return nil, err
	}
	if free, err := FreeBytes(c.opts.Dir); err == nil && c.opts.MinFree >= 0 && free-int64(spec.Files)*spec.Size < c.opts.MinFree {
		return nil, fmt.Errorf("synthetic image of %s would leave less than %s free", HumanBytes(int64(spec.Files)*spec.Size), HumanBytes(c.opts.MinFree))
	}
	now := time.Now().UTC()
	rec := &ImageRecord{Name: spec.Name, Category: "synthetic", Base: "scratch", Recipe: RecipeVersion, Built: now,
		ImageHash: hashKey(spec)}
	cfg := v1.ConfigFile{Architecture: "amd64", OS: "linux", Created: v1.Time{Time: synthTime},
		RootFS: v1.RootFS{Type: "layers"},
		Config: v1.Config{Labels: map[string]string{
			"org.slacker.hellobench.synthetic": fmt.Sprintf("files=%d size=%d layers=%d seed=%d", spec.Files, spec.Size, spec.Layers, spec.Seed),
		}}}
	m := v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1}
	for l := 0; l < spec.Layers; l++ {
		t0 := time.Now()
		b, err := WriteSynthLayer(ctx, spec, l, c.Layout.BlobsDir())
		if err != nil {
			return nil, fmt.Errorf("synthetic layer %d: %w", l+1, err)
		}
		lo, hi := spec.synthLayerFiles(l)
		c.progressf("%s layer %d/%d: %d files, %s gz in %s", spec.Name, l+1, spec.Layers, hi-lo, HumanBytes(b.Size), since(t0))
		d, _ := v1.NewHash(b.Digest)
		diff, _ := v1.NewHash(b.DiffID)
		m.Layers = append(m.Layers, v1.Descriptor{MediaType: types.OCILayer, Size: b.Size, Digest: d})
		cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, diff)
		createdBy := fmt.Sprintf("synthetic files %d..%d of %s", lo, hi-1, HumanBytes(spec.Size))
		cfg.History = append(cfg.History, v1.History{Created: v1.Time{Time: synthTime}, CreatedBy: createdBy})
		rec.Layers = append(rec.Layers, ImageLayer{Kind: "synthetic", CreatedBy: createdBy, Digest: b.Digest, DiffID: b.DiffID, Size: b.Size, USize: b.USize})
		rec.Size += b.Size
		rec.USize += b.USize
	}
	cdesc, err := c.Layout.WriteJSONBlob(cfg, types.OCIConfigJSON)
	if err != nil {
		return nil, err
	}
	m.Config = cdesc
	mdesc, err := c.Layout.WriteJSONBlob(m, types.OCIManifestSchema1)
	if err != nil {
		return nil, err
	}
	rec.Config, rec.Manifest = cdesc.Digest.String(), mdesc.Digest.String()
	if err := c.Layout.Tag(spec.Name, mdesc); err != nil {
		return nil, err
	}
	if err := writeJSON(c.path("records", spec.Name+".json"), rec); err != nil {
		return nil, err
	}
	return rec, nil
}
