package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/slacker-dev/slacker/internal/api"
	"github.com/slacker-dev/slacker/internal/gc"
	"github.com/slacker-dev/slacker/internal/image"
	"github.com/slacker-dev/slacker/internal/registry"
	"github.com/slacker-dev/slacker/internal/store"
	"github.com/slacker-dev/slacker/internal/store/storeurl"
	"github.com/slacker-dev/slacker/internal/units"
)

func newGC(e *env) *cobra.Command {
	var grace, skew time.Duration
	var dryRun, cacheOnly bool
	var keep, storeLoc string
	var refs []string
	cmd := &cobra.Command{
		Use:   "gc",
		Short: "Delete store objects nothing uses, or trim the node's chunk cache",
		Long: `gc collects the chunk store: it keeps every snapshot named on this node, named by
the registry references given, or in use on any node whose lease is alive (the bases
of its volumes, the images named there, the chunks of its uploads in progress), and
every chunk those snapshots name; it never deletes an object younger than the grace
period. Everything else is deleted. It stops, deleting nothing more, when it cannot
read something that might protect objects (a lease, a named block map).

With --cache it trims this node's chunk cache instead (every chunk can be fetched
again).`,
		Example: `  slacker gc --dry-run
  slacker gc --grace 24h --registry 10.0.0.5:5000/team/app:v1
  slacker gc --cache --keep 2GiB`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if err := e.connect(ctx); err != nil {
				return err
			}
			if cacheOnly {
				var keepBytes int64
				if keep != "" {
					var err error
					if keepBytes, err = units.ParseBytes(keep); err != nil {
						return fmt.Errorf("--keep: %w", err)
					}
				}
				res, err := e.client.TrimCache(ctx, keepBytes)
				if err != nil {
					return err
				}
				if e.jsonOut {
					return e.printJSON(res)
				}
				fmt.Fprintf(e.stdout, "cache: removed %d chunks (%s); %s in %d chunks left\n", res.Chunks, units.Bytes(res.Bytes),
					units.Bytes(res.Cache.DiskBytes), res.Cache.DiskChunks)
				return nil
			}
			roots, err := e.roots(ctx, refs)
			if err != nil {
				return err
			}
			if skew == 0 {
				skew = -1 // none
			}
			rep := &gc.Report{}
			ph := &phases{r: e.reporter(), name: "gc"}
			if storeLoc != "" { // this process opens the store
				st, err := e.openStore(storeLoc)
				if err != nil {
					return err
				}
				rep, err = gc.Collect(ctx, st, gc.Options{Roots: roots, Grace: grace, DryRun: dryRun, Skew: skew, Logger: e.log,
					Progress: ph.update})
				if err != nil {
					return fmt.Errorf("gc: %w", err)
				}
			} else if err := e.client.GCProgress(ctx, api.GCRequest{Roots: apiRoots(roots), GraceSeconds: grace.Seconds(),
				SkewSeconds: skew.Seconds(), DryRun: dryRun}, rep,
				func(p api.ProgressEvent) { ph.update(p.Phase, p.Done, p.Total) }); err != nil { // slackerd, which has the store open
				return fmt.Errorf("gc: %w", err)
			}
			ph.end()
			if e.jsonOut {
				return e.printJSON(rep)
			}
			verb := "deleted"
			if dryRun {
				verb = "would delete"
			}
			if rep.Epoch > 0 {
				fmt.Fprintf(e.stdout, "gc epoch %d: ", rep.Epoch)
			}
			fmt.Fprintf(e.stdout, "%d objects (%s): %d live from %d snapshots, %d kept for their age, %d for uploads in progress; %s %d (%s) in %s\n",
				rep.Objects, units.Bytes(rep.Bytes), rep.Live, rep.Snapshots, rep.Young, rep.Uploading, verb, rep.Deleted,
				units.Bytes(rep.DeletedBytes), rep.Took.Round(time.Millisecond))
			for _, l := range rep.Leases {
				state := "alive until " + l.Expires.Local().Format(time.RFC3339)
				if l.Expired {
					state = "expired at " + l.Expires.Local().Format(time.RFC3339) + ": ignored"
				}
				fmt.Fprintf(e.stdout, "  lease of node %s (%s): %d snapshots, %d uploads, %s\n", l.Node, l.Host, l.Snapshots, l.Uploads, state)
			}
			for _, m := range rep.Missing {
				fmt.Fprintf(e.stdout, "  missing: %s, named by %s (run `slacker check`)\n", m.Object, m.From)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.DurationVar(&grace, "grace", gc.DefaultGrace, "never delete an object younger than this")
	f.BoolVar(&dryRun, "dry-run", false, "report what would be deleted, delete nothing")
	f.DurationVar(&skew, "lease-skew", time.Minute, "treat a node's lease as alive this long after it expires (clocks differ)")
	f.StringArrayVar(&refs, "registry", nil, "also keep what this registry reference names (repeatable)")
	f.StringVar(&storeLoc, "store", "", "open and collect this store location here (default: slackerd collects its store)")
	f.BoolVar(&cacheOnly, "cache", false, "trim this node's chunk cache instead of collecting the store")
	f.StringVar(&keep, "keep", "0", "with --cache: keep this much of the hottest cached data")
	f.BoolVar(&e.jsonOut, "json", false, "print JSON (progress too, on stderr)")
	f.BoolVarP(&e.quiet, "quiet", "q", false, "no progress")
	return cmd
}

// openStore opens the store at location.
func (e *env) openStore(location string) (store.Store, error) {
	st, _, err := storeurl.Open(location)
	if err != nil {
		return nil, fmt.Errorf("open the store: %w", err)
	}
	return st, nil
}

// roots lists the snapshots named on this node and by the registry references.
func (e *env) roots(ctx context.Context, refs []string) ([]gc.Root, error) {
	entries, err := e.names.List()
	if err != nil {
		return nil, fmt.Errorf("read the image names: %w", err)
	}
	var roots []gc.Root
	for _, en := range entries {
		from := "name " + en.Name
		roots = append(roots, gc.Root{Snapshot: en.Descriptor.Snapshot, From: from})
		for i, l := range en.Descriptor.Layers {
			roots = append(roots, gc.Root{Snapshot: l.Snapshot, From: fmt.Sprintf("%s layer %d", from, i+1)})
		}
	}
	add := func(d *image.Descriptor, from string) {
		roots = append(roots, gc.Root{Snapshot: d.Snapshot, From: from})
		for i, l := range d.Layers {
			roots = append(roots, gc.Root{Snapshot: l.Snapshot, From: fmt.Sprintf("%s layer %d", from, i+1)})
		}
	}
	for _, ref := range refs {
		d, _, err := registry.Pull(ctx, ref, e.regOpts())
		if errors.Is(err, registry.ErrNotSlacker) {
			// An ordinary image: the descriptors attached to it name what to keep.
			found, _, _, aerr := registry.Attached(ctx, ref, e.regOpts())
			if aerr != nil {
				return nil, fmt.Errorf("resolve %s (the snapshots attached to it must be kept): %w", ref, aerr)
			}
			for _, a := range found {
				add(a.Descriptor, fmt.Sprintf("registry %s, attached %s", ref, shortID(a.Artifact)))
			}
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("resolve %s (the snapshots it names must be kept): %w", ref, err)
		}
		add(d, "registry "+ref)
	}
	return roots, nil
}

func apiRoots(rs []gc.Root) []api.GCRoot {
	out := make([]api.GCRoot, len(rs))
	for i, r := range rs {
		out[i] = api.GCRoot{Snapshot: r.Snapshot, From: r.From}
	}
	return out
}
