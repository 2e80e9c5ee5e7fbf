package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/slacker-dev/slacker/bench/eval"
	"github.com/slacker-dev/slacker/bench/eval/analysis"
	"github.com/slacker-dev/slacker/bench/eval/hpmapper"
	"github.com/slacker-dev/slacker/bench/eval/longrun"
	"github.com/slacker-dev/slacker/bench/eval/micro"
	"github.com/slacker-dev/slacker/bench/eval/multimake"
	"github.com/slacker-dev/slacker/bench/eval/report"
	"github.com/slacker-dev/slacker/bench/eval/scale"
	"github.com/slacker-dev/slacker/bench/eval/storage"
	"github.com/slacker-dev/slacker/bench/rig"
	"github.com/slacker-dev/slacker/internal/units"
)

// common are the flags every item takes.
type common struct {
	out, work, corpus string
	runs              int
	seed              uint64
	daemonArgs        []string
	keep              bool
	images            string
	bins              func() (rig.Binaries, error)
}

// evalItems are the evaluation's items, in report order.
func evalItems() []report.Item {
	return []report.Item{
		{Name: "analysis", Load: loadItem[analysis.Results]},
		{Name: "micro", Load: loadItem[micro.Results]},
		{Name: "hpmapper", Load: loadItem[hpmapper.Results]},
		{Name: "scale", Load: loadItem[scale.Results]},
		{Name: "longrun", Load: loadItem[longrun.Results]},
		{Name: "multimake", Load: loadItem[multimake.Results]},
		{Name: "storage", Load: loadItem[storage.Results]},
	}
}

func loadItem[T any, P interface {
	*T
	eval.Sectioner
}](path string) (eval.Sectioner, error) {
	var v T
	if err := rig.ReadJSON(path, &v); err != nil {
		return nil, err
	}
	return P(&v), nil
}

// newEvalCommand returns `eval`. bins finds the slacker and slackerd binaries.
func newEvalCommand(bins func() (rig.Binaries, error)) *cobra.Command {
	c := &common{bins: bins}
	cmd := &cobra.Command{
		Use:   "eval",
		Short: "The papers' evaluation, reproduced: Slacker vs containerd + overlayfs, one command per result",
		Long: `Each subcommand reproduces results of the papers Slacker starts from (Slacker FAST'16,
HP-Mapper SoCC'19, "Docker characterization on high performance SSDs") and writes
OUT/ITEM.json, then re-renders OUT/index.html (figures as SVG) and OUT/summary.md from
every item found in OUT. Items that run containers start and stop their own registry,
slackerd and containerd under --work, and need root. See docs/EVALUATION.md.`,
		SilenceUsage: true,
	}
	f := cmd.PersistentFlags()
	f.StringVar(&c.out, "out", "docs/eval", "directory of the results (ITEM.json) and the report")
	f.StringVar(&c.work, "work", "/var/tmp/slacker-eval", "work directory (a subdirectory per item, emptied first)")
	f.StringVar(&c.corpus, "corpus", defaultCorpus(), "HelloBench corpus directory (env SLACKER_BENCH_CORPUS)")
	f.IntVar(&c.runs, "runs", 0, "repetitions (0: the item's default)")
	f.Uint64Var(&c.seed, "seed", 1, "seed of the shuffled orders")
	f.StringArrayVar(&c.daemonArgs, "slackerd-arg", nil, "extra slackerd flag, repeatable")
	f.BoolVar(&c.keep, "keep", false, "keep the item's work directory (default: removed at the end)")
	f.StringVar(&c.images, "images", eval.DefaultImages, "OCI layout where the evaluation keeps the images it makes")
	cmd.AddCommand(newEvalReport(c), newAnalysis(c), newMicro(c), newScale(c), newLongrun(c), newMultiMake(c), newHPMapper(c), newStorage(c))
	return cmd
}

func (c *common) runsOr(def int) int {
	if c.runs > 0 {
		return c.runs
	}
	return def
}

func (c *common) workDir(item string) string { return filepath.Join(c.work, item) }

// finish removes the item's work directory (unless --keep), writes its results and
// re-renders the report.
func (c *common) finish(cmd *cobra.Command, item string, res eval.Sectioner, runErr error) error {
	if !c.keep {
		if err := os.RemoveAll(c.workDir(item)); err != nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "remove %s: %v\n", c.workDir(item), err)
		}
	}
	if res == nil {
		return runErr
	}
	path := filepath.Join(c.out, item+".json")
	if err := rig.WriteJSON(path, res); err != nil {
		return err
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s\n", path)
	if err := c.render(cmd); err != nil {
		return err
	}
	return runErr
}

func (c *common) render(cmd *cobra.Command) error {
	secs, err := report.Load(c.out, evalItems())
	if err != nil {
		return err
	}
	if err := report.Write(c.out, secs); err != nil {
		return err
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "report: %s\n", filepath.Join(c.out, "index.html"))
	return nil
}

func (c *common) progress(cmd *cobra.Command) *rig.Progress {
	return rig.NewProgress(cmd.ErrOrStderr())
}

func newEvalReport(c *common) *cobra.Command {
	return &cobra.Command{
		Use:     "report",
		Short:   "Render OUT/index.html, the SVG figures and OUT/summary.md from the items' JSON in OUT",
		Example: "  slacker-bench eval report --out docs/eval",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			secs, err := report.Load(c.out, evalItems())
			if err != nil {
				return err
			}
			if len(secs) == 0 {
				return fmt.Errorf("no results in %s (run an item first, e.g. `slacker-bench eval storage`)", c.out)
			}
			if err := report.Write(c.out, secs); err != nil {
				return err
			}
			report.Markdown(cmd.OutOrStdout(), secs)
			return nil
		},
	}
}

func sizesFlag(s []string) ([]int64, error) {
	var out []int64
	for _, x := range s {
		n, err := units.ParseBytes(strings.TrimSpace(x))
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

func newStorage(c *common) *cobra.Command {
	var o storage.Options
	var fileSize, loopSize string
	var sweep []string
	cmd := &cobra.Command{
		Use:   "storage",
		Short: "fio 4 KiB random read/write (32 jobs x QD32) and a block-size sweep on ext4, xfs, btrfs, overlayfs and Slacker, cold and warm",
		Long: `Docker characterization on high performance SSDs, reproduced: fio (libaio, O_DIRECT)
random reads and writes of 4 KiB blocks, --jobs jobs at queue depth --depth, each on
its own file of --file-size, cold (page cache dropped; a fresh node for the container
systems) then warm, and a random-read sweep of block sizes, on: plain ext4 (a host
directory: the data-volume case), ext4, xfs, btrfs and btrfs nodatacow on loop
devices made under --work, containerd's overlayfs snapshot of the image holding the
files, and Slacker's container root in its default mode (slacker: an overlay over
the node's read-only mount of the image, ext4 on loop on FUSE), in block mode
(slacker-block: a block clone) and with a memory cache that holds every file
(slacker-cache). On the Slacker roots the random reads run again with the data on
the node (every file read whole first) and with the chunks in the local store but
not in slackerd's cache (the cache purged). Needs root, fio, xfsprogs and
btrfs-progs.`,
		Example: `  slacker-bench eval storage                       # defaults: 32 x 16 MiB files, 10 s per test
  slacker-bench eval storage --runtime 3 --sweep-runtime 2 --targets ext4,overlayfs,slacker,slacker-block`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if o.FileSize, err = units.ParseBytes(fileSize); err != nil {
				return err
			}
			if o.LoopSize, err = units.ParseBytes(loopSize); err != nil {
				return err
			}
			if o.SweepBS, err = sizesFlag(sweep); err != nil {
				return err
			}
			if o.Binaries, err = needBins(c, o.Targets, "overlayfs", "slacker", "slacker-block", "slacker-cache"); err != nil {
				return err
			}
			o.Dir, o.ImagesDir, o.Runs, o.Seed, o.DaemonArgs = c.workDir("storage"), c.images, c.runsOr(1), c.seed, c.daemonArgs
			o.Progress = c.progress(cmd)
			res, err := storage.Run(cmd.Context(), o)
			return c.finish(cmd, "storage", nilIfEmpty(res), err)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Jobs, "jobs", 32, "fio jobs (each on its own file)")
	f.IntVar(&o.Depth, "depth", 32, "queue depth per job")
	f.StringVar(&fileSize, "file-size", "16MiB", "size of each job's file")
	f.IntVar(&o.Runtime, "runtime", 10, "seconds per 4 KiB test")
	f.IntVar(&o.SweepRuntime, "sweep-runtime", 5, "seconds per point of the block-size sweep")
	f.StringSliceVar(&sweep, "sweep", []string{"4KiB", "16KiB", "64KiB", "256KiB", "1MiB"}, "block sizes of the random-read sweep (empty: none)")
	f.StringVar(&loopSize, "loop-size", "2GiB", "size of each loop file (sparse)")
	f.StringSliceVar(&o.Targets, "targets", nil, "stacks to measure (default all: "+strings.Join(storage.AllTargets, ",")+")")
	return cmd
}

// blockFlag adds --block, on by default: slacker-block measured beside slacker
// and overlayfs.
func blockFlag(cmd *cobra.Command, block *bool) {
	cmd.Flags().BoolVar(block, "block", true, "also measure slacker-block: slackerd with --container-root block (block clones) beside slacker (shared roots, the default) and overlayfs")
}

// needBins returns the binaries when targets (empty: all) include one of the
// systems that need them.
func needBins(c *common, targets []string, systems ...string) (rig.Binaries, error) {
	need := len(targets) == 0
	for _, t := range targets {
		for _, s := range systems {
			need = need || t == s
		}
	}
	if !need {
		return rig.Binaries{}, nil
	}
	return c.bins()
}

// nilIfEmpty turns a typed nil result into an untyped nil interface.
func nilIfEmpty[T any](r *T) eval.Sectioner {
	if r == nil {
		return nil
	}
	if s, ok := any(r).(eval.Sectioner); ok {
		return s
	}
	return nil
}

func newMicro(c *common) *cobra.Command {
	var o micro.Options
	var sizes []string
	cmd := &cobra.Command{
		Use:   "micro",
		Short: "open() latency by layer depth, 1-byte append latency by file size, second-run time: Slacker vs overlayfs (Fig 11, 22, HP-Mapper's COW table)",
		Long: `Slacker Fig 11a: an image of --layers layers of --files empty files each (one
directory); on a cold node, with the page cache dropped before every open, opens
--opens files per layer in random order. Fig 11b and HP-Mapper's copy-on-write table:
an image whose bottom layer holds one random file per --sizes; a 1-byte append to each
(after a stat), with and without fsync. Fig 22: every workload of --workloads (or
--only) started twice on one node, from cold; the second container's time until
ready. Systems: overlayfs, slacker (shared roots, the default mode) and, unless
--block=false, slacker-block (slackerd --container-root block). Needs root.`,
		Example: `  slacker-bench eval micro
  slacker-bench eval micro --sizes 4KiB,64KiB,1MiB,16MiB,64MiB,256MiB,1GiB --runs 5`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if o.Sizes, err = sizesFlag(sizes); err != nil {
				return err
			}
			if o.Binaries, err = c.bins(); err != nil {
				return err
			}
			o.Dir, o.ImagesDir, o.Runs, o.Seed, o.DaemonArgs = c.workDir("micro"), c.images, c.runsOr(3), c.seed, c.daemonArgs
			o.CorpusDir = c.corpus
			o.Progress = c.progress(cmd)
			res, err := micro.Run(cmd.Context(), o)
			return c.finish(cmd, "micro", nilIfEmpty(res), err)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Layers, "layers", 16, "layers of the depth image")
	f.IntVar(&o.FilesPerLayer, "files", 1000, "empty files per layer")
	f.IntVar(&o.OpensPerLayer, "opens", 10, "files opened per layer and run")
	f.StringSliceVar(&sizes, "sizes", []string{"4KiB", "64KiB", "1MiB", "16MiB", "64MiB", "256MiB"}, "sizes of the files appended to")
	f.StringSliceVar(&o.Skip, "skip", nil, "parts to skip: open, append, rerun")
	f.StringVar(&o.Workloads, "workloads", DefaultWorkloads, "HelloBench workloads file (second-run part)")
	f.StringSliceVar(&o.Only, "only", nil, "workloads of the second-run part (default all)")
	f.IntVar(&o.RerunRuns, "rerun-runs", 1, "repetitions of the second-run part (0: --runs)")
	blockFlag(cmd, &o.Block)
	return cmd
}

// DefaultWorkloads is the repository's HelloBench workloads file (the shared
// definitions, with the corrections workloads/hellobench.toml explains), relative
// to the checkout the command runs from.
const DefaultWorkloads = "workloads/hellobench.toml"

func newAnalysis(c *common) *cobra.Command {
	var o analysis.Options
	cmd := &cobra.Command{
		Use:   "analysis",
		Short: "Workload analysis of the HelloBench corpus: sizes vs bytes read, dedup, layer depth, repeat reads (Slacker §4)",
		Long: `Reads every layer of the workloads' images in the corpus: compressed and uncompressed
sizes, files and directories per layer depth, gzip against file-level and 4 KiB-block
deduplication per image and across all images. Then (unless --static) runs each
workload under Slacker on a cold node until ready, twice on the same node, and reads
from each container's volume which 4 KiB blocks of the image it read: bytes read at
start-up, and the second run's reads that the first run's cache would serve.
--static needs neither root nor daemons.`,
		Example: `  slacker-bench eval analysis --static --workloads shared/hellobench/workloads.toml
  slacker-bench eval analysis --workloads shared/hellobench/workloads.toml --runs 2`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if !o.Static {
				if o.Binaries, err = c.bins(); err != nil {
					return err
				}
			}
			o.Dir, o.CorpusDir, o.Runs, o.Seed, o.DaemonArgs = c.workDir("analysis"), c.corpus, c.runsOr(1), c.seed, c.daemonArgs
			o.Progress = c.progress(cmd)
			res, err := analysis.Run(cmd.Context(), o)
			return c.finish(cmd, "analysis", nilIfEmpty(res), err)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Workloads, "workloads", DefaultWorkloads, "HelloBench workloads file")
	f.StringSliceVar(&o.Only, "only", nil, "analyse only these workloads")
	f.BoolVar(&o.Static, "static", false, "corpus only: no start-up runs (no root)")
	return cmd
}

func newScale(c *common) *cobra.Command {
	var o scale.Options
	var sizes []string
	var maxBytes string
	cmd := &cobra.Command{
		Use:   "scale",
		Short: "1 to 32 concurrent pushes and pulls of synthetic images, Slacker vs overlayfs (Fig 10, 23)",
		Long: `For each image size and each N of --counts: N synthetic images (one random file each)
pushed at once to an empty registry, then pulled at once on a cold node; the time
until all complete, for containerd + overlayfs and Slacker. Slacker's images are
converted once beforehand (timed apart). Needs root; disk: the images (count x size,
kept in --images) plus about three copies of the largest trial under --work.`,
		Example: `  slacker-bench eval scale
  slacker-bench eval scale --sizes 1MiB,10MiB,100MiB,1GiB --counts 1,2,4,8 --runs 3
  slacker-bench eval scale --sizes 1MiB,10MiB,100MiB,1GiB --max-bytes 4GiB   # 1 GiB images only 1, 2, 4 at once`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if o.Sizes, err = sizesFlag(sizes); err != nil {
				return err
			}
			if maxBytes != "" {
				if o.MaxBytes, err = units.ParseBytes(maxBytes); err != nil {
					return err
				}
			}
			if o.Binaries, err = c.bins(); err != nil {
				return err
			}
			o.Dir, o.ImagesDir, o.Runs, o.Seed, o.DaemonArgs = c.workDir("scale"), c.images, c.runsOr(1), c.seed, c.daemonArgs
			o.Progress = c.progress(cmd)
			res, err := scale.Run(cmd.Context(), o)
			return c.finish(cmd, "scale", nilIfEmpty(res), err)
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&sizes, "sizes", []string{"1MiB", "10MiB", "100MiB"}, "image sizes")
	f.IntSliceVar(&o.Counts, "counts", []int{1, 2, 4, 8, 16, 32}, "numbers of images at once")
	f.StringVar(&maxBytes, "max-bytes", "", "skip trials moving more than this at once (count x size), e.g. 4GiB (empty: none)")
	return cmd
}

func newHPMapper(c *common) *cobra.Command {
	var o hpmapper.Options
	var limits []string
	cmd := &cobra.Command{
		Use:   "hpmapper",
		Short: "64 containers from one image at once, cold: time, disk and store reads, page cache and daemon cache, Slacker vs overlayfs, with and without a memory limit",
		Long: `HP-Mapper's experiment: start --containers containers of one HelloBench image at once
on a cold node and wait until each prints its ready line; measure the time, the bytes
the node read from the disk (blkio) and from Slacker's store, and its memory (page
cache of the whole node's cgroups, slackerd's chunk cache, anonymous memory). Each
--limits value runs it again with the containers' cgroup limited to that much memory
(0: none). Systems: overlayfs, slacker (shared roots, the default mode) and, unless
--block=false, slacker-block (slackerd --container-root block). The daemons and containers run in cgroups under /slacker-eval-hp, removed
at the end. Needs root and the cgroup v1 memory and blkio controllers.`,
		Example: `  slacker-bench eval hpmapper --corpus /var/tmp/slacker-bench/corpus
  slacker-bench eval hpmapper --image tomcat --containers 16 --limits 0,2GiB`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if o.Limits, err = sizesFlag(limits); err != nil {
				return err
			}
			if o.Binaries, err = c.bins(); err != nil {
				return err
			}
			o.Dir, o.CorpusDir, o.Runs, o.Seed, o.DaemonArgs = c.workDir("hpmapper"), c.corpus, c.runsOr(1), c.seed, c.daemonArgs
			o.Progress = c.progress(cmd)
			res, err := hpmapper.Run(cmd.Context(), o)
			return c.finish(cmd, "hpmapper", nilIfEmpty(res), err)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Workloads, "workloads", DefaultWorkloads, "HelloBench workloads file")
	f.StringVar(&o.Image, "image", "prometheus", "workload whose image is started")
	f.StringSliceVar(&o.Args, "cmd", nil, "command instead of the workload's (comma-separated argv)")
	f.StringVar(&o.Ready, "ready", "Server is ready to receive web requests", "regular expression of the line a container prints once ready (empty: the workload's log rule)")
	f.IntVar(&o.Containers, "containers", 64, "containers started at once")
	f.IntVar(&o.Parallel, "parallel", 0, "at most this many launching together (0: all)")
	f.DurationVar(&o.Timeout, "timeout", 10*time.Minute, "give up on containers not ready by then")
	f.StringSliceVar(&limits, "limits", []string{"0", "1GiB"}, "memory limits of the containers' cgroup (0: none)")
	blockFlag(cmd, &o.Block)
	return cmd
}

func newMultiMake(c *common) *cobra.Command {
	var o multimake.Options
	cmd := &cobra.Command{
		Use:   "multimake",
		Short: "MultiMake: one C program built by every gcc and clang of Debian bookworm, each its own image; pull, compile, test, delete, Slacker vs overlayfs (§7, Fig 24)",
		Long: `Builds one image per compiler (gcc-11, gcc-12, clang-13..16, clang-19 on minbase +
libc6-dev, cached in the corpus), publishes them, then from a cold node, for each
compiler in turn: pulls its image, compiles the program in a container (the binary
comes back on standard output), runs the binary --tests times on the host, and
deletes the image. Reports each phase's time and the binaries' run times. Needs root.`,
		Example: `  slacker-bench eval multimake --corpus /var/tmp/slacker-bench/corpus
  slacker-bench eval multimake --only mm-gcc-12,mm-clang-14 --iterations 2000000`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if o.Binaries, err = c.bins(); err != nil {
				return err
			}
			o.Dir, o.CorpusDir, o.Runs, o.Seed, o.DaemonArgs = c.workDir("multimake"), c.corpus, c.runsOr(1), c.seed, c.daemonArgs
			o.Progress = c.progress(cmd)
			res, err := multimake.Run(cmd.Context(), o)
			return c.finish(cmd, "multimake", nilIfEmpty(res), err)
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&o.Only, "only", nil, "compilers to use (default all: mm-gcc-11, mm-gcc-12, mm-clang-13, ...)")
	f.IntVar(&o.Iterations, "iterations", 20000000, "rounds of the program's vector loop (the paper's 20M)")
	f.IntVar(&o.Tests, "tests", 3, "runs of each binary on the host")
	return cmd
}

func newLongrun(c *common) *cobra.Command {
	var o longrun.Options
	cmd := &cobra.Command{
		Use:   "longrun",
		Short: "pgbench on postgres, redis-benchmark on redis, wrk on nginx and on a node server: throughput with start-up, and time to the first request (Fig 21)",
		Long: `For each server (postgres, redis, nginx, express) and each system, from a cold node:
pull, start the container, wait for the first request served, then load it with its
benchmark client (pgbench, redis-benchmark, wrk, run on the host in the container's
network namespace) until --duration after the pull began. Reports throughput over
the whole window (start-up included) and while loaded, and the start-up delay.
Systems: overlayfs, slacker (shared roots, the default mode) and, unless
--block=false, slacker-block (slackerd --container-root block). Needs root,
postgresql-client, redis-tools, wrk and curl.`,
		Example: `  slacker-bench eval longrun --duration 5m
  slacker-bench eval longrun --duration 30s --only redis,nginx`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if o.Binaries, err = c.bins(); err != nil {
				return err
			}
			o.Dir, o.CorpusDir, o.Runs, o.Seed, o.DaemonArgs = c.workDir("longrun"), c.corpus, c.runsOr(1), c.seed, c.daemonArgs
			o.Progress = c.progress(cmd)
			res, err := longrun.Run(cmd.Context(), o)
			return c.finish(cmd, "longrun", nilIfEmpty(res), err)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Workloads, "workloads", DefaultWorkloads, "HelloBench workloads file")
	f.StringSliceVar(&o.Only, "only", nil, "servers to run (default all: postgres, redis, nginx, express)")
	f.DurationVar(&o.Duration, "duration", 5*time.Minute, "window of each experiment, from the start of the pull")
	f.DurationVar(&o.StartTimeout, "start-timeout", 2*time.Minute, "give up on a server that serves no request by then")
	blockFlag(cmd, &o.Block)
	return cmd
}
