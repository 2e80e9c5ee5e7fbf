package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/remotes/docker"
	"github.com/containerd/containerd/v2/core/remotes/docker/config"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/stargz-snapshotter/fs/source"
)

// prefetchSize is what ctr-remote rpull asks the snapshotter to prefetch of a
// layer that has no prioritized files (10 MiB, its default).
const prefetchSize = 10 << 20

// pull pulls ref into containerd and unpacks it with the stargz snapshotter,
// labelling each layer with the image reference and layer digests, as ctr-remote
// rpull (and CRI) do: without them the snapshotter cannot find a layer in the
// registry and containerd would download and apply it instead of mounting it.
func pull(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("pull", flag.ExitOnError)
	address := fs.String("address", "", "containerd's socket (required)")
	ns := fs.String("namespace", "default", "containerd namespace")
	snapshotter := fs.String("snapshotter", "stargz", "the snapshotter to unpack with")
	plainHTTP := fs.Bool("plain-http", false, "reach the registry over plain HTTP")
	fs.Parse(args)
	if *address == "" || fs.NArg() != 1 {
		return errors.New("--address and one image reference are required")
	}
	ref := fs.Arg(0)
	client, err := containerd.New(*address, containerd.WithTimeout(10*time.Second))
	if err != nil {
		return fmt.Errorf("connect to containerd at %s: %w", *address, err)
	}
	defer client.Close()
	ctx = namespaces.WithNamespace(ctx, *ns)
	ctx, done, err := client.WithLease(ctx)
	if err != nil {
		return err
	}
	defer done(context.WithoutCancel(ctx))
	hostOpts := config.HostOptions{}
	if *plainHTTP {
		hostOpts.DefaultScheme = "http"
	}
	resolver := docker.NewResolver(docker.ResolverOptions{Hosts: config.ConfigureHosts(ctx, hostOpts)})
	_, err = client.Pull(ctx, ref,
		containerd.WithResolver(resolver),
		containerd.WithPullUnpack,
		containerd.WithPullSnapshotter(*snapshotter),
		containerd.WithImageHandlerWrapper(source.AppendDefaultLabelsHandlerWrapper(ref, prefetchSize)),
	)
	if err != nil {
		return fmt.Errorf("pull %s: %w", ref, err)
	}
	return nil
}
