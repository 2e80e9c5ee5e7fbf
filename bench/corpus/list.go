package corpus

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// ListedLayer is one layer of a listed image.
type ListedLayer struct {
	Digest string `json:"digest"`
	Size   int64  `json:"size"`
	USize  int64  `json:"usize,omitempty"`
	// CreatedBy says what made the layer (from the image's history).
	CreatedBy string `json:"created_by,omitempty"`
	// Shared counts the images of the corpus that reference this blob.
	Shared int `json:"shared"`
}

// ListedImage is one tagged image of the corpus layout.
type ListedImage struct {
	Name     string        `json:"name"`
	Manifest string        `json:"manifest"`
	Layers   []ListedLayer `json:"layers"`
	Size     int64         `json:"size"`
	USize    int64         `json:"usize,omitempty"`
	// Record is the build record, nil for images without one (synthetic).
	Record *ImageRecord `json:"record,omitempty"`
}

// List reads every tagged image of the corpus in dir, sorted by name. It needs
// no root and does not take the build lock.
func List(dir string) ([]ListedImage, error) {
	if _, err := os.Stat(filepath.Join(dir, "oci", "index.json")); err != nil {
		return nil, fmt.Errorf("no corpus in %s (build one with `corpus build`): %w", dir, err)
	}
	l := &Layout{Dir: filepath.Join(dir, "oci")}
	tags, err := l.Tags()
	if err != nil {
		return nil, err
	}
	var out []ListedImage
	refs := map[string]int{}
	for name, d := range tags {
		m, cfg, err := l.Manifest(d)
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", name, err)
		}
		im := ListedImage{Name: name, Manifest: d.Digest.String()}
		var rec ImageRecord
		if err := readJSON(filepath.Join(dir, "records", name+".json"), &rec); err == nil && rec.Manifest == im.Manifest {
			im.Record = &rec
		}
		hist := 0
		for i, ld := range m.Layers {
			ll := ListedLayer{Digest: ld.Digest.String(), Size: ld.Size}
			for hist < len(cfg.History) && cfg.History[hist].EmptyLayer {
				hist++
			}
			if hist < len(cfg.History) {
				ll.CreatedBy = cfg.History[hist].CreatedBy
				hist++
			}
			if im.Record != nil && i < len(im.Record.Layers) {
				ll.USize = im.Record.Layers[i].USize
			}
			refs[ll.Digest]++
			im.Layers = append(im.Layers, ll)
			im.Size += ll.Size
			im.USize += ll.USize
		}
		out = append(out, im)
	}
	for i := range out {
		for j := range out[i].Layers {
			out[i].Layers[j].Shared = refs[out[i].Layers[j].Digest]
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// GC removes layer blobs that no tagged image and no layer record needs, and
// layer records whose blob is gone. It returns the bytes freed.
func (c *Corpus) GC() (int64, error) {
	unlock, err := c.lock()
	if err != nil {
		return 0, err
	}
	defer unlock()
	keep := map[string]bool{}
	ents, _ := os.ReadDir(c.path("layers"))
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		var rec LayerRecord
		p := c.path("layers", e.Name())
		if err := readJSON(p, &rec); err != nil || (!rec.Empty && !c.Layout.HasBlob(rec.Digest, rec.Size)) {
			os.Remove(p)
			continue
		}
		if !rec.Empty {
			keep[rec.Digest] = true
		}
	}
	return c.Layout.GC(keep)
}

// Remove untags images and deletes their records. Their blobs stay until GC
// (other images and the layer cache may use them).
func (c *Corpus) Remove(names []string) error {
	unlock, err := c.lock()
	if err != nil {
		return err
	}
	defer unlock()
	tags, err := c.Layout.Tags()
	if err != nil {
		return err
	}
	for _, n := range names {
		if _, ok := tags[n]; !ok {
			return fmt.Errorf("no image %q in the corpus", n)
		}
	}
	for _, n := range names {
		if err := c.Layout.Untag(n); err != nil {
			return err
		}
		if err := os.Remove(c.path("records", n+".json")); err != nil && !isNotExist(err) {
			return err
		}
	}
	return nil
}
