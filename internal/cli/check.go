package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/slacker-dev/slacker/internal/api"
	"github.com/slacker-dev/slacker/internal/gc"
	"github.com/slacker-dev/slacker/internal/units"
)

func newCheck(e *env) *cobra.Command {
	var readData bool
	var refs []string
	var storeLoc string
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Verify every reference in the store (names -> maps -> chunks), and with --read-data every digest",
		Long: `check follows every image named on this node (and each registry reference given,
and each snapshot in use in a live lease) to its block map, verifies the map's digest
and format, and checks that every chunk it names is in the store with the size the
map says. With --read-data it also reads every object in the store and verifies its
digest. Each problem is printed on its own line with the chain of references that
leads to it; the exit code is 1 if there is any.`,
		Example: `  slacker check
  slacker check --read-data`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if err := e.connect(ctx); err != nil {
				return err
			}
			roots, err := e.roots(ctx, refs)
			if err != nil {
				return err
			}
			rep := &gc.CheckReport{}
			ph := &phases{r: e.reporter(), name: "check"}
			if storeLoc != "" { // this process opens the store
				st, err := e.openStore(storeLoc)
				if err != nil {
					return err
				}
				o := gc.CheckOptions{Roots: roots, ReadData: readData, Logger: e.log,
					Progress: func(done, total int) { ph.update("read", int64(done), int64(total)) }}
				if rep, err = gc.Check(ctx, st, o); err != nil {
					return fmt.Errorf("check: %w", err)
				}
			} else if err := e.client.CheckProgress(ctx, api.CheckRequest{Roots: apiRoots(roots), ReadData: readData}, rep,
				func(p api.ProgressEvent) { ph.update(p.Phase, p.Done, p.Total) }); err != nil {
				return fmt.Errorf("check: %w", err)
			}
			ph.end()
			if e.jsonOut {
				if err := e.printJSON(rep); err != nil {
					return err
				}
			} else {
				for _, p := range rep.Problems {
					fmt.Fprintln(e.stdout, p)
				}
				fmt.Fprintf(e.stdout, "checked %d snapshots and %d chunks from %d roots", rep.Snapshots, rep.Chunks, rep.Roots)
				if readData {
					fmt.Fprintf(e.stdout, "; read %d objects (%s)", rep.Read, units.Bytes(rep.BytesRead))
				}
				fmt.Fprintf(e.stdout, ": %d problems\n", len(rep.Problems))
			}
			if !rep.OK() {
				return &exitError{code: 1}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&readData, "read-data", false, "read every object and verify its digest")
	f.StringArrayVar(&refs, "registry", nil, "also check what this registry reference names (repeatable)")
	f.StringVar(&storeLoc, "store", "", "open and check this store location here (default: slackerd checks its store)")
	f.BoolVar(&e.jsonOut, "json", false, "print JSON (progress too, on stderr)")
	f.BoolVarP(&e.quiet, "quiet", "q", false, "no progress")
	return cmd
}
