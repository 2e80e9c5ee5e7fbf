package cli

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/slacker-dev/slacker/internal/api"
	"github.com/slacker-dev/slacker/internal/containers"
	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/names"
	"github.com/slacker-dev/slacker/internal/runc"
	"github.com/slacker-dev/slacker/internal/units"
)

func newRun(e *env) *cobra.Command {
	var rm, tty, interactive, hostNet bool
	var name, workdir, user, entrypoint, rootMode string
	var envs []string
	cmd := &cobra.Command{
		Use:   "run [flags] IMAGE [-- COMMAND [ARG...]]",
		Short: "Run a command in a new container, reading the image lazily",
		Long: `Run makes the container's root from the image's snapshot (O(1), nothing copied)
and runs the command with runc in fresh namespaces, with the image's entrypoint, cmd,
env, working directory and user unless overridden. Its exit code is the command's. An
image that is not on this node but names a registry is pulled first.

The root is "shared" (an overlay over the node's one read-only mount of the image, so
every container of the image shares one page cache; a first write to an image file
copies the file up) or "block" (a block-level clone with an ext4 of its own: a write
copies 4 KiB blocks whatever the file's size, for containers that rewrite large image
files in place). --root-mode chooses; else the image's label dev.slacker.root-mode;
else slackerd's container_root (shared by default).`,
		Example: `  slacker run --rm debian:bookworm -- echo hello
  slacker run -it --rm debian:bookworm -- bash
  slacker run --name build -e CC=gcc gcc:12 -- make
  slacker run --root-mode block --name db postgres:15`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if err := e.connect(ctx); err != nil {
				return &exitError{125, err}
			}
			en, err := e.names.Get(args[0])
			if errors.Is(err, errdefs.ErrNotFound) && looksRemote(args[0]) {
				fmt.Fprintf(e.stderr, "image %s is not on this node; pulling it\n", args[0])
				d, _, perr := e.pullImage(ctx, args[0], false)
				if perr != nil {
					return &exitError{125, perr}
				}
				en, err = &names.Entry{Name: args[0], Descriptor: d}, nil
			}
			if err != nil {
				return &exitError{125, imageErr(err, args[0])}
			}
			cmdArgs := args[1:]
			if len(cmdArgs) > 0 && cmdArgs[0] == "--" {
				cmdArgs = cmdArgs[1:]
			}
			rcfg := runc.Config{Args: cmdArgs, Env: envs, Workdir: workdir, User: user, Terminal: tty, HostNetwork: hostNet}
			if cmd.Flags().Changed("entrypoint") {
				ep := []string{}
				if entrypoint != "" {
					ep = []string{entrypoint}
				}
				rcfg.Entry = &ep
			}
			if tty && !term.IsTerminal(int(os.Stdin.Fd())) {
				return &exitError{125, fmt.Errorf("-t needs a terminal on stdin")}
			}
			r, err := e.ctrs.Create(ctx, containers.CreateOptions{Name: name, ImageName: en.Name, Image: en.Descriptor, Run: rcfg,
				Mode: rootMode})
			if err != nil {
				return &exitError{125, err}
			}
			stdio := runc.Stdio{Out: e.stdout, Err: e.stderr}
			if interactive || tty {
				stdio.In = e.stdin
			}
			code, runErr := e.ctrs.Run(ctx, r, stdio)
			if rm {
				if err := e.ctrs.Remove(ctx, r.ID, true); err != nil {
					fmt.Fprintln(e.stderr, "slacker: remove container:", err)
				}
			}
			var rerr *runc.RunError
			if errors.As(runErr, &rerr) {
				return &exitError{rerr.Code, runErr}
			}
			if runErr != nil {
				return &exitError{125, runErr}
			}
			if code != 0 {
				return &exitError{code, nil}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.SetInterspersed(false)
	f.BoolVar(&rm, "rm", false, "remove the container when it exits")
	f.StringVar(&name, "name", "", "container name")
	f.StringArrayVarP(&envs, "env", "e", nil, "set an environment variable (KEY=VALUE)")
	f.StringVarP(&workdir, "workdir", "w", "", "working directory")
	f.StringVarP(&user, "user", "u", "", "user (name|uid[:group|gid])")
	f.StringVar(&entrypoint, "entrypoint", "", "override the image's entrypoint")
	f.StringVar(&rootMode, "root-mode", "", "how the root is made: shared or block (default: the image's label, else slackerd's container_root)")
	f.BoolVarP(&tty, "tty", "t", false, "allocate a terminal")
	f.BoolVarP(&interactive, "interactive", "i", false, "keep stdin open")
	f.BoolVar(&hostNet, "net-host", false, "share the host's network namespace (default: a new one with loopback only)")
	return cmd
}

func newPs(e *env) *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "ps",
		Short: "List containers",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := e.connect(cmd.Context()); err != nil {
				return err
			}
			list, err := e.ctrs.List()
			if err != nil {
				return err
			}
			var shown []*containers.Record
			for _, r := range list {
				if all || r.Status == containers.Running {
					shown = append(shown, r)
				}
			}
			if e.jsonOut {
				return e.printJSON(shown)
			}
			if e.quiet {
				for _, r := range shown {
					fmt.Fprintln(e.stdout, r.ID[:12])
				}
				return nil
			}
			w := e.table()
			fmt.Fprintln(w, "CONTAINER ID\tNAME\tIMAGE\tCOMMAND\tCREATED\tSTATUS\tROOT")
			for _, r := range shown {
				status := r.Status
				if r.Status == containers.Exited {
					status = fmt.Sprintf("exited (%d) %s", r.ExitCode, ago(r.Finished))
				}
				c := strings.Join(r.Command, " ")
				if len(c) > 30 {
					c = c[:27] + "..."
				}
				mode := r.Mode
				if mode == "" {
					mode = "block" // recorded before there were modes
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%q\t%s\t%s\t%s\n", r.ID[:12], r.Name, r.Image, c, ago(r.Created), status, mode)
			}
			return w.Flush()
		},
	}
	cmd.Flags().BoolVarP(&all, "all", "a", false, "show stopped containers too")
	cmd.Flags().BoolVar(&e.jsonOut, "json", false, "print JSON")
	cmd.Flags().BoolVarP(&e.quiet, "quiet", "q", false, "IDs only")
	return cmd
}

func newRm(e *env) *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "rm CONTAINER...",
		Short: "Remove containers and their volumes",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := e.connect(cmd.Context()); err != nil {
				return err
			}
			var errs []error
			for _, a := range args {
				if err := e.ctrs.Remove(cmd.Context(), a, force); err != nil {
					errs = append(errs, err)
					continue
				}
				fmt.Fprintln(e.stdout, a)
			}
			return errors.Join(errs...)
		},
	}
	cmd.Flags().BoolVarP(&force, "force", "f", false, "kill a running container first")
	return cmd
}

func newCommit(e *env) *cobra.Command {
	var message string
	cmd := &cobra.Command{
		Use:     "commit CONTAINER NAME",
		Short:   "Snapshot a container's root filesystem as a new image, in O(changed data)",
		Example: `  slacker commit build myapp:v2`,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if err := e.connect(ctx); err != nil {
				return err
			}
			r, err := e.ctrs.Get(args[0])
			if err != nil {
				return err
			}
			base, err := e.names.Get(r.Image)
			if err != nil {
				return fmt.Errorf("commit %s: its image %s: %w", r.Name, r.Image, err)
			}
			start := time.Now()
			d, snap, err := e.ctrs.Commit(ctx, r.ID, base.Descriptor, message)
			if err != nil {
				return err
			}
			if err := e.names.Put(args[1], d); err != nil {
				return err
			}
			if e.jsonOut {
				return e.printJSON(snap)
			}
			fmt.Fprintf(e.stdout, "%s: snapshot %s; %s changed, %s uploaded in %d chunks, in %s\n", args[1], snap.ID,
				units.Bytes(snap.DeltaBytes), units.Bytes(snap.NewBytes), snap.NewChunks, time.Since(start).Round(time.Millisecond))
			return nil
		},
	}
	cmd.Flags().StringVarP(&message, "message", "m", "", "commit message")
	cmd.Flags().BoolVar(&e.jsonOut, "json", false, "print JSON")
	return cmd
}

// ContainerStats is one row of `slacker stats`.
type ContainerStats struct {
	Name   string          `json:"name"`
	ID     string          `json:"id"`
	Image  string          `json:"image"`
	Status string          `json:"status"`
	Volume api.VolumeStats `json:"volume"`
	// ImageData is the image's data size; Fetched/ImageData is the share of the
	// image this container made the node fetch.
	ImageData int64 `json:"image_data_bytes"`
}

func newStats(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "stats [CONTAINER...]",
		Short: "Show per-container I/O (read, fetched from the store, cache hits) and node totals",
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if err := e.connect(ctx); err != nil {
				return err
			}
			list, err := e.ctrs.List()
			if err != nil {
				return err
			}
			want := map[string]bool{}
			for _, a := range args {
				r, err := e.ctrs.Get(a)
				if err != nil {
					return err
				}
				want[r.ID] = true
			}
			var rows []ContainerStats
			for _, r := range list {
				if len(want) > 0 && !want[r.ID] {
					continue
				}
				v, err := e.client.Volume(ctx, r.ID)
				if err != nil {
					continue
				}
				row := ContainerStats{Name: r.Name, ID: r.ID, Image: r.Image, Status: r.Status, Volume: v.Stats}
				if en, err := e.names.Get(r.Image); err == nil {
					row.ImageData = en.Descriptor.DataSize
				}
				rows = append(rows, row)
			}
			node, err := e.client.Stats(ctx)
			if err != nil {
				return err
			}
			if e.jsonOut {
				return e.printJSON(map[string]any{"containers": rows, "node": node})
			}
			w := e.table()
			fmt.Fprintln(w, "NAME\tSTATUS\tREAD\tWRITTEN\tFETCHED\tOF IMAGE\tCACHE HITS\tMISSES\tDELTA")
			for _, r := range rows {
				share := "-"
				if r.ImageData > 0 {
					share = fmt.Sprintf("%.1f%%", 100*float64(r.Volume.FetchedBytes)/float64(r.ImageData))
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", r.Name, r.Status, units.Bytes(r.Volume.ReadBytes),
					units.Bytes(r.Volume.WrittenBytes), units.Bytes(r.Volume.FetchedBytes), share, r.Volume.CacheHits,
					r.Volume.CacheMisses, units.Bytes(r.Volume.DeltaBytes))
			}
			w.Flush()
			fmt.Fprintf(e.stdout, "node: cache %s of %s in %d chunks (hits %d memory, %d local blocks, %d disk; %d misses); fetched %s; slackerd RSS %s (peak %s)\n",
				units.Bytes(node.Cache.DiskBytes), units.Bytes(node.Cache.MaxBytes), node.Cache.DiskChunks, node.Cache.MemHits,
				node.Cache.PartialReads, node.Cache.DiskHits, node.Cache.Misses, units.Bytes(node.Fetch.FetchedBytes),
				units.Bytes(node.RSSBytes), units.Bytes(node.PeakRSS))
			return nil
		},
	}
	cmd.Flags().BoolVar(&e.jsonOut, "json", false, "print JSON")
	return cmd
}

func newInfo(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "info",
		Short: "Show slackerd's configuration and node counters",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if err := e.connect(ctx); err != nil {
				return err
			}
			st, err := e.client.Stats(ctx)
			if err != nil {
				return err
			}
			if e.jsonOut {
				return e.printJSON(map[string]any{"daemon": e.info, "stats": st})
			}
			fmt.Fprintf(e.stdout, "slackerd %s (pid %d)\nstate:  %s\nstore:  %s\nchunks: up to %s\nvolumes: %d (%d mounted)\ncache:  %s of %s\n",
				e.info.Version, e.info.PID, e.info.StateRoot, e.info.Store, units.Bytes(e.info.ChunkSize), st.Volumes, st.Mounted,
				units.Bytes(st.Cache.DiskBytes), units.Bytes(st.Cache.MaxBytes))
			fmt.Fprintf(e.stdout, "reads:  %d from memory, %d of local blocks (%s), %d whole from disk, %d fetched; %d damaged blocks caught\n",
				st.Cache.MemHits, st.Cache.PartialReads, units.Bytes(st.Cache.PartialBytes), st.Cache.DiskHits, st.Cache.Misses,
				st.Cache.SumMismatches)
			li := st.LocalImages
			fmt.Fprintf(e.stdout, "local images: %d (%s), %d read by an image root, %d being written, %d idle roots waiting for theirs\n",
				li.Count, units.Bytes(li.Bytes), li.InUse, li.Writing, li.Pending)
			return nil
		},
	}
	cmd.Flags().BoolVar(&e.jsonOut, "json", false, "print JSON")
	return cmd
}
