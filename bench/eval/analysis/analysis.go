package analysis

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"sync"

	"github.com/slacker-dev/slacker/bench/corpus"
	"github.com/slacker-dev/slacker/bench/eval"
	"github.com/slacker-dev/slacker/bench/rig"
	"github.com/slacker-dev/slacker/bench/workload"
)

// Options configure a run.
type Options struct {
	CorpusDir string
	// Workloads is the workloads file whose images are analysed (all of them, or
	// Only).
	Workloads string
	Only      []string
	// Static skips the start-up runs (no root, no daemons: the corpus alone).
	Static   bool
	Dir      string // work directory of the start-up runs
	Binaries rig.Binaries
	// Runs is the number of cold start-up pairs per workload.
	Runs       int
	Seed       uint64
	DaemonArgs []string
	Progress   *rig.Progress
}

// Image is what the analysis found in one image.
type Image struct {
	Name     string `json:"name"`
	Category string `json:"category"`
	Layers   int    `json:"layers"`
	// GzBytes is the compressed size (layer blobs), TarBytes the uncompressed layers,
	// FileBytes the regular files' bytes over all layers.
	GzBytes   int64 `json:"gz_bytes"`
	TarBytes  int64 `json:"tar_bytes"`
	FileBytes int64 `json:"file_bytes"`
	Files     int   `json:"files"`
	Dirs      int   `json:"dirs"`
	// UniqueFileBytes and UniqueBlockBytes are FileBytes after file-level and
	// 4 KiB-block deduplication inside the image.
	UniqueFileBytes  int64 `json:"unique_file_bytes"`
	UniqueBlockBytes int64 `json:"unique_block_bytes"`
	// Per layer, top first (depth 1 = the top layer): files, dirs, file bytes.
	DepthFiles []int   `json:"depth_files"`
	DepthDirs  []int   `json:"depth_dirs"`
	DepthBytes []int64 `json:"depth_bytes"`
	// Starts are the start-up runs (nil with --static).
	Starts []Start `json:"starts,omitempty"`
}

// Corpus is the deduplication over all analysed images.
type Corpus struct {
	// RawBytes sums every image's file bytes (a layer shared by k images counts k
	// times, as each image stores it); DistinctLayerBytes counts each distinct layer
	// once; Unique* are the distinct file contents and 4 KiB blocks of everything.
	RawBytes           int64 `json:"raw_bytes"`
	DistinctLayerBytes int64 `json:"distinct_layer_bytes"`
	UniqueFileBytes    int64 `json:"unique_file_bytes"`
	UniqueBlockBytes   int64 `json:"unique_block_bytes"`
	GzBytes            int64 `json:"gz_bytes"`
	TarBytes           int64 `json:"tar_bytes"`
	DistinctLayers     int   `json:"distinct_layers"`
}

// Results is what a run found (analysis.json).
type Results struct {
	Meta          *eval.Meta `json:"meta"`
	WorkloadsFile string     `json:"workloads_file"`
	Images        []Image    `json:"images"`
	Corpus        Corpus     `json:"corpus"`
	// StartMethod says how bytes read at start-up were measured.
	StartMethod  string   `json:"start_method,omitempty"`
	SlackerdArgs []string `json:"slackerd_args,omitempty"`
}

// Run analyses the corpus and, unless Static, runs every workload under Slacker to
// measure what it reads.
func Run(ctx context.Context, o Options) (*Results, error) {
	set, err := workload.ParseFile(o.Workloads)
	if err != nil {
		return nil, err
	}
	ws := set.Workloads
	if len(o.Only) > 0 {
		ws = nil
		for _, n := range o.Only {
			w := set.Get(n)
			if w == nil {
				return nil, fmt.Errorf("no workload %q in %s", n, o.Workloads)
			}
			ws = append(ws, w)
		}
	}
	res := &Results{Meta: eval.NewMeta("analysis"), WorkloadsFile: o.Workloads, SlackerdArgs: o.DaemonArgs}
	if err := res.static(ctx, o, ws); err != nil {
		return nil, err
	}
	if !o.Static {
		if err := res.startups(ctx, o, ws); err != nil {
			res.Meta.Done()
			return res, err
		}
	}
	res.Meta.Done()
	return res, ctx.Err()
}

// static reads every layer of the workloads' images once.
func (r *Results) static(ctx context.Context, o Options, ws []*workload.Workload) error {
	ims, err := corpus.List(o.CorpusDir)
	if err != nil {
		return err
	}
	byName := map[string]corpus.ListedImage{}
	for _, im := range ims {
		byName[im.Name] = im
	}
	blobs := filepath.Join(o.CorpusDir, "oci", "blobs", "sha256")
	layers := map[string]*Layer{}
	var order []string
	for _, w := range ws {
		im, ok := byName[w.Name]
		if !ok {
			return fmt.Errorf("workload %s is not built in %s (slacker-bench corpus build)", w.Name, o.CorpusDir)
		}
		for _, l := range im.Layers {
			if _, ok := layers[l.Digest]; !ok {
				layers[l.Digest] = nil
				order = append(order, l.Digest)
			}
		}
	}
	o.Progress.Printf("reading %d distinct layers of %d images", len(order), len(ws))
	var mu sync.Mutex
	var firstErr error
	sem := make(chan struct{}, 2)
	var wg sync.WaitGroup
	for _, d := range order {
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func(d string) {
			defer func() { <-sem; wg.Done() }()
			l, err := ReadLayer(filepath.Join(blobs, d[len("sha256:"):]))
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = err
			}
			if l != nil {
				l.Digest = d
				layers[d] = l
			}
		}(d)
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	global := NewDedup()
	distinct := NewDedup()
	for _, d := range order {
		distinct.Add(layers[d])
		r.Corpus.GzBytes += layers[d].GzBytes
		r.Corpus.TarBytes += layers[d].TarBytes
	}
	r.Corpus.DistinctLayers = len(order)
	r.Corpus.DistinctLayerBytes = distinct.Raw
	for _, w := range ws {
		im := byName[w.Name]
		img := Image{Name: w.Name, Category: string(w.Category), Layers: len(im.Layers)}
		dd := NewDedup()
		for i := len(im.Layers) - 1; i >= 0; i-- { // top first
			l := layers[im.Layers[i].Digest]
			dd.Add(l)
			global.Add(l)
			img.GzBytes += l.GzBytes
			img.TarBytes += l.TarBytes
			img.FileBytes += l.FileBytes
			img.Files += l.Files
			img.Dirs += l.Dirs
			img.DepthFiles = append(img.DepthFiles, l.Files)
			img.DepthDirs = append(img.DepthDirs, l.Dirs)
			img.DepthBytes = append(img.DepthBytes, l.FileBytes)
		}
		img.UniqueFileBytes, img.UniqueBlockBytes = dd.FileBytes(), dd.BlockBytes()
		r.Images = append(r.Images, img)
	}
	r.Corpus.RawBytes = global.Raw
	r.Corpus.UniqueFileBytes, r.Corpus.UniqueBlockBytes = global.FileBytes(), global.BlockBytes()
	sort.SliceStable(r.Images, func(i, j int) bool {
		ci := slices.Index(workload.Categories, workload.Category(r.Images[i].Category))
		cj := slices.Index(workload.Categories, workload.Category(r.Images[j].Category))
		return ci < cj
	})
	o.Progress.Printf("corpus: %s of files in %d images; distinct files %s, distinct 4 KiB blocks %s",
		eval.HumanBytes(r.Corpus.RawBytes), len(ws), eval.HumanBytes(r.Corpus.UniqueFileBytes), eval.HumanBytes(r.Corpus.UniqueBlockBytes))
	return nil
}

// TopShare, BottomShare and LargestShare are the shares of the image's file bytes in
// its top, bottom and largest layer (NaN for an image without file bytes).
func (im Image) TopShare() float64    { return im.share(im.depthBytes(0)) }
func (im Image) BottomShare() float64 { return im.share(im.depthBytes(len(im.DepthBytes) - 1)) }
func (im Image) LargestShare() float64 {
	return im.share(slices.Max(append([]int64{0}, im.DepthBytes...)))
}

func (im Image) depthBytes(i int) int64 {
	if i < 0 || i >= len(im.DepthBytes) {
		return 0
	}
	return im.DepthBytes[i]
}

func (im Image) share(n int64) float64 {
	if im.FileBytes == 0 {
		return nan()
	}
	return float64(n) / float64(im.FileBytes)
}
