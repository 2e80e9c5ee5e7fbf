package cli

import (
	"context"
	"fmt"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/slacker-dev/slacker/bench/rig"
)

// Execute runs slacker-bench with os.Args and returns the process exit code. ^C
// (or SIGTERM) cancels the command's context, so every daemon, mount and helper
// it started is stopped before it exits.
func Execute() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	cmd := NewCommand()
	if err := cmd.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(cmd.ErrOrStderr(), "slacker-bench:", err)
		return 1
	}
	return 0
}

// NewCommand returns the slacker-bench command tree:
//
//	core                 the core benchmark: pull, run, copy-on-write, read
//	hello                HelloBench: push, pull and run of every workload per system
//	report               render HelloBench results.json files as HTML with SVG figures
//	corpus build|list|push|serve|synth|gc|rm
//	                     the corpus of workload images built from Debian packages
//	eval ITEM|report     the papers' evaluation, one command per result
//	docs                 render the docs' figures from the committed results
func NewCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "slacker-bench",
		Short: "Slacker's benchmarks: the core benchmark, HelloBench and the papers' evaluation",
		Long: `slacker-bench measures Slacker side by side with containerd + overlayfs: the core
benchmark (the README's numbers), HelloBench, which measures container start-up on a
corpus of workload images rebuilt from Debian packages (see docs/hellobench.md), and
the evaluation of the papers Slacker starts from (see docs/EVALUATION.md).

It drives the slacker and slackerd binaries found next to it (or on PATH), and
starts and stops every daemon it needs; the commands that run containers need root.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	cmd.AddCommand(newCoreCommand(), newHelloCommand(), newReportCommand(), newCorpusCommand(),
		newEvalCommand(func() (rig.Binaries, error) { return rig.FindBinaries("", "") }), newDocsCommand())
	return cmd
}
