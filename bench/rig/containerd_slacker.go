package rig

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/slacker-dev/slacker/internal/api"
	"github.com/slacker-dev/slacker/internal/testenv/services"
)

// ContainerdSlacker is containerd 1.6 with slackerd's snapshotter as its proxy
// plugin "slacker": images are published as Slacker images (convert and push on
// a publishing node sharing the store), pulled through containerd's client with
// the layer labels CRI gives a snapshotter, and run by ctr through containerd,
// which mounts the snapshots lazily instead of unpacking layers.
type ContainerdSlacker struct {
	s *Slacker
	c *Containerd
	// puller is slacker-stargz (bench/stargz), whose pull is the one containerd
	// client HelloBench pulls both Slacker and stargz images with.
	puller string
}

// NewContainerdSlacker returns the system; o is slackerd's (store and node under
// o.Dir), ctrdDir containerd's (keep it short: it holds sockets), puller the
// slacker-stargz binary (FindStargzBinary) whose pull it pulls with.
func NewContainerdSlacker(o SlackerOptions, ctrdDir, puller string) (*ContainerdSlacker, error) {
	if puller == "" {
		return nil, fmt.Errorf("slacker-containerd pulls with slacker-stargz pull (scripts/setup.sh builds bin/slacker-stargz from bench/stargz)")
	}
	if _, err := os.Stat(puller); err != nil {
		return nil, fmt.Errorf("slacker-containerd: %w (scripts/setup.sh builds bin/slacker-stargz from bench/stargz)", err)
	}
	o.Snapshotter = true
	s, err := NewSlacker(o)
	if err != nil {
		return nil, err
	}
	c, err := NewContainerd(ContainerdOptions{Dir: ctrdDir, Snapshotter: "slacker"})
	if err != nil {
		return nil, err
	}
	return &ContainerdSlacker{s: s, c: c, puller: puller}, nil
}

// SlackerContainerdName is the system's name in results.
const SlackerContainerdName = "slacker-containerd"

func (x *ContainerdSlacker) Name() string { return SlackerContainerdName }

// ownName is the image's name on this system's publishing node and in its
// repository (a store and registry may be shared with the slacker system).
func ownName(img Image) Image {
	img.Name = "ctrd-" + img.Name
	return img
}

// Publish converts and pushes the image as the slacker system does, under its own
// name.
func (x *ContainerdSlacker) Publish(ctx context.Context, img Image, registryAddr string) (string, time.Duration, error) {
	return x.s.Publish(ctx, ownName(img), registryAddr)
}

// Optimize lays the published image out for start-up and pushes it again, as the
// slacker system does.
func (x *ContainerdSlacker) Optimize(ctx context.Context, img Image, registryAddr string) (*api.Layout, time.Duration, error) {
	return x.s.Optimize(ctx, ownName(img), registryAddr)
}

// PushChange commits the change on the publishing node and pushes the new
// descriptor, as the slacker system does; containerd then pulls and runs it.
func (x *ContainerdSlacker) PushChange(ctx context.Context, img Image, ref string, ch Change) (PushResult, error) {
	return x.s.PushChange(ctx, ownName(img), ref, ch)
}

// Start runs the container through containerd (ctr run --snapshotter slacker), its
// root mounted lazily by slackerd's snapshotter.
func (x *ContainerdSlacker) Start(ctx context.Context, ref string, spec RunSpec) (*Container, error) {
	return x.c.Start(ctx, ref, spec)
}

// Traffic: the registry moved the Slacker image's few-KB layer (containerd pulls
// it), the store what slackerd fetched.
func (x *ContainerdSlacker) Traffic(ctx context.Context) (Traffic, error) {
	reg, err := x.c.FetchedBytes(ctx)
	if err != nil {
		return Traffic{}, err
	}
	n, err := x.s.FetchedBytes(ctx)
	return Traffic{RegistryBytes: reg, StoreBytes: n}, err
}

// Store is the chunk store's location.
func (x *ContainerdSlacker) Store() string { return x.s.Store() }

// Cold stops containerd, makes slackerd's node cold (fresh state, caches dropped),
// and starts containerd on an empty root with the snapshotter plugged in.
func (x *ContainerdSlacker) Cold(ctx context.Context) error {
	x.c.stop()
	x.c.pulled = map[string]bool{}
	if err := x.s.Cold(ctx); err != nil {
		return err
	}
	if err := os.RemoveAll(x.c.o.Dir); err != nil {
		return fmt.Errorf("reset containerd: %w", err)
	}
	var err error
	x.c.c, err = services.StartContainerd(ctx, services.ContainerdOptions{Dir: x.c.o.Dir,
		ProxySnapshotters: map[string]string{"slacker": filepath.Join(x.s.root, "snapshotter.sock")}})
	return err
}

// Pull pulls as CRI does: containerd's client unpacker with the CRI plugin's layer
// labels (slacker-stargz pull --labels cri), which also passes the Slacker layer's
// own annotation to the snapshotter as a label, so slackerd prepares the image's
// snapshot from it and containerd neither downloads nor applies the few-KB Slacker
// layer (docs/containerd.md). stargz is pulled by the same client with its own
// labels, so that neither system pays a heavier client than the other: nerdctl,
// which a user at a shell would run, pulled slower by its own start-up and work
// (docs/hellobench/README.md compares the runs).
func (x *ContainerdSlacker) Pull(ctx context.Context, ref string) (time.Duration, error) {
	if x.c.c == nil {
		return 0, fmt.Errorf("containerd is not running (Cold first)")
	}
	r, err := must(ctx, x.puller, "pull", "--address", x.c.c.Socket, "--namespace", "bench",
		"--snapshotter", "slacker", "--labels", "cri", "--plain-http", ref)
	if err == nil {
		x.c.pulled[ref] = true
	}
	return r.Took, err
}

func (x *ContainerdSlacker) Run(ctx context.Context, ref string, args []string, stdin io.Reader) (RunResult, error) {
	return x.c.Run(ctx, ref, args, stdin)
}

// FetchedBytes is what slackerd fetched from the store plus nothing from the
// registry's layers (containerd skips or fetches only the few-KB Slacker layer).
func (x *ContainerdSlacker) FetchedBytes(ctx context.Context) (int64, error) {
	return x.s.FetchedBytes(ctx)
}

func (x *ContainerdSlacker) Mount(ctx context.Context, ref string) (string, func() error, error) {
	return x.c.Mount(ctx, ref)
}

// Close stops containerd, then slackerd.
func (x *ContainerdSlacker) Close() error {
	x.c.Close()
	return x.s.Close()
}

var _ System = (*ContainerdSlacker)(nil)
