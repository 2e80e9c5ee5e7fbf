package cli

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/slacker-dev/slacker/bench/docsgen"
)

func newDocsCommand() *cobra.Command {
	var root string
	var check bool
	cmd := &cobra.Command{
		Use:   "docs",
		Short: "Render the docs' figures from the committed results JSON (--check: only compare)",
		Long: `Every figure of README.md and docs/ that comes from committed results
(docs/bench, docs/hellobench, docs/eval) is marked in place,

  <!-- fig SOURCE FUNC ARG... -->15.7x<!-- /fig -->

and this command renders each one again from its results file and rewrites the text
between the markers (docs/BENCHMARKS.md says how). It runs nothing and needs no root.
With --check it changes nothing and exits 1 if a figure differs from its data, as
the test of bench/docsgen does in CI.`,
		Example: `  slacker-bench docs            # after committing new results: re-render the docs
  slacker-bench docs --check    # does every marked figure match its data?`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := os.Stat(filepath.Join(root, "docs")); err != nil {
				return fmt.Errorf("%s is not the repository's root (no docs/ in it): run from there or give --root", root)
			}
			d := docsgen.New(root)
			var res docsgen.Result
			var err error
			if check {
				res, err = d.Check()
			} else {
				res, err = d.Write()
			}
			if err != nil {
				return err
			}
			n := 0
			for _, c := range res.Figures {
				n += c
			}
			out := cmd.OutOrStdout()
			for _, x := range res.Diffs {
				fmt.Fprintln(out, x)
			}
			switch {
			case check && len(res.Diffs) > 0:
				return fmt.Errorf("%d of %d figures differ from their data: run slacker-bench docs", len(res.Diffs), n)
			case check:
				fmt.Fprintf(out, "figures: %d in %d files, all as their data renders them\n", n, len(res.Figures))
			default:
				fmt.Fprintf(out, "figures: %d in %d files, %d rewritten\n", n, len(res.Figures), len(res.Diffs))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&root, "root", ".", "the repository's root")
	cmd.Flags().BoolVar(&check, "check", false, "change nothing; exit 1 if a figure differs from its data")
	return cmd
}
