package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/slacker-dev/slacker/bench/corpus"
	"github.com/slacker-dev/slacker/bench/workload"
)

type corpusFlags struct {
	dir     string
	verbose bool
	json    bool
}

func (f *corpusFlags) logger(w io.Writer) *slog.Logger {
	level := slog.LevelWarn
	if f.verbose {
		level = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

// defaultCorpus is the corpus directory: $SLACKER_BENCH_CORPUS, else the
// builder's default.
func defaultCorpus() string {
	if d := os.Getenv(corpus.DirEnv); d != "" {
		return d
	}
	return corpus.DefaultDir
}

func newCorpusCommand() *cobra.Command {
	f := &corpusFlags{}
	cmd := &cobra.Command{
		Use:   "corpus",
		Short: "Build, list, push and generate HelloBench images",
	}
	cmd.PersistentFlags().StringVar(&f.dir, "dir", defaultCorpus(), "corpus directory (env "+corpus.DirEnv+")")
	cmd.PersistentFlags().BoolVarP(&f.verbose, "verbose", "v", false, "log structured events on stderr")
	cmd.PersistentFlags().BoolVar(&f.json, "json", false, "print JSON instead of a table")
	cmd.AddCommand(newBuildCommand(f), newListCommand(f), newPushCommand(f), newServeCommand(f),
		newSynthCommand(f), newGCCommand(f), newRmCommand(f))
	return cmd
}

func parseSize(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"KB", 1000}, {"MB", 1000 * 1000}, {"GB", 1000 * 1000 * 1000}, {"B", 1}}
	s = strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	var n int64
	if _, err := fmt.Sscanf(s, "%d", &n); err != nil || n < 0 || fmt.Sprint(n) != s {
		return 0, fmt.Errorf("bad size %q (e.g. 4096, 1MiB, 2GiB)", s)
	}
	return n * mult, nil
}

func newBuildCommand(f *corpusFlags) *cobra.Command {
	var (
		file, only, minFree, suite, mirror, snapshot string
		jobs                                         int
		keepApt, force, recheck, recommends          bool
	)
	cmd := &cobra.Command{
		Use:   "build --workloads FILE [--only NAME,...]",
		Short: "Build workload images from Debian packages into the corpus",
		Example: `  slacker-bench corpus build --workloads shared/hellobench/workloads.toml
  slacker-bench corpus build --workloads w.toml --only debian,python --dir /var/tmp/corpus`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return errors.New("--workloads FILE is required")
			}
			set, err := workload.ParseFile(file)
			if err != nil {
				return err
			}
			var names []string
			if only != "" {
				names = strings.Split(only, ",")
			}
			ws, err := set.Select(names)
			if err != nil {
				return err
			}
			mf, err := parseSize(minFree)
			if err != nil {
				return fmt.Errorf("--min-free: %w", err)
			}
			if os.Geteuid() != 0 {
				return errors.New("building needs root (namespaces, overlay mounts, chroot)")
			}
			stderr := cmd.ErrOrStderr()
			c, err := corpus.Open(corpus.Options{
				Dir: f.dir, Source: corpus.Source{Suite: suite, Mirror: mirror, Snapshot: snapshot, Recommends: recommends},
				MinFree: mf, Jobs: jobs, KeepAptCache: keepApt, Force: force, Recheck: recheck,
				Logger: f.logger(stderr), Progress: stderr,
			})
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			rep, err := c.Build(ctx, ws)
			if rep != nil {
				printReport(cmd.OutOrStdout(), rep, f.json)
			}
			if err != nil {
				return err
			}
			if n := len(rep.Failed()); n > 0 {
				return fmt.Errorf("%d of %d workloads failed (see above and %s/logs)", n, len(ws), f.dir)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&file, "workloads", "w", "", "workloads TOML file")
	fl.StringVar(&only, "only", "", "comma-separated workload names to build (default all)")
	fl.StringVar(&minFree, "min-free", "8GiB", "refuse to build with less free disk than this")
	fl.IntVarP(&jobs, "jobs", "j", 1, "layers built at once")
	fl.BoolVar(&keepApt, "keep-apt-cache", false, "keep apt lists and downloaded .debs under DIR/work/apt")
	fl.BoolVar(&force, "force", false, "rebuild images even when up to date (cached layers are reused)")
	fl.BoolVar(&recheck, "recheck", false, "rebuild app layers to re-run the checks of each cmd against its image")
	fl.StringVar(&suite, "suite", corpus.DefaultSource.Suite, "Debian suite")
	fl.StringVar(&mirror, "mirror", corpus.DefaultSource.Mirror, "Debian mirror")
	fl.StringVar(&snapshot, "snapshot", "", "label of the mirror state; part of every layer key")
	fl.BoolVar(&recommends, "install-recommends", false, "install recommended packages too")
	return cmd
}

func printReport(w io.Writer, rep *corpus.Report, asJSON bool) {
	if asJSON {
		type row struct {
			Name   string              `json:"name"`
			Status corpus.Status       `json:"status"`
			Error  string              `json:"error,omitempty"`
			Record *corpus.ImageRecord `json:"record,omitempty"`
		}
		out := struct {
			Results      []row   `json:"results"`
			LayersBuilt  int     `json:"layers_built"`
			LayersCached int     `json:"layers_cached"`
			Seconds      float64 `json:"seconds"`
			DiskUsage    int64   `json:"disk_usage"`
		}{LayersBuilt: rep.LayersBuilt, LayersCached: rep.LayersCached, Seconds: rep.Elapsed.Seconds(), DiskUsage: rep.DiskUsage}
		for _, r := range rep.Results {
			x := row{Name: r.Name, Status: r.Status, Record: r.Record}
			if r.Err != nil {
				x.Error = r.Err.Error()
			}
			out.Results = append(out.Results, x)
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(out)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKLOAD\tSTATUS\tLAYERS\tCOMPRESSED\tUNCOMPRESSED\tNOTE")
	for _, r := range rep.Results {
		if r.Record != nil {
			note := ""
			if len(r.Record.Problems) > 0 {
				note = "problem: " + strings.Join(r.Record.Problems, "; ")
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", r.Name, r.Status, len(r.Record.Layers),
				corpus.HumanBytes(r.Record.Size), corpus.HumanBytes(r.Record.USize), note)
		} else {
			msg := ""
			if r.Err != nil {
				msg, _, _ = strings.Cut(r.Err.Error(), "\n")
			}
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t%s\n", r.Name, r.Status, msg)
		}
	}
	tw.Flush()
	fmt.Fprintf(w, "%d layers built, %d cached, %s; corpus uses %s on disk\n",
		rep.LayersBuilt, rep.LayersCached, rep.Elapsed.Round(time.Second), corpus.HumanBytes(rep.DiskUsage))
}

func newListCommand(f *corpusFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the images in the corpus with their layers and sizes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			imgs, err := corpus.List(f.dir)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if f.json {
				enc := json.NewEncoder(w)
				enc.SetIndent("", "  ")
				return enc.Encode(imgs)
			}
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "IMAGE\tLAYERS\tCOMPRESSED\tUNCOMPRESSED\tSHARED LAYERS\tMANIFEST")
			blobs := map[string]int64{}
			var total int64
			for _, im := range imgs {
				shared := 0
				for _, l := range im.Layers {
					if l.Shared > 1 {
						shared++
					}
					blobs[l.Digest] = l.Size
				}
				total += im.Size
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%s\n", im.Name, len(im.Layers), corpus.HumanBytes(im.Size),
					corpus.HumanBytes(im.USize), shared, im.Manifest[:19])
			}
			tw.Flush()
			var distinct int64
			for _, s := range blobs {
				distinct += s
			}
			du, _ := corpus.DiskUsage(f.dir)
			fmt.Fprintf(w, "%d images, %d distinct layer blobs: %s compressed (%s if nothing were shared); corpus dir %s\n",
				len(imgs), len(blobs), corpus.HumanBytes(distinct), corpus.HumanBytes(total), corpus.HumanBytes(du))
			return nil
		},
	}
}

func newRmCommand(f *corpusFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "rm NAME...",
		Short: "Remove images from the corpus (blobs go at the next gc)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := corpus.Open(corpus.Options{Dir: f.dir})
			if err != nil {
				return err
			}
			return c.Remove(args)
		},
	}
}

func newGCCommand(f *corpusFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "gc",
		Short: "Remove blobs and layer records that no image or cached layer needs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := corpus.Open(corpus.Options{Dir: f.dir})
			if err != nil {
				return err
			}
			freed, err := c.GC()
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "freed %s\n", corpus.HumanBytes(freed))
			return nil
		},
	}
}
