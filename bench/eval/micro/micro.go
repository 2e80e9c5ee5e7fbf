package micro

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/slacker-dev/slacker/bench/eval"
	"github.com/slacker-dev/slacker/bench/rig"
)

// Options configure a run.
type Options struct {
	Dir       string // work directory (the systems' state); emptied first
	ImagesDir string // OCI layout of the evaluation's images
	Binaries  rig.Binaries
	// Layers of FilesPerLayer empty files; OpensPerLayer opened per layer and run.
	Layers, FilesPerLayer, OpensPerLayer int
	// Sizes of the files appended to.
	Sizes []int64
	Runs  int
	Seed  uint64
	// Skip "open", "append" or "rerun" to leave that part out.
	Skip []string
	// CorpusDir and Workloads give the HelloBench workloads of the rerun part (all
	// of the file, or Only).
	CorpusDir, Workloads string
	Only                 []string
	// RerunRuns repeats the rerun part (default Runs).
	RerunRuns int
	// Block measures slacker-block (slackerd --container-root block) too, beside
	// slacker (its default mode, shared roots) and overlayfs, in every part.
	Block      bool
	DaemonArgs []string
	Progress   *rig.Progress
}

// OpenSample is one open.
type OpenSample struct {
	System  string  `json:"system"`
	Depth   int     `json:"depth"` // 1 = the top layer
	Run     int     `json:"run"`
	Seconds float64 `json:"s"`
}

// AppendSample is one 1-byte append.
type AppendSample struct {
	System string `json:"system"`
	Size   int64  `json:"size"`
	Run    int    `json:"run"`
	// Seconds is open(O_WRONLY|O_APPEND) + write(1 byte); FsyncSeconds adds fsync.
	Seconds      float64 `json:"s"`
	FsyncSeconds float64 `json:"fsync_s"`
}

// Config records the run's parameters.
type Config struct {
	Layers        int      `json:"layers"`
	FilesPerLayer int      `json:"files_per_layer"`
	OpensPerLayer int      `json:"opens_per_layer"`
	Sizes         []int64  `json:"sizes"`
	Runs          int      `json:"runs"`
	SlackerdArgs  []string `json:"slackerd_args,omitempty"`
}

// Results is what a run measured (micro.json).
type Results struct {
	Meta   *eval.Meta `json:"meta"`
	Config Config     `json:"config"`
	// RootModes are the Slacker systems' container root modes, by name (none in
	// results from before the modes were measured, whose "slacker" made block
	// clones).
	RootModes map[string]string `json:"root_modes,omitempty"`
	Open      []OpenSample      `json:"open,omitempty"`
	Append    []AppendSample    `json:"append,omitempty"`
	Rerun     []RerunSample     `json:"rerun,omitempty"`
}

// RerunSample is a workload started twice on one node.
type RerunSample struct {
	System   string `json:"system"`
	Workload string `json:"workload"`
	Category string `json:"category"`
	Run      int    `json:"run"`
	// Seconds until ready: the first container (cold node), the second.
	First  float64 `json:"first_s"`
	Second float64 `json:"second_s"`
	Error  string  `json:"error,omitempty"`
}

// fileName is file f of layer l (0 = the bottom layer).
func fileName(l, f int) string { return fmt.Sprintf("l%02d-%05d", l, f) }

// sizeFile is the appended file of a size.
func sizeFile(size int64) string { return fmt.Sprintf("big/%s.bin", eval.SizeTag(size)) }

// Run runs the micro-benchmarks.
func Run(ctx context.Context, o Options) (*Results, error) {
	if err := eval.NeedRoot("micro"); err != nil {
		return nil, err
	}
	if o.Runs <= 0 {
		o.Runs = 3
	}
	if o.Layers < 1 || o.FilesPerLayer < 1 || o.OpensPerLayer < 1 || o.OpensPerLayer > o.FilesPerLayer {
		return nil, fmt.Errorf("need layers >= 1 and 1 <= opens per layer <= files per layer")
	}
	res := &Results{Meta: eval.NewMeta("micro"), Config: Config{Layers: o.Layers, FilesPerLayer: o.FilesPerLayer,
		OpensPerLayer: o.OpensPerLayer, Sizes: o.Sizes, Runs: o.Runs, SlackerdArgs: o.DaemonArgs}}
	doOpen, doAppend := !slices.Contains(o.Skip, "open"), !slices.Contains(o.Skip, "append") && len(o.Sizes) > 0
	doRerun := !slices.Contains(o.Skip, "rerun")
	var images []rig.Image
	depthName := fmt.Sprintf("eval-depth-%dx%d", o.Layers, o.FilesPerLayer)
	if doOpen {
		var layers []eval.LayerFunc
		for l := 0; l < o.Layers; l++ {
			layers = append(layers, func(dir string) error {
				d := filepath.Join(dir, "files")
				if err := os.Mkdir(d, 0o755); err != nil {
					return err
				}
				for f := 0; f < o.FilesPerLayer; f++ {
					if err := os.WriteFile(filepath.Join(d, fileName(l, f)), nil, 0o644); err != nil {
						return err
					}
				}
				return nil
			})
		}
		o.Progress.Printf("image %s", depthName)
		img, err := eval.BuildImage(ctx, o.ImagesDir, depthName, layers)
		if err != nil {
			return nil, err
		}
		images = append(images, img)
	}
	appendName := "eval-append"
	for _, s := range o.Sizes {
		appendName += "-" + eval.SizeTag(s)
	}
	if doAppend {
		bottom := func(dir string) error {
			for i, s := range o.Sizes {
				if err := eval.RandomFile(filepath.Join(dir, sizeFile(s)), s, uint64(i+1)); err != nil {
					return err
				}
			}
			return nil
		}
		top := func(dir string) error { return os.WriteFile(filepath.Join(dir, "top"), []byte("top layer\n"), 0o644) }
		o.Progress.Printf("image %s", appendName)
		img, err := eval.BuildImage(ctx, o.ImagesDir, appendName, []eval.LayerFunc{bottom, top})
		if err != nil {
			return nil, err
		}
		images = append(images, img)
	}
	pair, err := eval.StartPair(ctx, eval.PairOptions{Dir: o.Dir, Binaries: o.Binaries, DaemonArgs: o.DaemonArgs,
		Modes: eval.SlackerModes(o.Block)})
	if err != nil {
		return nil, err
	}
	defer pair.Close()
	res.RootModes = pair.RootModes()
	for _, img := range images {
		o.Progress.Printf("publishing %s (%s)", img.Name, eval.HumanBytes(img.DataBytes))
		if err := pair.Publish(ctx, img); err != nil {
			return nil, err
		}
	}
	rng := rand.New(rand.NewPCG(o.Seed, 11))
	if doRerun {
		if err := res.reruns(ctx, o, pair, rng); err != nil {
			res.Meta.Done()
			return res, err
		}
	}
	for run := 1; run <= o.Runs; run++ {
		for _, s := range pair.Shuffled(rng) {
			if ctx.Err() != nil {
				return res, ctx.Err()
			}
			if doOpen {
				out, err := opens(ctx, o, s, pair.Ref(s, depthName), run, rng)
				if err != nil {
					res.Meta.Fail("%s open run %d: %v", s.Name(), run, err)
				}
				res.Open = append(res.Open, out...)
			}
			if doAppend {
				out, err := appends(ctx, o, s, pair.Ref(s, appendName), run, rng)
				if err != nil {
					res.Meta.Fail("%s append run %d: %v", s.Name(), run, err)
				}
				res.Append = append(res.Append, out...)
			}
		}
	}
	res.Meta.Done()
	return res, ctx.Err()
}

// opens times OpensPerLayer opens per layer, in random order, each with the page
// cache dropped, on a container root of a cold node.
func opens(ctx context.Context, o Options, s rig.System, ref string, run int, rng *rand.Rand) ([]OpenSample, error) {
	if err := s.Cold(ctx); err != nil {
		return nil, err
	}
	root, release, err := s.Mount(ctx, ref)
	if err != nil {
		return nil, err
	}
	defer release()
	type pick struct{ layer, file int }
	var picks []pick
	for l := 0; l < o.Layers; l++ {
		for _, f := range rng.Perm(o.FilesPerLayer)[:o.OpensPerLayer] {
			picks = append(picks, pick{l, f})
		}
	}
	rng.Shuffle(len(picks), func(i, j int) { picks[i], picks[j] = picks[j], picks[i] })
	var out []OpenSample
	var sum time.Duration
	for _, p := range picks {
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
		if err := rig.DropCaches(); err != nil {
			return out, err
		}
		path := filepath.Join(root, "files", fileName(p.layer, p.file))
		start := time.Now()
		f, err := os.Open(path)
		took := time.Since(start)
		if err != nil {
			return out, err
		}
		f.Close()
		sum += took
		out = append(out, OpenSample{System: s.Name(), Depth: o.Layers - p.layer, Run: run, Seconds: took.Seconds()})
	}
	o.Progress.Printf("run %d %-13s %d opens, mean %s", run, s.Name(), len(out), (sum / time.Duration(max(len(out), 1))).Round(time.Microsecond))
	return out, nil
}

// appends times a 1-byte append to each size's file (random order) on a container
// root of a cold node, each after the page cache was dropped and the file stat'ed.
func appends(ctx context.Context, o Options, s rig.System, ref string, run int, rng *rand.Rand) ([]AppendSample, error) {
	if err := s.Cold(ctx); err != nil {
		return nil, err
	}
	root, release, err := s.Mount(ctx, ref)
	if err != nil {
		return nil, err
	}
	defer release()
	var out []AppendSample
	for _, i := range rng.Perm(len(o.Sizes)) {
		size := o.Sizes[i]
		if err := rig.DropCaches(); err != nil {
			return out, err
		}
		path := filepath.Join(root, sizeFile(size))
		if fi, err := os.Stat(path); err != nil {
			return out, err
		} else if fi.Size() != size {
			return out, fmt.Errorf("%s has %d bytes, want %d", path, fi.Size(), size)
		}
		start := time.Now()
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return out, err
		}
		_, err = f.Write([]byte{'x'})
		write := time.Since(start)
		if err == nil {
			err = f.Sync()
		}
		synced := time.Since(start)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return out, fmt.Errorf("append to %s: %w", path, err)
		}
		out = append(out, AppendSample{System: s.Name(), Size: size, Run: run, Seconds: write.Seconds(), FsyncSeconds: synced.Seconds()})
		o.Progress.Printf("run %d %-13s 1-byte append to %8s: %9s, with fsync %9s", run, s.Name(), eval.HumanBytes(size),
			write.Round(time.Microsecond), synced.Round(time.Microsecond))
	}
	return out, nil
}
