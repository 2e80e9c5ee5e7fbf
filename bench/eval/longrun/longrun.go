package longrun

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/slacker-dev/slacker/bench/corpus"
	"github.com/slacker-dev/slacker/bench/eval"
	"github.com/slacker-dev/slacker/bench/eval/launch"
	"github.com/slacker-dev/slacker/bench/rig"
	"github.com/slacker-dev/slacker/bench/workload"
)

// Options configure a run.
type Options struct {
	Dir       string // work directory; emptied first
	CorpusDir string
	Workloads string // the workloads file of the servers' images
	Only      []string
	// Duration is each experiment's window from the start of the pull.
	Duration time.Duration
	// StartTimeout bounds the wait for the first request served.
	StartTimeout time.Duration
	Runs         int
	Seed         uint64
	// Block measures slacker-block (slackerd --container-root block) too, beside
	// slacker (its default mode, shared roots) and overlayfs.
	Block      bool
	Binaries   rig.Binaries
	DaemonArgs []string
	Progress   *rig.Progress
}

// Sample is one experiment.
type Sample struct {
	System   string `json:"system"`
	Workload string `json:"workload"`
	Run      int    `json:"run"`
	// Seconds from the start of the pull: the pull's end, the first request served,
	// the end of the window.
	Pull         float64 `json:"pull_s"`
	FirstRequest float64 `json:"first_request_s"`
	Window       float64 `json:"window_s"`
	// Ops completed by the benchmark; LoadSeconds how long it loaded the server.
	Ops         int64   `json:"ops"`
	LoadSeconds float64 `json:"load_s"`
	Error       string  `json:"error,omitempty"`
}

// Throughput is operations per second over the whole window, start-up included.
func (s Sample) Throughput() float64 { return float64(s.Ops) / s.Window }

// Loaded is operations per second while the benchmark ran.
func (s Sample) Loaded() float64 { return float64(s.Ops) / s.LoadSeconds }

// Results is what a run measured (longrun.json).
type Results struct {
	Meta         *eval.Meta        `json:"meta"`
	Duration     float64           `json:"duration_s"`
	Runs         int               `json:"runs"`
	Ops          map[string]string `json:"ops"` // workload -> what an op is
	SlackerdArgs []string          `json:"slackerd_args,omitempty"`
	// RootModes are the Slacker systems' container root modes, by name (none in
	// results from before the modes were measured, whose "slacker" launched block
	// clones).
	RootModes map[string]string `json:"root_modes,omitempty"`
	Samples   []Sample          `json:"samples"`
}

// Run runs the experiments.
func Run(ctx context.Context, o Options) (*Results, error) {
	if err := eval.NeedRoot("longrun"); err != nil {
		return nil, err
	}
	if o.Runs < 1 {
		o.Runs = 1
	}
	var benches []Bench
	for _, b := range Benches {
		if len(o.Only) == 0 || slices.Contains(o.Only, b.Workload) {
			benches = append(benches, b)
		}
	}
	if len(benches) == 0 {
		return nil, fmt.Errorf("no workload selected (have postgres, redis, nginx, express)")
	}
	tools := map[string]string{"nsenter": "util-linux", "curl": "curl", "psql": "postgresql-client", "redis-cli": "redis-tools"}
	for _, b := range benches {
		tools[b.Tool] = b.Package
	}
	if err := eval.NeedTools(tools); err != nil {
		return nil, err
	}
	set, err := workload.ParseFile(o.Workloads)
	if err != nil {
		return nil, err
	}
	c, err := corpus.Open(corpus.Options{Dir: o.CorpusDir})
	if err != nil {
		return nil, err
	}
	res := &Results{Meta: eval.NewMeta("longrun"), Duration: o.Duration.Seconds(), Runs: o.Runs, Ops: map[string]string{}, SlackerdArgs: o.DaemonArgs}
	pair, err := eval.StartPair(ctx, eval.PairOptions{Dir: o.Dir, Binaries: o.Binaries, DaemonArgs: o.DaemonArgs,
		Modes: eval.SlackerModes(o.Block)})
	if err != nil {
		return nil, err
	}
	defer pair.Close()
	res.RootModes = pair.RootModes()
	type server struct {
		b   Bench
		w   *workload.Workload
		img rig.Image
		cfg configOf
	}
	var servers []server
	for _, b := range benches {
		w := set.Get(b.Workload)
		if w == nil {
			return nil, fmt.Errorf("no workload %q in %s", b.Workload, o.Workloads)
		}
		img, err := eval.CorpusImage(c, w.Name)
		if err != nil {
			return nil, err
		}
		cfg, err := imageConfig(c, img.Tag)
		if err != nil {
			return nil, err
		}
		o.Progress.Printf("publishing %s (%s)", w.Name, eval.HumanBytes(img.DataBytes))
		if err := pair.Publish(ctx, img); err != nil {
			return nil, err
		}
		servers = append(servers, server{b, w, img, cfg})
		res.Ops[b.Workload] = b.Op
	}
	rng := rand.New(rand.NewPCG(o.Seed, 21))
	for run := 1; run <= o.Runs; run++ {
		for _, sv := range servers {
			for _, s := range pair.Shuffled(rng) {
				if ctx.Err() != nil {
					res.Meta.Done()
					return res, ctx.Err()
				}
				smp := experiment(ctx, o, s, pair.Ref(s, sv.img.Name), sv.w, sv.cfg, sv.b)
				smp.Run = run
				if smp.Error != "" {
					res.Meta.Fail("%s %s run %d: %s", s.Name(), sv.w.Name, run, smp.Error)
				}
				o.Progress.Printf("run %d %-13s %-8s pull %.2fs, first request %.2fs, %d %s in %.0fs: %.0f/s over the window, %.0f/s loaded %s",
					run, s.Name(), sv.w.Name, smp.Pull, smp.FirstRequest, smp.Ops, sv.b.Op, smp.Window, smp.Throughput(), smp.Loaded(), smp.Error)
				res.Samples = append(res.Samples, smp)
			}
		}
	}
	res.Meta.Done()
	return res, ctx.Err()
}

// experiment runs one server from a cold node for the window.
func experiment(ctx context.Context, o Options, s rig.System, ref string, w *workload.Workload, cfg configOf, b Bench) Sample {
	smp := Sample{System: s.Name(), Workload: w.Name}
	fail := func(err error) Sample { smp.Error = err.Error(); return smp }
	if err := s.Cold(ctx); err != nil {
		return fail(err)
	}
	t0 := time.Now()
	end := t0.Add(o.Duration)
	if _, err := s.Pull(ctx, ref); err != nil {
		return fail(err)
	}
	smp.Pull = time.Since(t0).Seconds()
	l, err := launch.New(ctx, s, launch.Options{Dir: filepath.Join(o.Dir, "lr"), Ref: ref, Config: cfg, Args: w.Cmd})
	if err != nil {
		return fail(err)
	}
	c, err := launch.Start(ctx, l, "lr-"+w.Name)
	if err != nil {
		return fail(err)
	}
	defer c.Remove(context.WithoutCancel(ctx))
	sctx, cancel := context.WithTimeout(ctx, o.StartTimeout)
	defer cancel()
	ns, err := c.Netns(sctx)
	if err != nil {
		return fail(err)
	}
	for !b.Probe(sctx, ns) {
		select {
		case <-c.Done():
			return fail(fmt.Errorf("the server exited (status %d) before serving: %s", c.ExitCode(), c.Tail()))
		case <-sctx.Done():
			return fail(fmt.Errorf("no request served within %s: %s", o.StartTimeout, c.Tail()))
		case <-time.After(20 * time.Millisecond):
		}
	}
	smp.FirstRequest = time.Since(t0).Seconds()
	if b.Prepare != nil {
		if err := b.Prepare(ctx, ns); err != nil {
			return fail(err)
		}
	}
	left := time.Until(end)
	if left < time.Second {
		return fail(fmt.Errorf("start-up took the whole window (%s): make --duration longer", o.Duration))
	}
	ls := time.Now()
	smp.Ops, err = b.Load(ctx, ns, left)
	smp.LoadSeconds = time.Since(ls).Seconds()
	smp.Window = time.Since(t0).Seconds()
	if err != nil {
		return fail(err)
	}
	return smp
}

// configOf is an image's OCI config (its runtime part).
type configOf = v1.Config

// imageConfig reads the config of the image tagged tag in the corpus.
func imageConfig(c *corpus.Corpus, tag string) (configOf, error) {
	tags, err := c.Layout.Tags()
	if err != nil {
		return configOf{}, err
	}
	_, cfg, err := c.Layout.Manifest(tags[tag])
	if err != nil {
		return configOf{}, err
	}
	return cfg.Config, nil
}
