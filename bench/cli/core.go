package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/slacker-dev/slacker/bench/core"
	"github.com/slacker-dev/slacker/bench/rig"
)

func newCoreCommand() *cobra.Command {
	var o core.Options
	var markdown bool
	cmd := &cobra.Command{
		Use:   "core",
		Short: "Pull, run, copy-on-write and read: Slacker vs containerd + overlayfs, side by side",
		Long: `Builds Debian images (debootstrap and apt, cached), publishes each to a local
registry started for the run, and measures from a cold node each time, in shuffled
order: pull, pull + run of echo hello, bytes moved, and with --micro a 1-byte append to
a 16 MiB file and a sequential read of every file, cold and warm. Starts and stops its
own slackerd, containerd and registry; needs root.`,
		Example: `  slacker-bench core                          # the quick run: minbase, 3 runs
  slacker-bench core --images minbase,big --micro --runs 5 --results out.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			bins, err := rig.FindBinaries("", "")
			if err != nil {
				return err
			}
			o.Slacker, o.Slackerd = bins.Slacker, bins.Slackerd
			o.Progress = cmd.ErrOrStderr()
			rep, err := core.Run(cmd.Context(), o)
			if rep != nil {
				fmt.Fprintln(cmd.OutOrStdout())
				if markdown {
					rep.WriteMarkdown(cmd.OutOrStdout())
				} else {
					rep.WriteTable(cmd.OutOrStdout())
				}
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Dir, "dir", "/var/lib/slacker-bench/core", "work directory (emptied at start)")
	f.StringVar(&o.CorpusDir, "corpus", "/var/lib/slacker-bench/corpus", "where images are built and cached")
	f.StringSliceVar(&o.Images, "images", []string{"minbase"}, "images: minbase, big (minbase + openjdk + gcc, about 600 MB)")
	f.IntVar(&o.Runs, "runs", 3, "cold repetitions per measurement")
	f.BoolVar(&o.Micro, "micro", false, "also measure the 16 MiB append and sequential reads")
	f.StringVar(&o.Results, "results", "", "write every sample to this JSON file")
	f.BoolVar(&markdown, "markdown", false, "print the summary as Markdown")
	f.StringArrayVar(&o.DaemonArgs, "slackerd-arg", nil, "extra slackerd flag, repeatable (e.g. --slackerd-arg=--chunk-size=1MiB)")
	return cmd
}
