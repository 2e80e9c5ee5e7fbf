package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/spf13/cobra"

	"github.com/slacker-dev/slacker/internal/convert"
	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/image"
	"github.com/slacker-dev/slacker/internal/names"
	"github.com/slacker-dev/slacker/internal/registry"
	"github.com/slacker-dev/slacker/internal/units"
)

func newConvert(e *env) *cobra.Command {
	var sizeStr string
	var noDevices bool
	cmd := &cobra.Command{
		Use:   "convert SOURCE NAME",
		Short: "Convert an OCI image into Slacker snapshots, one per layer",
		Long: `Convert an OCI image into block-level snapshots by layer flattening: each layer is
applied to a clone of its parent's snapshot and snapshotted. Layers already converted
(same OCI chain ID) are reused, so images that share layers share chunks.

SOURCE is one of:
  oci:DIR[:TAG]              an OCI layout directory
  oci-archive:FILE[:TAG]     an OCI layout in a tar file
  docker-archive:FILE[:TAG]  a tar written by docker save or skopeo
  [docker://]REF             an image in a registry
A plain path is recognized by its content.`,
		Example: `  slacker convert oci:/tmp/layout:bookworm debian:bookworm
  slacker convert docker-archive:debian.tar debian
  slacker convert 127.0.0.1:5000/library/debian:bookworm debian`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if err := e.connect(ctx); err != nil {
				return err
			}
			target, err := names.Normalize(args[1])
			if err != nil {
				return err
			}
			var size int64
			if sizeStr != "" {
				if size, err = units.ParseBytes(sizeStr); err != nil {
					return err
				}
			}
			src, err := convert.Open(ctx, args[0], convert.OpenOptions{Insecure: e.insecure})
			if err != nil {
				return err
			}
			defer src.Close()
			rep := e.reporter()
			rep.Step("converting %s (%s)", args[0], src.Kind)
			d, st, err := convert.Convert(ctx, src, convert.Options{
				Node: e.client, Chains: e.names, Size: size, NoDevices: noDevices,
				Progress: rep, Logger: e.log,
			})
			if err != nil {
				return fmt.Errorf("convert %s: %w", args[0], err)
			}
			if err := e.names.Put(target, d); err != nil {
				return err
			}
			if e.jsonOut {
				return e.printJSON(map[string]any{"name": target, "descriptor": d, "stats": st})
			}
			fmt.Fprintf(e.stdout, "%s: snapshot %s, %d layers (%d reused), %s of data, %s uploaded, in %.1fs\n",
				target, d.Snapshot, st.Layers, st.LayersReused, units.Bytes(d.DataSize), units.Bytes(st.BytesUploaded), st.Took.Seconds())
			return nil
		},
	}
	cmd.Flags().StringVar(&sizeStr, "size", "", "virtual size of the image's filesystem (default: slackerd's, 10GiB)")
	cmd.Flags().BoolVar(&noDevices, "no-devices", false, "refuse layers that contain device nodes")
	cmd.Flags().BoolVarP(&e.quiet, "quiet", "q", false, "no progress")
	cmd.Flags().BoolVar(&e.jsonOut, "json", false, "print the result as JSON")
	return cmd
}

func newOptimize(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "optimize IMAGE [NAME]",
		Short: "Lay an image out for start-up: gather what its containers read first into few chunks",
		Long: `Re-lay IMAGE's snapshot so that what a container reads at start-up sits together
in few chunks, and name the result NAME (default: IMAGE itself). What start-up reads
comes from the image's start-up trace, which the first container of the image records
(within its first 30 s): run the image once, with its real command, before optimizing.
The new image reads the same bytes; it is a new snapshot, with a trace of its own, so
push it again. Start-up data is copied into new chunks of up to slackerd's
startup_chunk_size (1 MiB), in the order start-up first read it, so that a start
fetches it in few requests (docs/design.md, "Start-up layout"); the rest is shared
with IMAGE.`,
		Example: `  slacker run --rm myapp:v1            # records the start-up trace
  slacker optimize myapp:v1
  slacker push myapp:v1 registry.example.com/slacker/myapp:v1`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			en, err := e.namedImage(ctx, args[0])
			if err != nil {
				return err
			}
			target := en.Name
			if len(args) == 2 {
				if target, err = names.Normalize(args[1]); err != nil {
					return err
				}
			}
			res, err := e.client.LayoutStartup(ctx, en.Descriptor.Snapshot)
			if err != nil {
				return fmt.Errorf("optimize %s: %w", args[0], err)
			}
			d := *en.Descriptor
			if !res.Unchanged {
				d.Snapshot = res.Snapshot
				d.Layers = append(append([]image.Layer(nil), d.Layers...),
					image.Layer{Snapshot: res.Snapshot, Comment: "start-up layout of " + en.Descriptor.Snapshot.String()})
				d.Created = time.Now().UTC()
			}
			if err := e.names.Put(target, &d); err != nil {
				return err
			}
			if e.jsonOut {
				return e.printJSON(map[string]any{"name": target, "layout": res})
			}
			if res.Unchanged {
				fmt.Fprintf(e.stdout, "%s: already laid out for start-up (start-up reads %s in chunks of %s)\n", target,
					units.Bytes(res.ReadBytes), units.Bytes(res.FetchBefore))
				return nil
			}
			fmt.Fprintf(e.stdout, "%s: snapshot %s; start-up reads %s, fetched in chunks of %s (was %s); %s gathered into %d new chunks, in %.1fs\n",
				target, res.Snapshot, units.Bytes(res.ReadBytes), units.Bytes(res.FetchAfter), units.Bytes(res.FetchBefore),
				units.Bytes(res.GatheredBytes), res.NewChunks, res.TookSeconds)
			return nil
		},
	}
	cmd.Flags().BoolVar(&e.jsonOut, "json", false, "print the result as JSON")
	return cmd
}

func newPush(e *env) *cobra.Command {
	var attach bool
	embed := true
	cmd := &cobra.Command{
		Use:   "push IMAGE REF",
		Short: "Publish an image's descriptor to an OCI registry (kilobytes; data stays in the store)",
		Long: `Push publishes the image's descriptor (about 1.5 KB) to a registry; its data stays in
the store. By default REF becomes a Slacker image of its own name.

With --attach, REF is the ordinary image the Slacker image was converted from
(slacker convert REF NAME, or a pull that converted it): the descriptor is attached
to it as an OCI artifact (its subject is the image's manifest; through the registry's
referrers API, or the referrers tag "sha256-<digest>" where it has none). The image is
not changed: stock clients pull and run it as before, and slacker pull/run of REF, or
containerd with the Slacker snapshotter, find the descriptor and run it lazily. A tag
that moved to another image since the conversion is refused.`,
		Example: `  slacker push debian:bookworm 127.0.0.1:5000/slacker/debian:bookworm
  slacker convert 127.0.0.1:5000/app:v1 app:v1 && slacker push --attach app:v1 127.0.0.1:5000/app:v1`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			en, err := e.namedImage(ctx, args[0])
			if err != nil {
				return err
			}
			start := time.Now()
			push, what := registry.Push, "pushing"
			if attach {
				push, what = registry.Attach, "attaching"
			}
			e.reporter().Step("%s %s (%s of data in the store, which stays there) to %s", what, args[0],
				units.Bytes(en.Descriptor.DataSize), args[1])
			opts := e.regOpts()
			if !attach {
				// The layer carries the block map and names this node's store: a pull
				// by a node of the same store reads both with the manifest.
				if opts.BlockMap, err = e.client.SnapshotMap(ctx, en.Descriptor.Snapshot); err != nil {
					e.log.Warn("push-without-map", "image", args[0], "err", err)
					opts.BlockMap = nil
				}
				opts.Store = e.info.Store
				opts.NoEmbed = !embed
			}
			res, err := push(ctx, args[1], en.Descriptor, opts)
			if err != nil {
				return err
			}
			if e.jsonOut {
				return e.printJSON(res)
			}
			fmt.Fprintf(e.stdout, "pushed %s: %s (%d bytes in %s)\n", res.Reference, res.ManifestDigest, res.BytesMoved,
				time.Since(start).Round(time.Millisecond))
			return nil
		},
	}
	cmd.Flags().BoolVar(&e.jsonOut, "json", false, "print the result as JSON")
	cmd.Flags().BoolVarP(&e.quiet, "quiet", "q", false, "no progress")
	cmd.Flags().BoolVar(&embed, "embed-layer", true, "embed the Slacker layer (the descriptor and the block map, when at most 60 KiB) in the manifest, so that slacker pull reads it with the manifest; false for a registry read mostly by containerd over links with 1500-byte frames")
	cmd.Flags().BoolVar(&attach, "attach", false, "attach the descriptor to the ordinary image REF it was converted from, instead of a name of its own")
	return cmd
}

// pullImage resolves ref in its registry, names it locally and fetches its block map.
//
// An ordinary OCI image (never converted) is converted on this node, with a message
// saying so, unless noConvert: then the error says how to convert it.
func (e *env) pullImage(ctx context.Context, ref string, noConvert bool) (*image.Descriptor, *registry.Result, error) {
	// slackerd's lookup of the snapshot (its block map's fetch from the store)
	// begins as soon as the manifest names it, beside the Slacker layer's fetch
	// from the registry: over a link with a 20 ms round trip, the lookup's round
	// trips no longer follow the layer's.
	// A lookup begun for a pull that then fails is cancelled on return.
	lookupCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	// While the registry is asked (a connection, then the manifest: two round
	// trips), slackerd opens connections to the store for what follows the pull.
	// A hint, asked beside the registry's connection, not before it.
	go func() {
		if err := e.client.WarmStore(ctx); err != nil {
			e.log.Debug("store-warm-not-asked", "err", err)
		}
	}()
	var ahead *snapshotLookup
	opts := e.regOpts()
	opts.SnapshotNamed = func(id digest.Digest) { ahead = e.lookupSnapshot(lookupCtx, id) }
	d, res, err := registry.Pull(ctx, ref, opts)
	if errors.Is(err, registry.ErrNotSlacker) {
		if d, res, ok := e.pullAttached(ctx, ref); ok {
			return d, res, nil
		}
	}
	if errors.Is(err, registry.ErrNotSlacker) && !noConvert {
		fmt.Fprintf(e.stderr, "%s is an ordinary OCI image, not a Slacker image: converting it on this node, which downloads all its layers once.\n"+
			"To let other nodes pull it lazily, attach the result to it: slacker push --attach %s %s\n", ref, ref, ref)
		return e.convertOnPull(ctx, ref)
	}
	if err != nil {
		return nil, nil, err
	}
	if res.BlockMap != nil && res.Store != "" && res.Store == e.info.Store {
		// The layer carries the map and the manifest names this node's store: no
		// lookup in the store before the pull returns (slackerd checks that the
		// store still has the snapshot in the background). A map pushed from
		// another store is looked up below, which says so if it is not there.
		cancel()
		if err := e.client.CarryMap(ctx, d.Snapshot, res.BlockMap); err != nil {
			return nil, nil, err
		}
		if err := e.names.Put(ref, d); err != nil {
			return nil, nil, err
		}
		return d, res, nil
	}
	if ahead == nil || ahead.id != d.Snapshot { // a manifest that named another snapshot than its layer's
		ahead = e.lookupSnapshot(lookupCtx, d.Snapshot)
	}
	if err := ahead.wait(); err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			return nil, nil, image.NotInStore(ref, d.Snapshot, e.info.Store)
		}
		return nil, nil, err
	}
	if err := e.names.Put(ref, d); err != nil {
		return nil, nil, err
	}
	return d, res, nil
}

// snapshotLookup is slackerd's lookup of a snapshot under way (lookupSnapshot).
type snapshotLookup struct {
	id   digest.Digest
	done chan struct{}
	err  error
}

// lookupSnapshot begins asking slackerd for snapshot id, which fetches its block
// map onto the node and fails if the store does not have it.
func (e *env) lookupSnapshot(ctx context.Context, id digest.Digest) *snapshotLookup {
	l := &snapshotLookup{id: id, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		_, l.err = e.client.Snapshot(ctx, id)
	}()
	return l
}

func (l *snapshotLookup) wait() error {
	<-l.done
	return l.err
}

// pullAttached looks for a Slacker descriptor attached to the ordinary image ref
// and names it ref if one is usable here: of those whose snapshot is in this
// node's store, the newest. An attached artifact that is malformed or made from
// another image is logged and passed over, never used; ok is false when none is
// usable (the caller converts the image, as for one with none).
func (e *env) pullAttached(ctx context.Context, ref string) (*image.Descriptor, *registry.Result, bool) {
	found, subject, rejected, err := registry.Attached(ctx, ref, e.regOpts())
	if err != nil {
		e.log.Warn("attached-lookup-failed", "image", ref, "err", err)
		return nil, nil, false
	}
	for _, r := range rejected {
		e.log.Warn("attached-descriptor-rejected", "image", ref, "subject", subject, "artifact", r.Artifact, "err", r.Err)
		fmt.Fprintf(e.stderr, "%s: a Slacker descriptor attached to it is not used: %v\n", ref, r.Err)
	}
	a, passed := registry.ChooseAttached(found, func(d *image.Descriptor) error {
		if _, err := e.client.Snapshot(ctx, d.Snapshot); err != nil {
			return image.NotInStore(ref, d.Snapshot, e.info.Store)
		}
		return nil
	})
	for _, r := range passed {
		fmt.Fprintf(e.stderr, "%s: a Slacker descriptor attached to it is not used: %v\n", ref, r.Err)
	}
	if a == nil {
		return nil, nil, false
	}
	if err := e.names.PutAttached(ref, a.Descriptor, a.Artifact); err != nil {
		e.log.Warn("attached-name-failed", "image", ref, "err", err)
		return nil, nil, false
	}
	e.reporter().Step("%s: running it lazily from the Slacker descriptor attached to it (%s)", ref, shortID(a.Artifact))
	return a.Descriptor, &registry.Result{Reference: ref, ManifestDigest: subject}, true
}

// convertOnPull converts an ordinary image from its registry and names it ref.
func (e *env) convertOnPull(ctx context.Context, ref string) (*image.Descriptor, *registry.Result, error) {
	src, err := convert.Open(ctx, ref, convert.OpenOptions{Insecure: e.insecure})
	if err != nil {
		return nil, nil, err
	}
	defer src.Close()
	d, st, err := convert.Convert(ctx, src, convert.Options{Node: e.client, Chains: e.names, Progress: e.reporter(), Logger: e.log})
	if err != nil {
		return nil, nil, fmt.Errorf("convert %s: %w", ref, err)
	}
	if err := e.names.Put(ref, d); err != nil {
		return nil, nil, err
	}
	return d, &registry.Result{Reference: ref, ManifestDigest: d.Source.ManifestDigest, BytesMoved: st.CompressedSize}, nil
}

func newPull(e *env) *cobra.Command {
	var noConvert, prepare bool
	cmd := &cobra.Command{
		Use:   "pull REF",
		Short: "Resolve a Slacker image in a registry (moves kilobytes, whatever its size)",
		Long: `Pull resolves a Slacker image pushed to a registry: it reads the image's descriptor
(about 1.5 KB) and its block map; data is fetched later, as containers read it.
Unless --prepare=false, slackerd then mounts the image's shared root and begins
fetching what the image's start reads (its start-up trace), in the background, as
a container's start would: the image's next container starts with both under way.

A reference to an ordinary OCI image is converted on this node instead (its layers are
downloaded once), with a message; --no-convert refuses it.`,
		Example: `  slacker pull 127.0.0.1:5000/slacker/debian:bookworm`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if err := e.connect(ctx); err != nil {
				return err
			}
			start := time.Now()
			d, res, err := e.pullImage(ctx, args[0], noConvert)
			if err != nil {
				return err
			}
			if prepare {
				// A hint: a container makes its root itself if this fails.
				if err := e.client.PrepareImage(ctx, d.Snapshot); err != nil {
					e.log.Warn("image-prepare-not-asked", "image", res.Reference, "err", err)
				}
			}
			took := time.Since(start)
			if e.jsonOut {
				return e.printJSON(map[string]any{"reference": res.Reference, "manifest": res.ManifestDigest,
					"snapshot": d.Snapshot, "bytes_moved": res.BytesMoved, "seconds": took.Seconds()})
			}
			fmt.Fprintf(e.stdout, "pulled %s: snapshot %s (%s of data); moved %d bytes in %s\n", res.Reference, d.Snapshot,
				units.Bytes(d.DataSize), res.BytesMoved, took.Round(time.Millisecond))
			return nil
		},
	}
	cmd.Flags().BoolVar(&e.jsonOut, "json", false, "print the result as JSON")
	cmd.Flags().BoolVar(&noConvert, "no-convert", false, "refuse ordinary OCI images instead of converting them")
	cmd.Flags().BoolVar(&prepare, "prepare", true, "have slackerd mount the image's shared root and begin fetching what its start reads, in the background, for a container expected soon")
	cmd.Flags().BoolVarP(&e.quiet, "quiet", "q", false, "no progress")
	return cmd
}

// imageErr turns the name store's not-found (err is from e.names) into advice.
// namedImage connects to slackerd and returns the image called name on this node,
// or an error that says how to get one.
func (e *env) namedImage(ctx context.Context, name string) (*names.Entry, error) {
	if err := e.connect(ctx); err != nil {
		return nil, err
	}
	en, err := e.names.Get(name)
	if err != nil {
		return nil, imageErr(err, name)
	}
	return en, nil
}

func imageErr(err error, name string) error {
	if errors.Is(err, errdefs.ErrNotFound) {
		return fmt.Errorf("no image %q on this node: convert it (slacker convert) or pull it (slacker pull REF)", name)
	}
	return err
}

func newImages(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "images",
		Short: "List images on this node",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := e.connect(cmd.Context()); err != nil {
				return err
			}
			list, err := e.names.List()
			if err != nil {
				return err
			}
			if e.jsonOut {
				return e.printJSON(list)
			}
			if e.quiet {
				for _, en := range list {
					fmt.Fprintln(e.stdout, en.Name)
				}
				return nil
			}
			w := e.table()
			fmt.Fprintln(w, "NAME\tSNAPSHOT\tLAYERS\tDATA\tSIZE\tCREATED\tATTACHED")
			for _, en := range list {
				d := en.Descriptor
				attached := "-"
				if en.Attached != "" {
					attached = "to " + shortID(d.Source.ManifestDigest)
				}
				fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", en.Name, shortID(d.Snapshot), len(d.Layers),
					units.Bytes(d.DataSize), units.Bytes(d.Size), ago(d.Created), attached)
			}
			return w.Flush()
		},
	}
	cmd.Flags().BoolVar(&e.jsonOut, "json", false, "print JSON")
	cmd.Flags().BoolVarP(&e.quiet, "quiet", "q", false, "names only")
	return cmd
}

func newRmi(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "rmi IMAGE...",
		Short: "Remove image names (the snapshots stay in the store until garbage collection)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := e.connect(cmd.Context()); err != nil {
				return err
			}
			var errs []error
			for _, a := range args {
				if err := e.names.Delete(a); err != nil {
					errs = append(errs, imageErr(err, a))
					continue
				}
				fmt.Fprintln(e.stdout, "removed", a)
			}
			return errors.Join(errs...)
		},
	}
}

func newTag(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "tag IMAGE NEWNAME",
		Short: "Give an image another name",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			en, err := e.namedImage(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return e.names.Put(args[1], en.Descriptor)
		},
	}
}

func shortID(d digest.Digest) string {
	s := d.Encoded()
	if len(s) > 12 {
		return s[:12]
	}
	return s
}

func ago(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := time.Since(t)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	default:
		return fmt.Sprintf("%dd ago", int(d.Hours()/24))
	}
}

// looksRemote reports whether an image name includes a registry host.
func looksRemote(s string) bool {
	host, _, ok := strings.Cut(s, "/")
	return ok && (strings.ContainsAny(host, ".:") || host == "localhost")
}
