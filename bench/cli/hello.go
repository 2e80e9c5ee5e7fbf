package cli

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/slacker-dev/slacker/bench/corpus"
	"github.com/slacker-dev/slacker/bench/hellobench/harness"
	"github.com/slacker-dev/slacker/bench/hellobench/report"
	"github.com/slacker-dev/slacker/bench/rig"
)

// DefaultHelloDir is the harness's default work directory.
const DefaultHelloDir = "/var/lib/slacker-bench/hello"

func newHelloCommand() *cobra.Command {
	var (
		o                                  harness.Options
		systems, only, cycles              string
		out                                string
		slackerBin, slackerdBin, stargzBin string
		markdown                           bool
	)
	cmd := &cobra.Command{
		Use:   "hello --workloads FILE [--systems overlayfs,slacker] [--profile loopback|1gbit] [--runs N] [--quick]",
		Short: "HelloBench: time push, pull and run of every workload on each system, from a cold node",
		Long: `For each workload of FILE and each system, measures from a cold node every time
(fresh node state, page cache dropped), in shuffled order, N repetitions:

  deployment   pull + run until ready (the workload's rule: exit status, log line,
               TCP port or HTTP answer, probed inside the container's network)
  development  push of a change to the top layer (one new file) + pull + run

Systems: slacker (its default container roots, shared); slacker-block (slackerd
--container-root block: block clones); slacker-containerd (Slacker images through
containerd and slackerd's snapshotter); stargz (eStargz images through containerd
and stargz-snapshotter, run by bin/slacker-stargz; with --optimize, each image is
converted again from a recorded run of its workload); overlayfs (containerd 1.6 +
runc, ordinary gzip layers); native; NAME=SOCKET for a containerd snapshotter
already running.
Profiles: loopback (registry on 127.0.0.1), or an emulated link between the node and
the registry (1gbit = 1 Gbit/s, --rtt 1ms; any Nmbit/Ngbit; 1gbit-20ms and 100mbit-20ms
name their round trip: the WAN profiles).

Builds missing images first (the corpus is cached), starts and stops its own
registry, containerd and slackerd, and writes OUT/results.json (after every sample)
and OUT/index.html with SVG figures. Needs root.`,
		Example: `  slacker-bench hello --workloads shared/hellobench/workloads.toml --quick
  slacker-bench hello --workloads shared/hellobench/workloads.toml --systems overlayfs,slacker --profile 1gbit --runs 3
  slacker-bench hello --workloads w.toml --profile 1gbit --optimize --systems overlayfs,slacker-containerd,stargz
  slacker-bench hello --workloads w.toml --quick --systems overlayfs,slacker,slacker-block`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.WorkloadsFile == "" {
				return errors.New("--workloads FILE is required")
			}
			o.Systems = splitList(systems)
			o.Only = splitList(only)
			o.Cycles = splitList(cycles)
			if o.Quick && !cmd.Flags().Changed("runs") {
				o.Runs = 2
			}
			bins, err := rig.FindBinaries(slackerBin, slackerdBin)
			if err != nil {
				return fmt.Errorf("%w, or give --slacker and --slackerd", err)
			}
			o.Slacker, o.Slackerd = bins.Slacker, bins.Slackerd
			o.Stargz = rig.FindStargzBinary(stargzBin, o.Slacker)
			if out == "" {
				out = fmt.Sprintf("hellobench-%s-%s", strings.ToLower(o.Profile), time.Now().Format("20060102-150405"))
			}
			o.Results = filepath.Join(out, "results.json")
			o.Progress = cmd.ErrOrStderr()
			o.Command = rig.Command()
			ctx := cmd.Context()
			res, runErr := harness.Run(ctx, o)
			if res != nil && len(res.Samples) > 0 {
				if err := report.Write(out, []*harness.Results{res}); err != nil {
					return errors.Join(runErr, err)
				}
				if markdown {
					report.WriteMarkdown(cmd.OutOrStdout(), []*harness.Results{res})
				} else {
					report.WriteTable(cmd.OutOrStdout(), res)
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "results: %s; report: %s\n", o.Results, filepath.Join(out, "index.html"))
			}
			return runErr
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.WorkloadsFile, "workloads", "w", "", "workloads TOML file")
	f.StringVar(&systems, "systems", "overlayfs,slacker", "systems to compare: slacker, slacker-block, slacker-containerd, stargz, overlayfs, native, NAME=SOCKET")
	f.StringVar(&o.Profile, "profile", "loopback", "network between node and registry: loopback, 1gbit, 100mbit, ..., with a round trip: 1gbit-20ms, 100mbit-20ms (the WAN profiles)")
	f.DurationVar(&o.RTT, "rtt", time.Millisecond, "round-trip time of an emulated link whose profile names none")
	f.IntVar(&o.Runs, "runs", 3, "repetitions of every workload, system and cycle (--quick: 2)")
	f.StringVar(&o.StoreServer, "store-server", "s3", "behind a link, where Slacker's chunks live unless --store is given: s3 (MinIO beside the registry) or registry")
	f.StringVar(&o.StoreCompress, "store-compress", "", "behind a link, how that store keeps chunks: zstd (the backend's default) or none")
	f.BoolVar(&o.Optimize, "optimize", false, "after the warm-up, lay every Slacker image out for start-up from its trace and publish it again (slacker optimize); convert every eStargz image again from a recorded run (stargz's optimize)")
	f.BoolVar(&o.PublishUnshaped, "publish-unshaped", false, "behind a link, publish every image (and lay it out, with --optimize) with the link's rate and delay off: set-up that is not measured, which at 100 Mbit/s takes most of a run; those pushes are marked unshaped and left out of the push figures")
	f.BoolVar(&o.Warmup, "warmup", true, "deploy every workload once with Slacker before the samples, untimed (records its start-up traces, as an earlier run anywhere would)")
	f.BoolVar(&o.Quick, "quick", false, "the quick profile: "+strings.Join(harness.QuickWorkloads, ", "))
	f.StringVar(&only, "only", "", "comma-separated workloads to run (default all)")
	f.StringVar(&cycles, "cycles", "deployment,development", "cycles to measure")
	f.StringVar(&out, "out", "", "directory for results.json and the report (default ./hellobench-PROFILE-DATE)")
	f.StringVar(&o.Dir, "dir", DefaultHelloDir, "work directory: node state, containerd, registry (emptied first, removed at the end)")
	f.BoolVar(&o.KeepDir, "keep-dir", false, "keep the work directory after the run, to look into it")
	f.StringVar(&o.CorpusDir, "corpus", defaultCorpus(), "corpus directory (env "+corpus.DirEnv+")")
	f.StringVar(&o.Store, "store", "", "Slacker's chunk store location (default: a directory on the node on loopback; behind a link, see --store-server)")
	f.StringArrayVar(&o.SlackerdArgs, "slackerd-arg", nil, "extra slackerd flag, repeatable")
	f.StringVar(&slackerBin, "slacker", "", "slacker binary (default: this program if it is slacker, else next to it or on PATH)")
	f.StringVar(&slackerdBin, "slackerd", "", "slackerd binary (default: next to slacker, or on PATH)")
	f.StringVar(&stargzBin, "stargz", "", "slacker-stargz binary, for the system stargz (default: next to slacker, or on PATH)")
	f.Uint64Var(&o.Seed, "seed", 0, "seed of the shuffled order (default: from the clock; recorded in results)")
	f.BoolVar(&markdown, "markdown", false, "print the summary as Markdown")
	return cmd
}

func newReportCommand() *cobra.Command {
	var out string
	var markdown bool
	cmd := &cobra.Command{
		Use:     "report --out DIR RESULTS.json...",
		Short:   "Render HelloBench results (one file per profile) as an HTML page with SVG figures",
		Example: `  slacker-bench report --out docs/hellobench docs/hellobench/results-loopback.json docs/hellobench/results-1gbit.json`,
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var rs []*harness.Results
			for _, a := range args {
				r, err := harness.ReadResults(a)
				if err != nil {
					return err
				}
				rs = append(rs, r)
			}
			if out != "" {
				if err := report.Write(out, rs); err != nil {
					return err
				}
			}
			if markdown {
				report.WriteMarkdown(cmd.OutOrStdout(), rs)
			} else {
				for _, r := range rs {
					report.WriteTable(cmd.OutOrStdout(), r)
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "directory to write index.html and the figures into")
	cmd.Flags().BoolVar(&markdown, "markdown", false, "print the summary as Markdown")
	return cmd
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
