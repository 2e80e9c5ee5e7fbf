package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/slacker-dev/slacker/bench/corpus"
	"github.com/slacker-dev/slacker/internal/testenv/services"
)

// startLocalRegistry starts docker-registry with its data under the corpus
// directory, so a later `corpus serve` serves what was pushed.
func startLocalRegistry(ctx context.Context, dir, addr string) (*services.Registry, error) {
	r, err := services.StartRegistry(ctx, services.RegistryOptions{Dir: filepath.Join(dir, "registry"), Addr: addr})
	if err != nil {
		return nil, fmt.Errorf("start docker-registry (apt-get install docker-registry): %w", err)
	}
	return r, nil
}

func newPushCommand(f *corpusFlags) *cobra.Command {
	var registry, addr, only, prefix string
	var serve bool
	cmd := &cobra.Command{
		Use:   "push [--registry HOST:PORT] [--only NAME,...]",
		Short: "Push the corpus images to a registry (default: one started under DIR/registry)",
		Long: `Push every image of the corpus to REGISTRY/hellobench/NAME:latest. Without
--registry, Debian's docker-registry is started on loopback with its data under
DIR/registry, and stopped when the push is done (or, with --serve, on ^C).`,
		Example: `  slacker-bench corpus push --serve
  slacker-bench corpus push --registry 127.0.0.1:5000 --only debian,redis`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			stderr := cmd.ErrOrStderr()
			if registry == "" {
				r, err := startLocalRegistry(ctx, f.dir, addr)
				if err != nil {
					return err
				}
				defer r.Stop()
				registry = r.Addr
				fmt.Fprintf(stderr, "started docker-registry at %s (pid %d, data in %s)\n", r.Addr, r.PID(), r.Dir)
			} else if serve {
				return errors.New("--serve only goes with the registry push starts itself (no --registry)")
			}
			var names []string
			if only != "" {
				names = strings.Split(only, ",")
			}
			res, err := corpus.Push(ctx, f.dir, corpus.PushOptions{Registry: registry, Prefix: prefix, Names: names, Progress: stderr})
			if err != nil {
				return err
			}
			if f.json {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				enc.Encode(res)
			} else {
				for _, r := range res {
					fmt.Fprintln(cmd.OutOrStdout(), r.Ref)
				}
			}
			if serve {
				fmt.Fprintf(stderr, "serving %d images at %s until interrupted\n", len(res), registry)
				<-ctx.Done()
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&registry, "registry", "", "registry host:port to push to (default: start one)")
	fl.StringVar(&addr, "addr", "", "listen address of the started registry (default: a free loopback port)")
	fl.StringVar(&only, "only", "", "comma-separated image names (default all)")
	fl.StringVar(&prefix, "prefix", corpus.DefaultRepoPrefix, "repository namespace")
	fl.BoolVar(&serve, "serve", false, "keep the started registry running until interrupted")
	return cmd
}

func newServeCommand(f *corpusFlags) *cobra.Command {
	var addr string
	cmd := &cobra.Command{
		Use:   "serve [--addr 127.0.0.1:5000]",
		Short: "Serve the pushed corpus (DIR/registry) with docker-registry until interrupted",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			r, err := startLocalRegistry(ctx, f.dir, addr)
			if err != nil {
				return err
			}
			defer r.Stop()
			fmt.Fprintf(cmd.ErrOrStderr(), "docker-registry serving %s at %s (pid %d); ^C stops it\n", r.Dir, r.Addr, r.PID())
			fmt.Fprintln(cmd.OutOrStdout(), r.Addr)
			<-ctx.Done()
			return nil
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "", "listen address (default: a free loopback port)")
	return cmd
}

func newSynthCommand(f *corpusFlags) *cobra.Command {
	var files, layers int
	var size, name, minFree string
	var seed uint64
	cmd := &cobra.Command{
		Use:   "synth --files N --size S [--layers L] [--seed X]",
		Short: "Generate a synthetic image of N random files of size S (deterministic from the seed)",
		Example: `  slacker-bench corpus synth --files 1000 --size 1MiB
  slacker-bench corpus synth --files 64 --size 16MiB --layers 4 --seed 7 --name big`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sz, err := parseSize(size)
			if err != nil {
				return fmt.Errorf("--size: %w", err)
			}
			mf, err := parseSize(minFree)
			if err != nil {
				return fmt.Errorf("--min-free: %w", err)
			}
			c, err := corpus.Open(corpus.Options{Dir: f.dir, MinFree: mf, Progress: cmd.ErrOrStderr(), Logger: f.logger(cmd.ErrOrStderr())})
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			rec, err := c.Synth(ctx, corpus.SynthSpec{Files: files, Size: sz, Layers: layers, Seed: seed, Name: name})
			if err != nil {
				return err
			}
			if f.json {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(rec)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s\t%d layers\t%s compressed\t%s uncompressed\t%s\n", rec.Name, len(rec.Layers),
				corpus.HumanBytes(rec.Size), corpus.HumanBytes(rec.USize), rec.Manifest)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&files, "files", 1000, "number of files")
	fl.StringVar(&size, "size", "1MiB", "size of each file")
	fl.IntVar(&layers, "layers", 1, "number of layers the files are spread over")
	fl.Uint64Var(&seed, "seed", 1, "seed of the content")
	fl.StringVar(&name, "name", "", "image name (default synth-f<N>-s<S>-l<L>-r<seed>)")
	fl.StringVar(&minFree, "min-free", "8GiB", "refuse to generate with less free disk than this")
	return cmd
}
