// Command slackerd is Slacker's node daemon: it serves volumes through FUSE, mounts
// container roots, keeps the shared chunk cache, and answers the slacker CLI on a unix
// socket. See docs/operating.md.
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/slacker-dev/slacker/internal/config"
	"github.com/slacker-dev/slacker/internal/daemon"
	"github.com/slacker-dev/slacker/internal/fetch"
	"github.com/slacker-dev/slacker/internal/fuseholder"
	"github.com/slacker-dev/slacker/internal/graphdriver"
	"github.com/slacker-dev/slacker/internal/metrics"
	"github.com/slacker-dev/slacker/internal/node"
	"github.com/slacker-dev/slacker/internal/registry"
	"github.com/slacker-dev/slacker/internal/snapshotter"
	"github.com/slacker-dev/slacker/internal/store/storeurl"
	"github.com/slacker-dev/slacker/internal/store/transport"
)

func main() {
	if err := command().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "slackerd:", err)
		os.Exit(1)
	}
}

func command() *cobra.Command {
	var cfgPath string
	flags := config.Defaults()
	var directIO, sharedStore bool
	var debugAddr string
	cmd := &cobra.Command{
		Use:           "slackerd",
		Short:         "Slacker node daemon: lazy block-level container roots",
		Example:       "  slackerd --root /var/lib/slacker\n  slackerd --config /etc/slacker/slackerd.toml",
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg := config.Defaults()
			if cfgPath != "" {
				var err error
				if cfg, err = config.Load(cfgPath); err != nil {
					return err
				}
			}
			f := cmd.Flags()
			set := func(name string, dst *string, v string) {
				if f.Changed(name) {
					*dst = v
				}
			}
			set("root", &cfg.Root, flags.Root)
			set("socket", &cfg.Socket, flags.Socket)
			set("store", &cfg.Store, flags.Store)
			set("chunk-size", &cfg.ChunkSize, flags.ChunkSize)
			set("cache-size", &cfg.Cache.Size, flags.Cache.Size)
			set("cache-memory", &cfg.Cache.Memory, flags.Cache.Memory)
			set("cache-disk", &cfg.Cache.Disk, flags.Cache.Disk)
			set("log-level", &cfg.LogLevel, flags.LogLevel)
			set("lease-interval", &cfg.GC.LeaseInterval, flags.GC.LeaseInterval)
			set("lease-ttl", &cfg.GC.LeaseTTL, flags.GC.LeaseTTL)
			set("snapshot-hold", &cfg.GC.SnapshotHold, flags.GC.SnapshotHold)
			set("snapshotter-socket", &cfg.SnapshotterSocket, flags.SnapshotterSocket)
			set("startup-trace", &cfg.StartupTrace, flags.StartupTrace)
			set("container-root", &cfg.ContainerRoot, flags.ContainerRoot)
			set("docker-config", &cfg.Registry.DockerConfig, flags.Registry.DockerConfig)
			if f.Changed("direct-io") {
				cfg.DirectIO = &directIO
			}
			set("local-images", &cfg.LocalImages, flags.LocalImages)
			set("local-image-format", &cfg.LocalImageFormat, flags.LocalImageFormat)
			set("metrics-address", &cfg.MetricsAddress, flags.MetricsAddress)
			set("image-root-linger", &cfg.ImageRootLinger, flags.ImageRootLinger)
			set("fuse-hold", &cfg.FUSEHold, flags.FUSEHold)
			set("volume-readahead", &cfg.VolumeReadahead, flags.VolumeReadahead)
			set("startup-readahead", &cfg.StartupReadahead, flags.StartupReadahead)
			set("replay-readahead", &cfg.ReplayReadahead, flags.ReplayReadahead)
			set("first-start-readahead", &cfg.FirstStartReadahead, flags.FirstStartReadahead)
			set("startup-chunk-size", &cfg.StartupChunkSize, flags.StartupChunkSize)
			set("store-receive-buffer", &cfg.StoreReceiveBuffer, flags.StoreReceiveBuffer)
			set("graphdriver-socket", &cfg.GraphDriver.Socket, flags.GraphDriver.Socket)
			if f.Changed("graphdriver-shared-store") {
				cfg.GraphDriver.SharedStore = sharedStore
			}
			if debugAddr != "" {
				go serveDebug(debugAddr)
			}
			return run(cfg)
		},
	}
	cmd.AddCommand(holderCommand())
	f := cmd.Flags()
	f.StringVar(&cfgPath, "config", "", "TOML configuration file (flags override it)")
	f.StringVar(&flags.Root, "root", flags.Root, "state directory")
	f.StringVar(&flags.Socket, "socket", flags.Socket, "API socket")
	f.StringVar(&flags.Store, "store", "", "chunk store location (default: ROOT/store, a local directory)")
	f.StringVar(&flags.ChunkSize, "chunk-size", flags.ChunkSize, "largest chunk cut by snapshots")
	f.StringVar(&flags.Cache.Size, "cache-size", flags.Cache.Size, "disk bound of the node chunk cache")
	f.StringVar(&flags.Cache.Memory, "cache-memory", flags.Cache.Memory, "memory tier of the node chunk cache")
	f.StringVar(&flags.Cache.Disk, "cache-disk", flags.Cache.Disk, "disk tier of the node chunk cache: auto (off for a local store), on, off")
	f.StringVar(&flags.LogLevel, "log-level", flags.LogLevel, "debug, info, warn or error")
	f.StringVar(&flags.GC.LeaseInterval, "lease-interval", "", "refresh the node's lease in the store this often (default 1m)")
	f.StringVar(&flags.GC.LeaseTTL, "lease-ttl", "", "the node's lease protects its snapshots this long after its last refresh (default 24h)")
	f.StringVar(&flags.GC.SnapshotHold, "snapshot-hold", "", "the node's lease keeps each snapshot it writes this long (default 1h)")
	f.BoolVar(&directIO, "direct-io", true, "attach loop devices with O_DIRECT")
	f.StringVar(&flags.SnapshotterSocket, "snapshotter-socket", flags.SnapshotterSocket, "serve containerd's snapshots API (proxy plugin) here; default: snapshotter.sock next to --socket; \"off\": not at all")
	f.StringVar(&flags.LocalImages, "local-images", "", "disk for local images, whole copies of images whose chunks are all on the node that the kernel reads without slackerd (default 16GiB; \"off\")")
	f.StringVar(&flags.LocalImageFormat, "local-image-format", "", "how local images are kept: tree (the image's files in a directory of the node's filesystem: the image root itself; default) or ext4 (one file, read through FUSE passthrough)")
	f.StringVar(&flags.ImageRootLinger, "image-root-linger", "", "keep an image's read-only root mounted this long after its last container, its page cache kept for the next (default 5m; \"off\")")
	f.StringVar(&flags.FUSEHold, "fuse-hold", "", "how long the node's FUSE connection waits for a new slackerd after this one dies or hands over (SIGUSR2), its containers' I/O waiting meanwhile (default 1m; \"off\": no holder, containers' I/O fails when slackerd dies)")
	f.StringVar(&flags.VolumeReadahead, "volume-readahead", "", "the kernel's readahead on each mounted volume's loop device: how far a container's ext4 reads, and a lazy volume fetches, ahead of what is asked (default 1MiB)")
	f.StringVar(&flags.StartupReadahead, "startup-readahead", "", "the readahead of a start's volume while it starts (its start-up window), when its chunks come from a remote store: what a start reads, its trace keeps and later starts fetch (default 16KiB; \"off\": --volume-readahead throughout)")
	f.StringVar(&flags.ReplayReadahead, "replay-readahead", "", "the readahead of a start's volume within its start-up window once the start replays its image's trace (default 8KiB; \"off\": --startup-readahead throughout)")
	f.StringVar(&flags.FirstStartReadahead, "first-start-readahead", "", "what a start loads after each of its reads of an image with no start-up trace yet (its first start), for its start-up window, when the store is 5 ms or more away (default 1MiB; \"off\": nothing, nor the image's inode tables as the start begins)")
	f.StringVar(&flags.StartupChunkSize, "startup-chunk-size", "", "largest chunk a start-up layout (slacker optimize) gathers start-up data into (default 1MiB)")
	f.StringVar(&flags.StoreReceiveBuffer, "store-receive-buffer", "", "each connection's receive buffer to a remote store, so that a far store's chunks do not wait on the node's receive window (default 4MiB; \"off\": the kernel's autotuning; needs net.core.rmem_max at least as large)")
	f.StringVar(&flags.ContainerRoot, "container-root", "", "how container roots are made unless a container or its image says: shared (default) or block")
	f.StringVar(&flags.StartupTrace, "startup-trace", "", "record a container's reads for this long as its image's start-up trace, replayed as prefetches on the next start (default 30s; \"off\")")
	f.StringVar(&flags.Registry.DockerConfig, "docker-config", "", "Docker config.json with registry credentials (default: $DOCKER_CONFIG, ~/.docker)")
	f.StringVar(&flags.GraphDriver.Socket, "graphdriver-socket", "", "serve Docker's graph-driver plugin here (off by default; docs/docker.md), e.g. /run/docker/plugins/slacker.sock")
	f.BoolVar(&sharedStore, "graphdriver-shared-store", false, "nodes that pull this node's pushes share its store: docker commit makes Slacker layers")
	f.StringVar(&flags.MetricsAddress, "metrics-address", "", "serve Prometheus metrics at http://ADDRESS/metrics, e.g. 127.0.0.1:9464 (off by default; docs/operating.md)")
	f.StringVar(&debugAddr, "debug-addr", "", "serve Go's pprof profiles on this address (e.g. 127.0.0.1:6060)")
	return cmd
}

func run(cfg config.Daemon) error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.LogLevel)); err != nil {
		return fmt.Errorf("log level %q: %w", cfg.LogLevel, err)
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	r, err := cfg.Resolve()
	if err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("must run as root: it mounts FUSE, loop devices and ext4")
	}
	if r.DockerConfig != "" {
		// Registry access reads credentials the way docker does, from $DOCKER_CONFIG:
		// set before the store opens, as a registry store logs in with them.
		os.Setenv("DOCKER_CONFIG", filepath.Dir(r.DockerConfig))
	}
	st, storeDesc, err := storeurl.OpenWith(r.Store, storeurl.Options{ReceiveBuffer: int(r.StoreReceiveBuffer)})
	if err != nil {
		return err
	}
	if _, capped := transport.ReceiveBufferFor(int(r.StoreReceiveBuffer), transport.RmemMax()); capped && !strings.HasPrefix(storeDesc, "local:") {
		log.Warn("store-receive-buffer-not-set", "asked", cmp.Or(r.StoreReceiveBuffer, transport.DefaultReceiveBuffer),
			"rmem_max", transport.RmemMax(), "action", "the kernel's autotuning is kept; raise it with sysctl -w net.core.rmem_max=BYTES (or store_receive_buffer = \"off\" to be quiet)")
	}
	// Only a local directory store makes a disk tier redundant.
	noDisk := r.CacheDisk == "off" || (r.CacheDisk == "auto" && strings.HasPrefix(storeDesc, "local:"))
	// Keep the heap near what the configuration allows: the memory tier plus working
	// buffers, so the daemon's RSS stays bounded under load.
	debug.SetMemoryLimit(r.MemBytes + 80<<20)
	// Metrics first: a bad address fails the start before anything is mounted.
	var met *metrics.Metrics
	var metL net.Listener
	if r.MetricsAddress != "" {
		if metL, err = metrics.Listen(r.MetricsAddress); err != nil {
			return err
		}
		defer metL.Close()
		met = metrics.New(storeDesc)
	}
	fetchOpts := fetch.Options{Parallel: r.FetchParallel, Attempt: r.Attempt, MaxWait: r.MaxWait}
	var observeFUSE func(string, time.Duration, error)
	onError := func(string) func(error) { return nil }
	if met != nil {
		fetchOpts.Observe, observeFUSE, onError = met.ObserveStore, met.ObserveFUSE, met.OnError
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	handover := make(chan os.Signal, 1)
	signal.Notify(handover, syscall.SIGUSR2)
	var holder func(context.Context) (*fuseholder.Client, error)
	if r.FUSEHold > 0 {
		holder = func(ctx context.Context) (*fuseholder.Client, error) { return startHolder(ctx, r.Root, r.FUSEHold) }
	}
	start := time.Now()
	n, err := node.Open(ctx, node.Config{
		Root: r.NodeRoot, Store: st, CacheBytes: r.CacheBytes, CacheMemBytes: r.MemBytes, CacheNoDisk: noDisk,
		ChunkSize: r.ChunkSize, NoDirectIO: !r.DirectIO, StartupWindow: r.StartupWindow, Logger: log,
		RootMode: node.RootMode(r.ContainerRoot), LocalImageBytes: r.LocalImageBytes,
		LocalImageFormat: node.LocalImageFormat(r.LocalImageFormat),
		ImageRootLinger:  r.ImageRootLinger, VolumeReadahead: r.VolumeReadahead, StartupReadahead: r.StartupReadahead,
		ReplayReadahead:     r.ReplayReadahead,
		FirstStartReadahead: r.FirstStartReadahead, StartupChunkSize: r.StartupChunkSize,
		Fetch: fetchOpts, ObserveFUSE: observeFUSE, Holder: holder,
		Lease: node.LeaseConfig{Interval: r.LeaseInterval, TTL: r.LeaseTTL, Hold: r.SnapshotHold,
			Roots: append(snapshotter.Roots(filepath.Join(r.Root, "snapshotter")),
				graphdriver.Roots(filepath.Join(r.Root, "graphdriver")), daemon.NamedSnapshots(r.Root))},
	})
	if err != nil {
		return err
	}
	daemon.ReconcileContainers(ctx, n, r.Root, log)
	log.Info("node-ready", "root", r.Root, "store", storeDesc, "took", time.Since(start), "taken_over", n.Resumed(),
		"version", version())
	if met != nil {
		met.SetSource(n)
		metSrv := met.Serve(metL, log)
		defer metSrv.Shutdown(context.Background())
	}
	errc := make(chan error, 3)
	var snapSrv *snapshotter.Server
	if r.SnapshotterSocket != "" {
		sn, err := snapshotter.New(n, snapshotter.Options{Dir: filepath.Join(r.Root, "snapshotter"), Logger: log,
			OnError: onError(metrics.WhereSnapshotter), Store: storeDesc,
			Attached: daemon.AttachedFinder(n, registry.Options{Insecure: r.InsecureRegistry}, log)})
		var l net.Listener
		if err == nil {
			defer sn.Close()
			go sn.Warm(ctx)
			snapSrv, l, err = snapshotter.Listen(r.SnapshotterSocket, sn, log)
		}
		if err != nil {
			n.Close(context.Background())
			return err
		}
		go func() { errc <- snapSrv.Serve(l) }()
	}
	var gdSrv *graphdriver.Server
	if cfg.GraphDriver.Socket != "" {
		gdSrv, err = graphdriver.Serve(ctx, n, graphdriver.Options{Root: filepath.Join(r.Root, "graphdriver"), Store: storeDesc,
			SharedStore: cfg.GraphDriver.SharedStore, Logger: log, OnError: onError(metrics.WhereGraphDriver)},
			cfg.GraphDriver.Socket, errc)
		if err != nil {
			n.Close(context.Background())
			return err
		}
	}
	srv := daemon.New(n, daemon.Options{StateRoot: r.Root, Store: storeDesc, ChunkSize: r.ChunkSize, Logger: log,
		OnError: onError(metrics.WhereAPI)})
	go func() { errc <- srv.Serve(r.Socket) }()
	handingOver := false
	select {
	case <-ctx.Done():
		log.Info("shutting-down", "reason", "signal")
	case <-handover:
		log.Info("handing-over", "reason", "SIGUSR2", "to", "the next slackerd started on this root")
		handingOver = true
	case err = <-errc:
		log.Error("api-stopped", "err", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if snapSrv != nil {
		snapSrv.Stop(sctx)
	}
	if gdSrv != nil {
		gdSrv.Stop(sctx)
	}
	srv.Shutdown(sctx)
	if handingOver {
		// The containers keep their mounts; the next slackerd takes the FUSE
		// connection over from the holder.
		if herr := n.Handover(sctx); herr != nil {
			log.Error("handover-failed", "err", herr)
			err = herr
		}
	} else if cerr := n.Close(sctx); cerr != nil {
		log.Error("close-failed", "err", cerr)
		if err == nil {
			err = cerr
		}
	}
	// A store may have work in the background (a registry store's index
	// checkpoints): let it finish.
	if c, ok := st.(io.Closer); ok {
		if cerr := c.Close(); cerr != nil {
			log.Error("store-close-failed", "err", cerr)
		}
	}
	os.Remove(r.Socket)
	log.Info("stopped")
	return err
}

// startHolder returns a client of the node's FUSE holder, starting it (this
// binary's fuse-holder command, in a session of its own, so that it outlives this
// process) if none answers on its socket.
func startHolder(ctx context.Context, root string, timeout time.Duration) (*fuseholder.Client, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("FUSE holder: %w", err)
	}
	sock := filepath.Join(root, "fuse-holder.sock")
	cmd := exec.Command(exe, "fuse-holder", "--socket", sock, "--timeout", timeout.String())
	c, err := fuseholder.Start(ctx, sock, cmd, filepath.Join(root, "fuse-holder.log"))
	if err != nil {
		return nil, err
	}
	if cmd.Process != nil {
		go cmd.Wait() // it exits when released, or when its wait for a new slackerd ends
	}
	return c, nil
}

// holderCommand is `slackerd fuse-holder`: the process that keeps the node's FUSE
// connection between two slackerd processes (package fuseholder). slackerd starts
// it; it is not meant to be run by hand.
func holderCommand() *cobra.Command {
	var socket string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:    "fuse-holder",
		Short:  "keep the node's FUSE connection for the next slackerd (started by slackerd)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			err := fuseholder.Serve(ctx, socket, fuseholder.Options{Timeout: timeout, Logger: log})
			if errors.Is(err, fuseholder.ErrAlreadyRunning) {
				log.Info("fuse-holder-not-started", "reason", err.Error())
				return nil
			}
			return err
		},
	}
	cmd.Flags().StringVar(&socket, "socket", "", "unix socket to serve")
	cmd.Flags().DurationVar(&timeout, "timeout", time.Minute, "end the connection if no slackerd takes it this long after the last one went")
	cmd.MarkFlagRequired("socket")
	return cmd
}

// buildTag, set at link time (-ldflags "-X main.buildTag=..."), tells one build
// from another in the logs (the tests hand a node over to a second build).
var buildTag string

// version is the build's module version and VCS revision (and tag), for the logs.
func version() string {
	if buildTag != "" {
		return buildInfo() + " " + buildTag
	}
	return buildInfo()
}

func buildInfo() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			v += " " + s.Value[:12]
		}
	}
	return v
}

// serveDebug serves net/http/pprof for profiling a running daemon.
func serveDebug(addr string) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	if err := http.ListenAndServe(addr, mux); err != nil {
		fmt.Fprintln(os.Stderr, "slackerd: debug server:", err)
	}
}
