package hpmapper

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
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
	Workloads string // the workloads file naming Image
	// Image is the workload whose image is started; Args replace its command and
	// Ready (a regular expression matched against each output line) its readiness.
	Image string
	Args  []string
	Ready string
	// Containers are started at once, at most Parallel launching together.
	Containers, Parallel int
	Timeout              time.Duration
	// Limits are the memory limits of the containers' cgroup to run under; 0 is none.
	Limits []int64
	Runs   int
	Seed   uint64
	// Block measures slacker-block (slackerd --container-root block) too, beside
	// slacker (its default mode, shared roots) and overlayfs.
	Block      bool
	Binaries   rig.Binaries
	DaemonArgs []string
	Progress   *rig.Progress
}

// Sample is one start of N containers.
type Sample struct {
	System string `json:"system"`
	Limit  int64  `json:"limit"`
	Run    int    `json:"run"`
	// Ready counts the containers that reached their ready line; Failed gives the
	// reasons of the others.
	Ready  int      `json:"ready"`
	Failed []string `json:"failed,omitempty"`
	// Seconds is from the first launch until the last container was ready;
	// ReadyMedian the median of the containers' own times.
	Seconds     float64 `json:"s"`
	ReadyMedian float64 `json:"ready_median_s"`
	PullSeconds float64 `json:"pull_s"`
	// Bytes the node read from and wrote to the disk while starting (blkio of the
	// node's cgroup tree); StoreBytes what slackerd fetched from its store.
	DiskReadBytes  int64 `json:"disk_read_bytes"`
	DiskWriteBytes int64 `json:"disk_write_bytes"`
	StoreBytes     int64 `json:"store_bytes"`
	// Memory of the whole tree once all were ready: page cache, anonymous memory,
	// the peak of the total; the daemon's resident set and, for slackerd, its chunk
	// cache in memory; the containers' OOM kills.
	PageCache   int64 `json:"page_cache_bytes"`
	Anon        int64 `json:"anon_bytes"`
	MaxUsage    int64 `json:"max_usage_bytes"`
	DaemonRSS   int64 `json:"daemon_rss_bytes"`
	DaemonCache int64 `json:"daemon_cache_bytes"`
	OOMKills    int64 `json:"oom_kills"`
	// The breakdown of the containers' reads: their cgroup's major page faults and
	// page cache (the page cache of their root filesystems: in block mode each
	// container's ext4 has its own; shared roots share their image's), and for
	// Slacker the bytes the containers' roots read through FUSE (first reads plus
	// re-reads of evicted pages; a shared image root's counted once).
	MajorFaults     int64 `json:"major_faults"`
	ContainersCache int64 `json:"containers_page_cache_bytes"`
	VolumeReadBytes int64 `json:"volume_read_bytes,omitempty"`
	// CPU time while starting: the daemon's (slackerd serves FUSE; containerd) and
	// the containers' cgroup's (their processes, with the page faults and filesystem
	// reads done in their context). Kernel workers (loop) are in neither.
	DaemonCPU     float64 `json:"daemon_cpu_s"`
	ContainersCPU float64 `json:"containers_cpu_s"`
	Error         string  `json:"error,omitempty"`
}

// Results is what a run measured (hpmapper.json).
type Results struct {
	Meta         *eval.Meta `json:"meta"`
	Image        string     `json:"image"`
	ImageBytes   int64      `json:"image_bytes"`
	Args         []string   `json:"args"`
	Ready        string     `json:"ready"`
	Containers   int        `json:"containers"`
	Parallel     int        `json:"parallel"`
	Limits       []int64    `json:"limits"`
	Runs         int        `json:"runs"`
	SlackerdArgs []string   `json:"slackerd_args,omitempty"`
	// RootModes are the Slacker systems' container root modes, by name (none in
	// results from before the modes were measured, whose "slacker" launched block
	// clones).
	RootModes map[string]string `json:"root_modes,omitempty"`
	Samples   []Sample          `json:"samples"`
}

// cgroupRoot is the top of the experiment's cgroups.
const cgroupRoot = eval.Cgroup("/slacker-eval-hp")

// Run runs the experiment.
func Run(ctx context.Context, o Options) (*Results, error) {
	if err := eval.NeedRoot("hpmapper"); err != nil {
		return nil, err
	}
	if o.Containers < 1 {
		return nil, fmt.Errorf("need at least one container")
	}
	if o.Parallel < 1 {
		o.Parallel = o.Containers
	}
	if o.Runs < 1 {
		o.Runs = 1
	}
	if len(o.Limits) == 0 {
		o.Limits = []int64{0}
	}
	set, err := workload.ParseFile(o.Workloads)
	if err != nil {
		return nil, err
	}
	w := set.Get(o.Image)
	if w == nil {
		return nil, fmt.Errorf("no workload %q in %s", o.Image, o.Workloads)
	}
	if len(o.Args) == 0 {
		o.Args = w.Cmd
	}
	if o.Ready == "" {
		lg, ok := w.Ready.(*workload.Log)
		if !ok {
			return nil, fmt.Errorf("workload %s has no log readiness rule: give --ready REGEX (a line each container prints once ready)", w.Name)
		}
		o.Ready = lg.Pattern.String()
	}
	re, err := regexp.Compile(o.Ready)
	if err != nil {
		return nil, fmt.Errorf("--ready: %w", err)
	}
	dev := eval.DeviceOf(o.Dir)
	if dev == "" {
		return nil, fmt.Errorf("cannot find the block device under %s (needed to count disk reads)", o.Dir)
	}
	c, err := corpus.Open(corpus.Options{Dir: o.CorpusDir})
	if err != nil {
		return nil, err
	}
	img, err := eval.CorpusImage(c, w.Name)
	if err != nil {
		return nil, err
	}
	tags, err := c.Layout.Tags()
	if err != nil {
		return nil, err
	}
	_, cfg, err := c.Layout.Manifest(tags[img.Tag])
	if err != nil {
		return nil, err
	}
	res := &Results{Meta: eval.NewMeta("hpmapper"), Image: w.Name, ImageBytes: img.DataBytes, Args: o.Args, Ready: o.Ready,
		Containers: o.Containers, Parallel: o.Parallel, Limits: o.Limits, Runs: o.Runs, SlackerdArgs: o.DaemonArgs}
	pair, err := eval.StartPair(ctx, eval.PairOptions{Dir: o.Dir, Binaries: o.Binaries, DaemonArgs: o.DaemonArgs,
		Modes: eval.SlackerModes(o.Block)})
	if err != nil {
		return nil, err
	}
	res.RootModes = pair.RootModes()
	defer func() {
		pair.Close()
		if err := cgroupRoot.Remove(); err != nil {
			o.Progress.Printf("remove cgroups: %v", err)
		}
	}()
	o.Progress.Printf("publishing %s (%s) to every system", img.Name, eval.HumanBytes(img.DataBytes))
	if err := pair.Publish(ctx, img); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(o.Seed, 64))
	for run := 1; run <= o.Runs; run++ {
		for _, limit := range o.Limits {
			for _, s := range pair.Shuffled(rng) {
				if ctx.Err() != nil {
					res.Meta.Done()
					return res, ctx.Err()
				}
				smp := start(ctx, o, s, pair.Ref(s, img.Name), cfg.Config, re, dev, limit)
				smp.Run = run
				o.Progress.Printf("run %d %-13s limit %-8s %d/%d ready in %.1fs (median %.1fs); disk read %s, store %s; page cache %s, anon %s, daemon rss %s, daemon cache %s, oom kills %d; containers: major faults %d, page cache %s, volume reads %s; cpu: daemon %.1fs, containers %.1fs %s",
					run, s.Name(), limitName(limit), smp.Ready, o.Containers, smp.Seconds, smp.ReadyMedian, eval.HumanBytes(smp.DiskReadBytes),
					eval.HumanBytes(smp.StoreBytes), eval.HumanBytes(smp.PageCache), eval.HumanBytes(smp.Anon), eval.HumanBytes(smp.DaemonRSS),
					eval.HumanBytes(smp.DaemonCache), smp.OOMKills, smp.MajorFaults, eval.HumanBytes(smp.ContainersCache), eval.HumanBytes(smp.VolumeReadBytes), smp.DaemonCPU, smp.ContainersCPU, smp.Error)
				if smp.Error != "" {
					res.Meta.Fail("%s limit %s run %d: %s", s.Name(), limitName(limit), run, smp.Error)
				}
				res.Samples = append(res.Samples, smp)
			}
		}
	}
	res.Meta.Done()
	return res, ctx.Err()
}

func limitName(n int64) string {
	if n <= 0 {
		return "none"
	}
	return eval.HumanBytes(n)
}

// start runs one sample: a cold node in fresh cgroups, the image pulled, caches
// dropped, then N containers at once.
func start(ctx context.Context, o Options, s rig.System, ref string, cfg v1.Config, re *regexp.Regexp, dev string, limit int64) Sample {
	smp := Sample{System: s.Name(), Limit: limit}
	fail := func(err error) Sample {
		smp.Error = err.Error()
		return smp
	}
	if err := s.Cold(ctx); err != nil {
		return fail(err)
	}
	cg := cgroupRoot.Child(s.Name())
	if err := cg.Remove(); err != nil {
		return fail(fmt.Errorf("stale cgroups: %w", err))
	}
	daemon, conts := cg.Child("daemon"), cg.Child("c")
	if err := cg.Create(dev); err != nil {
		return fail(err)
	}
	if err := daemon.Create(""); err != nil {
		return fail(err)
	}
	if err := conts.Create(""); err != nil {
		return fail(err)
	}
	if err := conts.SetMemoryLimit(limit); err != nil {
		return fail(err)
	}
	var pid int
	work := filepath.Join(o.Dir, "hp-"+s.Name())
	os.RemoveAll(work)
	defer os.RemoveAll(work)
	switch sys := s.(type) {
	case *rig.Containerd:
		pid = sys.PID()
	case *rig.Slacker:
		info, err := sys.Client().Info(ctx)
		if err != nil {
			return fail(err)
		}
		pid = info.PID
	}
	if err := daemon.Enter(pid); err != nil {
		return fail(err)
	}
	pull := time.Now()
	if _, err := s.Pull(ctx, ref); err != nil {
		return fail(err)
	}
	smp.PullSeconds = time.Since(pull).Seconds()
	l, err := launch.New(ctx, s, launch.Options{Dir: work, Ref: ref, Config: cfg, Args: o.Args, Cgroup: conts})
	if err != nil {
		return fail(err)
	}
	if err := rig.DropCaches(); err != nil {
		return fail(err)
	}
	read0, write0, err := cg.IO()
	if err != nil {
		return fail(err)
	}
	fetched0 := fetched(ctx, s)
	cpu0 := eval.ProcCPU(pid)

	ids := make([]string, o.Containers)
	for i := range ids {
		ids[i] = fmt.Sprintf("hp-%03d", i)
	}
	cs := make([]*launch.Container, len(ids))
	ready := make([]time.Duration, len(ids))
	errs := make([]error, len(ids))
	sem := make(chan struct{}, o.Parallel)
	tctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	var wg sync.WaitGroup
	begin := time.Now()
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-tctx.Done():
				errs[i] = fmt.Errorf("%s: not launched: %w", id, tctx.Err())
				return
			}
			defer func() { <-sem }()
			c, err := launch.Start(tctx, l, id)
			if err != nil {
				errs[i] = fmt.Errorf("%s: %w", id, err)
				return
			}
			cs[i] = c
			at, err := c.WaitLine(tctx, re)
			if err != nil {
				errs[i] = err
				return
			}
			ready[i] = at.Sub(c.Started)
		}()
	}
	wg.Wait()
	smp.Seconds = time.Since(begin).Seconds()
	var took []float64
	for i, c := range cs {
		if errs[i] == nil && c != nil {
			smp.Ready++
			took = append(took, ready[i].Seconds())
		} else if errs[i] != nil {
			smp.Failed = append(smp.Failed, errs[i].Error())
		}
	}
	slices.Sort(took)
	if len(took) > 0 {
		smp.ReadyMedian = took[len(took)/2]
	}
	// Measure with every container still running.
	if m, err := cg.MemoryStat(); err == nil {
		smp.PageCache, smp.Anon, smp.MaxUsage = m["total_cache"], m["total_rss"], m["max_usage_in_bytes"]
	} else {
		smp.Error = err.Error()
	}
	smp.OOMKills = conts.OOMKills()
	smp.DaemonCPU, smp.ContainersCPU = (eval.ProcCPU(pid) - cpu0).Seconds(), conts.CPUUsage().Seconds()
	if m, err := conts.MemoryStat(); err == nil {
		smp.MajorFaults, smp.ContainersCache = m["total_pgmajfault"], m["total_cache"]
	}
	var started []string
	for _, c := range cs {
		if c != nil {
			started = append(started, c.ID)
		}
	}
	smp.VolumeReadBytes = launch.ReadBytes(ctx, l, started)
	smp.DaemonRSS = eval.ProcRSS(pid)
	if r, w, err := cg.IO(); err == nil {
		smp.DiskReadBytes, smp.DiskWriteBytes = r-read0, w-write0
	}
	smp.StoreBytes = fetched(ctx, s) - fetched0
	if sys, ok := s.(*rig.Slacker); ok {
		if st, err := sys.Client().Stats(ctx); err == nil {
			smp.DaemonCache = st.Cache.MemBytes
		}
	}
	if smp.Ready < o.Containers && smp.Error == "" {
		smp.Error = fmt.Sprintf("%d of %d containers not ready; first: %s", o.Containers-smp.Ready, o.Containers, firstOf(smp.Failed))
	}
	// Stop and remove everything.
	for _, c := range cs {
		if c != nil {
			if _, err := c.Remove(context.WithoutCancel(ctx)); err != nil && smp.Error == "" {
				smp.Error = "clean-up: " + err.Error()
			}
		}
	}
	return smp
}

func firstOf(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// fetched is what the node fetched from its store (0 for containerd).
func fetched(ctx context.Context, s rig.System) int64 {
	if sys, ok := s.(*rig.Slacker); ok {
		if st, err := sys.Client().Stats(ctx); err == nil {
			return st.Fetch.FetchedBytes
		}
	}
	return 0
}
