package config

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/slacker-dev/slacker/internal/store/transport"
	"github.com/slacker-dev/slacker/internal/units"
)

// DefaultRoot is where Slacker keeps its state unless told otherwise.
const DefaultRoot = "/var/lib/slacker"

// DefaultImageRootLinger is how long an idle image root stays mounted unless
// image_root_linger says.
const DefaultImageRootLinger = 5 * time.Minute

// DefaultFUSEHold is how long the node's FUSE connection waits for a new
// slackerd after the last one died or handed over, unless fuse_hold says.
const DefaultFUSEHold = time.Minute

// DefaultLocalImageBytes bounds the node's local images unless local_images says.
const DefaultLocalImageBytes = 16 << 30

// Daemon is slackerd's configuration. Sizes are strings such as "10GiB".
type Daemon struct {
	// Root holds node state (Root/node), the embedded store (Root/store) and names
	// (Root/images).
	Root   string `toml:"root"`
	Socket string `toml:"socket"`
	// Store is the chunk store's location; empty means the local store at Root/store.
	Store     string `toml:"store"`
	ChunkSize string `toml:"chunk_size"`
	LogLevel  string `toml:"log_level"`
	// DirectIO attaches loop devices with O_DIRECT (default true).
	DirectIO *bool `toml:"direct_io"`
	Cache    struct {
		Size   string `toml:"size"`
		Memory string `toml:"memory"`
		// Disk keeps a disk tier: "auto" (default) keeps one unless the store is a
		// local directory, "on" or "off".
		Disk string `toml:"disk"`
	} `toml:"cache"`
	Fetch struct {
		Parallel int    `toml:"parallel"`
		Attempt  string `toml:"attempt_timeout"`
		MaxWait  string `toml:"max_wait"`
	} `toml:"fetch"`
	// GC is the node's lease in the store, which garbage collection honours
	// (docs/RELIABILITY.md).
	GC struct {
		LeaseInterval string `toml:"lease_interval"` // between refreshes (1m)
		LeaseTTL      string `toml:"lease_ttl"`      // protection after the last refresh (24h)
		SnapshotHold  string `toml:"snapshot_hold"`  // the lease keeps each snapshot written this long (1h)
	} `toml:"gc"`
	// StartupTrace is how long after a container starts its reads are recorded as
	// its image's start-up trace, replayed as prefetches when the image next starts
	// ("30s" by default; "off": neither recorded nor replayed; docs/design.md).
	StartupTrace string `toml:"startup_trace"`
	// ContainerRoot is how container roots are made unless a container or its
	// image says otherwise: "shared" (default: an overlay over one read-only mount
	// of the image per node, whose page cache all its containers share) or
	// "block" (a block-level clone per container: 4 KiB copy-on-write, a page cache
	// of its own; docs/design.md says when to choose it).
	ContainerRoot string `toml:"container_root"`
	// LocalImages bounds the disk the node's local images take (default 16GiB;
	// "off": none): an image whose chunks are all on the node is written into one
	// local file, which the next image root of it is read through by FUSE
	// passthrough, without slackerd in the path (docs/design.md, "Local images").
	LocalImages string `toml:"local_images"`
	// LocalImageFormat is how local images are kept: "tree" (default: the image's
	// files copied into a directory of the node's filesystem, which is the image
	// root itself, as a layer of containerd's overlayfs snapshotter is) or "ext4"
	// (the image's bytes in one file, read by the image root's loop device through
	// FUSE passthrough).
	LocalImageFormat string `toml:"local_image_format"`
	// ImageRootLinger is how long an image's read-only root stays mounted after
	// its last container goes, its page cache kept for the next one (default 5m;
	// "off": it goes with its last container). docs/design.md, "Idle image roots".
	ImageRootLinger string `toml:"image_root_linger"`
	// VolumeReadahead is the kernel's readahead on the loop device of each volume
	// slackerd mounts (an image root read lazily, a block clone): how far a
	// container's ext4 reads ahead of what is asked, which a lazily read volume
	// fetches (default 1MiB; docs/design.md, "The guest's readahead").
	VolumeReadahead string `toml:"volume_readahead"`
	// StartupReadahead is the readahead of a start's volume, when its chunks come
	// from a remote store, from its mount until its start-up window closes: what
	// a start reads, and so what its trace keeps and every later start fetches
	// (default 16KiB; "off": volume_readahead throughout). docs/design.md, "A
	// start reads ahead little".
	StartupReadahead string `toml:"startup_readahead"`
	// ReplayReadahead is the readahead of a start's volume, within its start-up
	// window, once the start replays its image's trace: what the trace did not
	// hold is then read in small requests, not in windows around it that the
	// trace never saw (default 8KiB; "off": startup_readahead throughout).
	// docs/design.md, "A replayed start reads ahead less".
	ReplayReadahead string `toml:"replay_readahead"`
	// FirstStartReadahead is what a container's start loads after each of its
	// reads of the image while the image has no start-up trace to replay (its
	// first start anywhere, or one that records a new trace), when the store is
	// 5 ms or more away: default 1MiB, "off" for nothing (neither these loads
	// nor those of the image's inode tables as a first start begins).
	// docs/design.md, "A first start reads near what it read".
	FirstStartReadahead string `toml:"first_start_readahead"`
	// StartupChunkSize is the largest chunk a start-up layout (slacker optimize)
	// gathers start-up data into (default 1MiB): larger than chunk_size, so that a
	// replay of the re-laid image fetches its start-up data in a few requests.
	// docs/design.md, "Start-up layout".
	StartupChunkSize string `toml:"startup_chunk_size"`
	// StoreReceiveBuffer is each connection's receive buffer (SO_RCVBUF) to a
	// remote store (S3, registry): default 4MiB, so that a chunk over a link with
	// a long round trip does not wait on the node's receive window, which the
	// kernel opens a round trip at a time; "off" leaves it to the kernel's
	// autotuning, as does a buffer larger than net.core.rmem_max (slackerd then
	// says so as it starts). docs/design.md, "Where a traced start's time goes
	// at 20 ms".
	StoreReceiveBuffer string `toml:"store_receive_buffer"`
	// FUSEHold is how long the node's FUSE connection, kept by a holder process,
	// waits for a new slackerd after this one dies or hands over (default 1m);
	// the containers' reads and writes wait meanwhile, and fail after it. "off": no
	// holder, a slackerd that dies ends its containers' I/O at once.
	// docs/operating.md, "Restarting and upgrading slackerd".
	FUSEHold string `toml:"fuse_hold"`
	// MetricsAddress is where slackerd serves Prometheus metrics (GET /metrics),
	// host:port such as "127.0.0.1:9464"; empty (the default): no metrics.
	MetricsAddress string `toml:"metrics_address"`
	// SnapshotterSocket is where slackerd serves containerd's snapshots API (a
	// proxy plugin, docs/containerd.md): empty means snapshotter.sock next to
	// Socket (/run/slacker/snapshotter.sock by default), "off" turns it off.
	SnapshotterSocket string `toml:"snapshotter_socket"`
	Registry          struct {
		// DockerConfig is the Docker client config (config.json) holding registry
		// credentials; empty means $DOCKER_CONFIG/config.json, else
		// ~/.docker/config.json of the user slackerd runs as.
		DockerConfig string `toml:"docker_config"`
		// Insecure talks plain HTTP to every registry (loopback and private
		// addresses always get plain HTTP).
		Insecure bool `toml:"insecure"`
	} `toml:"registry"`
	// GraphDriver is Docker's graph-driver plugin (docs/docker.md).
	GraphDriver struct {
		// Socket is where slackerd serves it; empty (the default) means not at all.
		// dockerd finds the plugin NAME at /run/docker/plugins/NAME.sock, so
		// /run/docker/plugins/slacker.sock is storage driver "slacker".
		Socket string `toml:"socket"`
		// SharedStore says the nodes that pull what this node pushes use its store:
		// docker commit then makes Slacker layers (a snapshot ID) instead of tars.
		SharedStore bool `toml:"shared_store"`
	} `toml:"graphdriver"`
}

// Defaults returns the configuration used when no file is given.
func Defaults() Daemon {
	d := Daemon{Root: DefaultRoot, Socket: "/run/slacker/slackerd.sock", ChunkSize: "256KiB", LogLevel: "info"}
	d.Cache.Size, d.Cache.Memory, d.Cache.Disk = "10GiB", "64MiB", "auto"
	return d
}

// Load reads path over the defaults. Unknown keys are an error.
func Load(path string) (Daemon, error) {
	d := Defaults()
	md, err := toml.DecodeFile(path, &d)
	if err != nil {
		return d, fmt.Errorf("config %s: %w", path, err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		return d, fmt.Errorf("config %s: unknown keys %v", path, und)
	}
	return d, nil
}

// Resolved is a validated configuration with parsed values.
type Resolved struct {
	Root, NodeRoot, Socket, Store   string
	SnapshotterSocket, DockerConfig string // SnapshotterSocket "" when off
	InsecureRegistry                bool
	ChunkSize, CacheBytes, MemBytes int64
	DirectIO                        bool
	CacheDisk                       string // "auto", "on" or "off"
	FetchParallel                   int
	Attempt, MaxWait                time.Duration
	LeaseInterval, LeaseTTL         time.Duration
	SnapshotHold                    time.Duration
	StartupWindow                   time.Duration // negative: off
	ContainerRoot                   string        // "shared" or "block"
	LocalImageBytes                 int64         // 0: off
	LocalImageFormat                string        // "", "tree" or "ext4"
	MetricsAddress                  string        // "": no metrics
	ImageRootLinger                 time.Duration // 0: off
	FUSEHold                        time.Duration // 0: off (no holder)
	VolumeReadahead                 int64         // bytes; 0: the node's default
	StartupReadahead                int64         // bytes; 0: the node's default; negative: off
	ReplayReadahead                 int64         // bytes; 0: the node's default; negative: off
	FirstStartReadahead             int64         // bytes; 0: the node's default; negative: off
	StartupChunkSize                int64         // bytes; 0: the node's default
	StoreReceiveBuffer              int64         // bytes; 0: the node's default; negative: off
}

// Resolve checks d and parses its values.
func (d Daemon) Resolve() (Resolved, error) {
	var r Resolved
	var err error
	if r.Root, err = filepath.Abs(d.Root); err != nil {
		return r, err
	}
	r.NodeRoot = filepath.Join(r.Root, "node")
	r.Socket = d.Socket
	switch d.SnapshotterSocket {
	case "":
		r.SnapshotterSocket = filepath.Join(filepath.Dir(d.Socket), "snapshotter.sock")
	case "off":
	default:
		r.SnapshotterSocket = d.SnapshotterSocket
	}
	if r.SnapshotterSocket != "" && r.SnapshotterSocket == r.Socket {
		return r, fmt.Errorf("snapshotter_socket %s: must differ from socket", d.SnapshotterSocket)
	}
	if d.Registry.DockerConfig != "" {
		if r.DockerConfig, err = filepath.Abs(d.Registry.DockerConfig); err != nil {
			return r, err
		}
		if filepath.Base(r.DockerConfig) != "config.json" {
			return r, fmt.Errorf("registry.docker_config %s: must be a file named config.json (as in ~/.docker)", d.Registry.DockerConfig)
		}
		if _, err := os.Stat(r.DockerConfig); err != nil {
			return r, fmt.Errorf("registry.docker_config: %w", err)
		}
	}
	r.InsecureRegistry = d.Registry.Insecure
	r.Store = d.Store
	if r.Store == "" {
		r.Store = filepath.Join(r.Root, "store")
	}
	if r.ChunkSize, err = blockMultiple("chunk_size", d.ChunkSize, 64<<20); err != nil {
		return r, err
	}
	if r.CacheBytes, err = units.ParseBytes(d.Cache.Size); err != nil {
		return r, fmt.Errorf("cache.size: %w", err)
	}
	if r.MemBytes, err = units.ParseBytes(d.Cache.Memory); err != nil {
		return r, fmt.Errorf("cache.memory: %w", err)
	}
	r.DirectIO = d.DirectIO == nil || *d.DirectIO
	switch d.Cache.Disk {
	case "", "auto":
		r.CacheDisk = "auto"
	case "on", "off":
		r.CacheDisk = d.Cache.Disk
	default:
		return r, fmt.Errorf("cache.disk %q: want auto, on or off", d.Cache.Disk)
	}
	r.FetchParallel = d.Fetch.Parallel
	if d.Fetch.Attempt != "" {
		if r.Attempt, err = time.ParseDuration(d.Fetch.Attempt); err != nil {
			return r, fmt.Errorf("fetch.attempt_timeout: %w", err)
		}
	}
	if d.Fetch.MaxWait != "" {
		if r.MaxWait, err = time.ParseDuration(d.Fetch.MaxWait); err != nil {
			return r, fmt.Errorf("fetch.max_wait: %w", err)
		}
	}
	if d.GC.LeaseInterval != "" {
		if r.LeaseInterval, err = time.ParseDuration(d.GC.LeaseInterval); err != nil || r.LeaseInterval <= 0 {
			return r, fmt.Errorf("gc.lease_interval %q: want a positive duration such as 1m", d.GC.LeaseInterval)
		}
	}
	if d.GC.LeaseTTL != "" {
		if r.LeaseTTL, err = time.ParseDuration(d.GC.LeaseTTL); err != nil || r.LeaseTTL <= 0 {
			return r, fmt.Errorf("gc.lease_ttl %q: want a positive duration such as 24h", d.GC.LeaseTTL)
		}
	}
	if d.GC.SnapshotHold != "" {
		if r.SnapshotHold, err = time.ParseDuration(d.GC.SnapshotHold); err != nil || r.SnapshotHold <= 0 {
			return r, fmt.Errorf("gc.snapshot_hold %q: want a positive duration such as 1h", d.GC.SnapshotHold)
		}
	}
	switch d.StartupTrace {
	case "":
	case "off":
		r.StartupWindow = -1
	default:
		if r.StartupWindow, err = time.ParseDuration(d.StartupTrace); err != nil || r.StartupWindow <= 0 {
			return r, fmt.Errorf("startup_trace %q: want a positive duration such as 30s, or off", d.StartupTrace)
		}
	}
	if r.LeaseInterval > 0 && r.LeaseTTL > 0 && r.LeaseTTL < 2*r.LeaseInterval {
		return r, fmt.Errorf("gc.lease_ttl %v must be at least twice gc.lease_interval %v", r.LeaseTTL, r.LeaseInterval)
	}
	if _, err := os.Stat(r.Root); err != nil && !os.IsNotExist(err) {
		return r, err
	}
	switch d.LocalImages {
	case "":
		r.LocalImageBytes = DefaultLocalImageBytes
	case "off":
	default:
		if r.LocalImageBytes, err = units.ParseBytes(d.LocalImages); err != nil || r.LocalImageBytes <= 0 {
			return r, fmt.Errorf("local_images %q: want a size such as 16GiB, or off", d.LocalImages)
		}
	}
	r.MetricsAddress = d.MetricsAddress // checked when slackerd listens (metrics.Listen)
	switch d.LocalImageFormat {
	case "", "tree", "ext4":
		r.LocalImageFormat = d.LocalImageFormat
	default:
		return r, fmt.Errorf("local_image_format %q: want \"tree\" (the default) or \"ext4\"", d.LocalImageFormat)
	}
	switch d.ImageRootLinger {
	case "":
		r.ImageRootLinger = DefaultImageRootLinger
	case "off":
	default:
		if r.ImageRootLinger, err = time.ParseDuration(d.ImageRootLinger); err != nil || r.ImageRootLinger <= 0 {
			return r, fmt.Errorf("image_root_linger %q: want a positive duration such as 5m, or off", d.ImageRootLinger)
		}
	}
	if d.VolumeReadahead != "" {
		if r.VolumeReadahead, err = blockMultiple("volume_readahead", d.VolumeReadahead, 16<<20); err != nil {
			return r, err
		}
	}
	switch d.StartupReadahead {
	case "":
	case "off":
		r.StartupReadahead = -1
	default:
		if r.StartupReadahead, err = blockMultiple("startup_readahead", d.StartupReadahead, 16<<20); err != nil {
			return r, fmt.Errorf("%w, or off", err)
		}
	}
	switch d.ReplayReadahead {
	case "":
	case "off":
		r.ReplayReadahead = -1
	default:
		if r.ReplayReadahead, err = blockMultiple("replay_readahead", d.ReplayReadahead, 16<<20); err != nil {
			return r, fmt.Errorf("%w, or off", err)
		}
	}
	if d.StartupChunkSize != "" {
		if r.StartupChunkSize, err = blockMultiple("startup_chunk_size", d.StartupChunkSize, 64<<20); err != nil {
			return r, err
		}
	}
	switch d.StoreReceiveBuffer {
	case "":
	case "off":
		r.StoreReceiveBuffer = -1
	default:
		if r.StoreReceiveBuffer, err = units.ParseBytes(d.StoreReceiveBuffer); err != nil ||
			r.StoreReceiveBuffer < transport.MinReceiveBuffer || r.StoreReceiveBuffer > transport.MaxReceiveBuffer {
			return r, fmt.Errorf("store_receive_buffer %q: want a size between %dKiB and %dMiB, or off",
				d.StoreReceiveBuffer, transport.MinReceiveBuffer>>10, transport.MaxReceiveBuffer>>20)
		}
	}
	switch d.FirstStartReadahead {
	case "":
	case "off":
		r.FirstStartReadahead = -1
	default:
		if r.FirstStartReadahead, err = units.ParseBytes(d.FirstStartReadahead); err != nil || r.FirstStartReadahead <= 0 || r.FirstStartReadahead > 64<<20 {
			return r, fmt.Errorf("first_start_readahead %q: want a size up to 64MiB such as 1MiB, or off", d.FirstStartReadahead)
		}
	}
	switch d.FUSEHold {
	case "":
		r.FUSEHold = DefaultFUSEHold
	case "off":
	default:
		if r.FUSEHold, err = time.ParseDuration(d.FUSEHold); err != nil || r.FUSEHold <= 0 {
			return r, fmt.Errorf("fuse_hold %q: want a positive duration such as 1m, or off", d.FUSEHold)
		}
	}
	switch d.ContainerRoot {
	case "", "shared":
		r.ContainerRoot = "shared"
	case "block":
		r.ContainerRoot = "block"
	default:
		return r, fmt.Errorf("container_root %q: want \"shared\" or \"block\"", d.ContainerRoot)
	}
	return r, nil
}

// blockMultiple parses value, the setting key, as a size that is a multiple of
// 4KiB between 4KiB and most bytes (a whole number of MiB).
func blockMultiple(key, value string, most int64) (int64, error) {
	n, err := units.ParseBytes(value)
	if err != nil || n < 4096 || n%4096 != 0 || n > most {
		return 0, fmt.Errorf("%s %q: want a multiple of 4KiB between 4KiB and %dMiB", key, value, most>>20)
	}
	return n, nil
}
