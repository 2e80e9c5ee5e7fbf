package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/remotes/docker"
	"github.com/containerd/containerd/v2/core/remotes/docker/config"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/snapshotters"
	"github.com/containerd/stargz-snapshotter/fs/source"
)

// prefetchSize is what ctr-remote rpull asks the snapshotter to prefetch of a
// layer that has no prioritized files (10 MiB, its default).
const prefetchSize = 10 << 20

// pull pulls ref into containerd and unpacks it with a remote snapshotter,
// labelling each layer so that the snapshotter can mount it instead of containerd
// downloading and applying it: with stargz's labels (the image reference and layer
// digests, as ctr-remote rpull gives them; without them stargz cannot find a layer
// in the registry) or with CRI's (as the CRI plugin gives them to any snapshotter;
// a Slacker layer's own annotation reaches the snapshotter either way). HelloBench
// pulls both stargz and Slacker through containerd with this one client, so that
// neither pays a heavier client's start-up than the other (docs/hellobench.md).
func pull(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("pull", flag.ExitOnError)
	address := fs.String("address", "", "containerd's socket (required)")
	ns := fs.String("namespace", "default", "containerd namespace")
	snapshotter := fs.String("snapshotter", "stargz", "the snapshotter to unpack with")
	plainHTTP := fs.Bool("plain-http", false, "reach the registry over plain HTTP")
	labels := fs.String("labels", "stargz", "the layer labels to give the snapshotter: stargz (ctr-remote rpull's) or cri (the CRI plugin's)")
	fs.Parse(args)
	if *address == "" || fs.NArg() != 1 {
		return errors.New("--address and one image reference are required")
	}
	ref := fs.Arg(0)
	var wrapper func(images.Handler) images.Handler
	switch *labels {
	case "stargz":
		wrapper = source.AppendDefaultLabelsHandlerWrapper(ref, prefetchSize)
	case "cri":
		wrapper = snapshotters.AppendInfoHandlerWrapper(ref)
	default:
		return fmt.Errorf("--labels %q: want stargz or cri", *labels)
	}
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
		containerd.WithImageHandlerWrapper(wrapper),
	)
	if err != nil {
		return fmt.Errorf("pull %s: %w", ref, err)
	}
	return nil
}
