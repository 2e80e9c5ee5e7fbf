package scale

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/slacker-dev/slacker/bench/corpus"
	"github.com/slacker-dev/slacker/bench/eval"
	"github.com/slacker-dev/slacker/bench/rig"
	"github.com/slacker-dev/slacker/internal/testenv/services"
)

// Options configure a run.
type Options struct {
	Dir       string // work directory; emptied first
	ImagesDir string // the evaluation's OCI layout
	Binaries  rig.Binaries
	Sizes     []int64
	Counts    []int
	// MaxBytes, if set, skips the trials that would move more than this (count x
	// size) at once.
	MaxBytes   int64
	Runs       int
	Seed       uint64
	DaemonArgs []string
	Progress   *rig.Progress
}

// Sample is one trial of one operation.
type Sample struct {
	System  string  `json:"system"`
	Op      string  `json:"op"` // push or pull
	Size    int64   `json:"size"`
	Count   int     `json:"count"`
	Run     int     `json:"run"`
	Seconds float64 `json:"s"`
	Error   string  `json:"error,omitempty"`
}

// Convert is the conversion of one image into a Slacker image (not part of push).
type Convert struct {
	Size    int64   `json:"size"`
	Seconds float64 `json:"s"`
}

// Results is what a run measured (scale.json).
type Results struct {
	Meta         *eval.Meta `json:"meta"`
	Sizes        []int64    `json:"sizes"`
	Counts       []int      `json:"counts"`
	MaxBytes     int64      `json:"max_bytes,omitempty"`
	Runs         int        `json:"runs"`
	SlackerdArgs []string   `json:"slackerd_args,omitempty"`
	Convert      []Convert  `json:"convert"`
	Samples      []Sample   `json:"samples"`
}

// Run runs the experiment.
func Run(ctx context.Context, o Options) (*Results, error) {
	if err := eval.NeedRoot("scale"); err != nil {
		return nil, err
	}
	if o.Runs <= 0 {
		o.Runs = 1
	}
	maxN := 0
	for _, n := range o.Counts {
		if n < 1 {
			return nil, fmt.Errorf("counts must be positive")
		}
		maxN = max(maxN, n)
	}
	res := &Results{Meta: eval.NewMeta("scale"), Sizes: o.Sizes, Counts: o.Counts, MaxBytes: o.MaxBytes, Runs: o.Runs, SlackerdArgs: o.DaemonArgs}
	imgs := map[int64][]rig.Image{}
	for _, size := range o.Sizes {
		n := 0
		for _, c := range o.Counts {
			if o.within(c, size) {
				n = max(n, c)
			}
		}
		o.Progress.Printf("synthetic images: %d of %s", n, eval.HumanBytes(size))
		for i := 0; i < n; i++ {
			spec := corpus.SynthSpec{Files: 1, Size: size, Layers: 1, Seed: uint64(1000 + i)}
			img, err := eval.SynthImage(ctx, o.ImagesDir, spec)
			if err != nil {
				return nil, err
			}
			imgs[size] = append(imgs[size], img)
		}
	}
	pair, err := eval.StartPair(ctx, eval.PairOptions{Dir: o.Dir, Binaries: o.Binaries, DaemonArgs: o.DaemonArgs})
	if err != nil {
		return nil, err
	}
	defer pair.Close()
	// Convert every image once (Publish converts, then pushes to the pair's registry,
	// which the trials do not use).
	for _, size := range o.Sizes {
		for _, img := range imgs[size] {
			start := time.Now()
			if _, _, err := pair.Slacker.Publish(ctx, img, pair.Registry.Addr); err != nil {
				return nil, fmt.Errorf("convert %s: %w", img.Name, err)
			}
			res.Convert = append(res.Convert, Convert{Size: size, Seconds: time.Since(start).Seconds()})
		}
		o.Progress.Printf("converted %d images of %s for Slacker", len(imgs[size]), eval.HumanBytes(size))
	}
	rng := rand.New(rand.NewPCG(o.Seed, 23))
	trial := 0
	for run := 1; run <= o.Runs; run++ {
		for _, size := range o.Sizes {
			for _, n := range o.Counts {
				if !o.within(n, size) {
					continue
				}
				if ctx.Err() != nil {
					res.Meta.Done()
					return res, ctx.Err()
				}
				trial++
				out, err := runTrial(ctx, o, pair, imgs[size][:n], filepath.Join(o.Dir, fmt.Sprintf("reg-%d", trial)), rng)
				for i := range out {
					out[i].Size, out[i].Count, out[i].Run = size, n, run
					o.Progress.Printf("run %d %-9s %s %2d x %-9s %8.2fs %s", run, out[i].System, out[i].Op, n, eval.HumanBytes(size), out[i].Seconds, out[i].Error)
				}
				res.Samples = append(res.Samples, out...)
				if err != nil {
					res.Meta.Fail("%d x %s: %v", n, eval.HumanBytes(size), err)
				}
			}
		}
	}
	res.Meta.Done()
	return res, ctx.Err()
}

// within says whether a trial of n images of size bytes is within MaxBytes.
func (o Options) within(n int, size int64) bool {
	return o.MaxBytes <= 0 || int64(n)*size <= o.MaxBytes
}

// runTrial pushes imgs at once with each system to a fresh registry, then pulls them
// at once on a cold node.
func runTrial(ctx context.Context, o Options, pair *eval.Pair, imgs []rig.Image, regDir string, rng *rand.Rand) ([]Sample, error) {
	reg, err := services.StartRegistry(ctx, services.RegistryOptions{Dir: regDir})
	if err != nil {
		return nil, err
	}
	defer func() {
		reg.Stop()
		os.RemoveAll(regDir) // bounded disk: a trial's uploads are not needed after it
	}()
	var out []Sample
	var errs []error
	refs := map[string][]string{}
	for _, s := range pair.Shuffled(rng) {
		var took time.Duration
		var err error
		switch sys := s.(type) {
		case *rig.Slacker:
			if err = sys.StartPublisher(ctx); err != nil {
				break
			}
			for i := range imgs {
				refs[s.Name()] = append(refs[s.Name()], fmt.Sprintf("%s/slacker/scale%d:latest", reg.Addr, i))
			}
			took, err = parallel(len(imgs), func(i int) error {
				return check(sys.CLI(ctx, "push", imgs[i].Name, refs[s.Name()][i]))
			})
		case *rig.Containerd:
			for i := range imgs {
				refs[s.Name()] = append(refs[s.Name()], fmt.Sprintf("%s/oci/scale%d:latest", reg.Addr, i))
			}
			took, err = parallel(len(imgs), func(i int) error {
				return eval.Command(ctx, "skopeo", "copy", "--quiet", "--dest-tls-verify=false",
					"oci:"+imgs[i].Layout+":"+imgs[i].Tag, "docker://"+refs[s.Name()][i])
			})
		}
		out = append(out, sample(s.Name(), "push", took, err))
		errs = append(errs, err)
	}
	for _, s := range pair.Shuffled(rng) {
		if err := s.Cold(ctx); err != nil {
			errs = append(errs, err)
			continue
		}
		var took time.Duration
		var err error
		switch sys := s.(type) {
		case *rig.Slacker:
			took, err = parallel(len(imgs), func(i int) error { return check(sys.CLI(ctx, "pull", refs[s.Name()][i])) })
		case *rig.Containerd:
			took, err = parallel(len(imgs), func(i int) error {
				return check(sys.Ctr(ctx, "images", "pull", "--plain-http", "--snapshotter", "overlayfs", refs[s.Name()][i]))
			})
		}
		out = append(out, sample(s.Name(), "pull", took, err))
		errs = append(errs, err)
	}
	return out, errors.Join(errs...)
}

func sample(sys, op string, took time.Duration, err error) Sample {
	s := Sample{System: sys, Op: op, Seconds: took.Seconds()}
	if err != nil {
		s.Error = err.Error()
	}
	return s
}

// parallel runs fn(0..n-1) at once and returns the time until all returned.
func parallel(n int, fn func(i int) error) (time.Duration, error) {
	start := time.Now()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fn(i)
		}()
	}
	wg.Wait()
	return time.Since(start), errors.Join(errs...)
}

// check turns a failed command into an error.
func check(r rig.RunResult, err error) error {
	if err == nil && r.ExitCode != 0 {
		err = fmt.Errorf("exit %d: %s", r.ExitCode, strings.TrimSpace(r.Stderr+r.Stdout))
	}
	return err
}
