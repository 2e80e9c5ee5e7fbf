package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"

	snapshotsapi "github.com/containerd/containerd/api/services/snapshots/v1"
	"github.com/containerd/containerd/v2/contrib/snapshotservice"
	"github.com/containerd/log"
	stargzfs "github.com/containerd/stargz-snapshotter/fs"
	memorymetadata "github.com/containerd/stargz-snapshotter/metadata/memory"
	"github.com/containerd/stargz-snapshotter/service"
	"github.com/containerd/stargz-snapshotter/service/resolver"
	"google.golang.org/grpc"
)

// serve runs the stargz snapshotter as a containerd proxy plugin on a unix socket
// until SIGINT or SIGTERM, then closes it (unmounting its FUSE layers).
//
// The configuration is upstream containerd-stargz-grpc's with no config file
// (its defaults: prefetch of the prioritized files on mount, background fetch of
// the rest, in-memory metadata, content verification), plus one mirror entry per
// --insecure registry so that it is reached over plain HTTP.
func serve(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	root := fs.String("root", "", "the snapshotter's state directory (required)")
	address := fs.String("address", "", "unix socket to serve the snapshots API on (required)")
	level := fs.String("log-level", "info", "log level (trace, debug, info, warn, error)")
	noBackground := fs.Bool("no-background-fetch", false, "do not fetch whole layers in the background")
	var insecure multiFlag
	fs.Var(&insecure, "insecure", "a registry HOST:PORT reached over plain HTTP (repeatable)")
	fs.Parse(args)
	if *root == "" || *address == "" || fs.NArg() != 0 {
		return errors.New("--root and --address are required, and nothing else")
	}
	if err := log.SetLevel(*level); err != nil {
		return err
	}
	ctx = log.WithLogger(ctx, log.L)

	var cfg service.Config
	// Upstream's defaults, given there as struct tags its TOML loader applies.
	cfg.DirectoryCacheConfig.Direct = true
	cfg.FuseConfig.MergeBufferSize = 400 << 20
	cfg.FuseConfig.MergeWorkerCount = 10
	cfg.NoBackgroundFetch = *noBackground
	cfg.ResolverConfig.Host = map[string]resolver.HostConfig{}
	for _, h := range insecure {
		cfg.ResolverConfig.Host[h] = resolver.HostConfig{Mirrors: []resolver.MirrorConfig{{Host: h, Insecure: true}}}
	}
	if err := service.Supported(*root); err != nil {
		return fmt.Errorf("stargz needs overlayfs under %s: %w", *root, err)
	}
	sn, err := service.NewStargzSnapshotterService(ctx, *root, &cfg,
		service.WithFilesystemOptions(stargzfs.WithMetadataStore(memorymetadata.NewReader)))
	if err != nil {
		return fmt.Errorf("start the snapshotter: %w", err)
	}
	defer sn.Close()

	rpc := grpc.NewServer()
	snapshotsapi.RegisterSnapshotsServer(rpc, snapshotservice.FromSnapshotter(sn))
	if err := os.MkdirAll(filepath.Dir(*address), 0o700); err != nil {
		return err
	}
	if err := os.Remove(*address); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	l, err := net.Listen("unix", *address)
	if err != nil {
		return err
	}
	served := make(chan error, 1)
	go func() { served <- rpc.Serve(l) }()
	log.G(ctx).WithField("address", *address).WithField("root", *root).Info("stargz snapshotter serving")
	select {
	case <-ctx.Done():
		log.G(ctx).Info("stopping: closing the snapshotter (unmounts its layers)")
		rpc.Stop()
		return nil
	case err := <-served:
		return fmt.Errorf("serve %s: %w", *address, err)
	}
}
