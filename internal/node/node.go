package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/opencontainers/go-digest"
	"golang.org/x/sys/unix"

	"github.com/slacker-dev/slacker/internal/atomicfile"
	"github.com/slacker-dev/slacker/internal/blockmap"
	"github.com/slacker-dev/slacker/internal/cache"
	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/ext4meta"
	"github.com/slacker-dev/slacker/internal/fetch"
	"github.com/slacker-dev/slacker/internal/fusefs"
	"github.com/slacker-dev/slacker/internal/fuseholder"
	"github.com/slacker-dev/slacker/internal/labels"
	"github.com/slacker-dev/slacker/internal/mount"
	"github.com/slacker-dev/slacker/internal/prefetch"
	"github.com/slacker-dev/slacker/internal/store"
	"github.com/slacker-dev/slacker/internal/volume"
)

// Config configures a node.
type Config struct {
	Root          string        // node state directory
	Store         store.Store   // where snapshots live
	CacheBytes    int64         // disk bound of the chunk cache (default 10 GiB)
	CacheMemBytes int64         // memory tier of the chunk cache (default 64 MiB)
	CacheNoDisk   bool          // no disk tier (the store is a local directory)
	ChunkSize     int64         // largest chunk cut by snapshots (default volume.DefaultChunkSize)
	DefaultSize   int64         // virtual size of blank filesystems (default 10 GiB)
	NoDirectIO    bool          // loop devices without O_DIRECT (the backing file gets a page cache)
	Fetch         fetch.Options // Fetch.Observe sees every store request
	// ObserveFUSE, if set, is told of every read, write, fsync and zero of a
	// volume file (fusefs.Options.Observe).
	ObserveFUSE func(op string, took time.Duration, err error)
	Lease       LeaseConfig // the node's lease in the store (garbage collection)
	// Holder, if set, returns a client of the process that keeps the node's FUSE
	// connection for the next slackerd (package fuseholder), started if need be:
	// Open takes the connection over from it if it has one, or hands it a new
	// one. Nil: no holder; a slackerd that dies ends its containers' I/O.
	Holder func(ctx context.Context) (*fuseholder.Client, error)
	// RootMode is how container roots (volumes made with CreateOptions.Startup)
	// are made when their CreateOptions.Mode is empty (RootShared).
	RootMode RootMode
	// LocalImageBytes bounds the disk of the node's local images (localimage.go):
	// whole copies of snapshots whose chunks are all on the node, which image roots
	// are read through by the kernel. 0: none; the image roots are then all read
	// through this process.
	LocalImageBytes int64
	// LocalImageFormat is how local images are kept: LocalTree (the snapshot's
	// files in a directory that is the image root: no loop device, ext4 or FUSE)
	// or LocalExt4 (the snapshot's bytes, read through FUSE passthrough). Empty:
	// LocalTree.
	LocalImageFormat LocalImageFormat
	// ImageRootLinger is how long an image root no container uses stays mounted,
	// its page cache kept for the image's next container (0: it goes with its last
	// container). It goes sooner when its local image is written, or on DropCaches.
	ImageRootLinger time.Duration
	// PrepareHold is how long a root PrepareImage mounted waits for its container
	// before it lingers as an idle root (default DefaultPrepareHold).
	PrepareHold time.Duration
	// VolumeReadahead is set as the readahead of every loop device this node
	// mounts a volume from (bytes): how far the filesystem on it reads ahead of
	// what is asked, and so what a lazily read volume fetches for it. 0:
	// DefaultVolumeReadahead. (It is always set: a loop device keeps the readahead
	// its previous user left, 2.5 MiB on some here.)
	VolumeReadahead int64
	// StartupReadahead is the readahead of a start's volume (an image root made
	// for a container, a block clone) from its mount until its start-up window
	// closes, when its chunks come from a remote store (startupreadahead.go): 0
	// DefaultStartupReadahead; negative: VolumeReadahead throughout. A local
	// store's volumes read ahead VolumeReadahead always.
	StartupReadahead int64
	// ReplayReadahead is the readahead of a start's volume, within its start-up
	// window, from when the start begins to replay its image's trace
	// (startupreadahead.go): 0 DefaultReplayReadahead; negative:
	// StartupReadahead throughout the window. Only where StartupReadahead
	// applies.
	ReplayReadahead int64
	// FirstStartReadahead is what a start loads after each of its reads of an
	// image that has no start-up trace to replay (prefetch.Options.FirstStartAhead:
	// 0 its default, negative nothing, nor the loads of its inode tables).
	FirstStartReadahead int64
	// StartupChunkSize is the largest chunk LayoutStartup gathers start-up data
	// into (0: DefaultStartupChunkSize).
	StartupChunkSize int64
	// StartupWindow is how long a container volume's reads are recorded as its
	// image's start-up trace (0: prefetch.DefaultStartupWindow; negative: no traces are
	// recorded or replayed).
	StartupWindow time.Duration
	Logger        *slog.Logger
}

// Record is the node's record of a volume (volumes/<id>/node.json).
type Record struct {
	ID       string            `json:"id"`
	Labels   map[string]string `json:"labels,omitempty"`
	Mounted  bool              `json:"mounted"`
	ReadOnly bool              `json:"read_only,omitempty"`
	// Mode is RootShared for a shared root (the overlay of a container over its
	// image's root, Image), empty for a block volume.
	Mode  RootMode      `json:"mode,omitempty"`
	Image digest.Digest `json:"image,omitempty"`
	// Parent is the shared root a shared root stands on (CreateOptions.Parent).
	Parent  string    `json:"parent,omitempty"`
	Created time.Time `json:"created"`
}

// VolumeInfo describes a volume.
type VolumeInfo struct {
	Record
	Base       digest.Digest `json:"base,omitempty"`
	Size       int64         `json:"size"`
	Mountpoint string        `json:"mountpoint,omitempty"`
	Device     string        `json:"device,omitempty"`
	File       string        `json:"file"`
	// Upper and Lowers, for a shared root: its upper layer (its own changes,
	// overlayfs's upperdir) and the directories under it, nearest first (the upper
	// layers of the roots it stands on, then the image root's mountpoint): what
	// a reader of its changes compares them with, without mounting anything.
	Upper  string   `json:"upper,omitempty"`
	Lowers []string `json:"lowers,omitempty"`
	// Idle, for an image root: no container root stands on it; it lingers for
	// the image's next container (Config.ImageRootLinger) and then goes.
	Idle  bool        `json:"idle,omitempty"`
	Stats VolumeStats `json:"stats"`
}

// VolumeStats are a volume's counters: its guest's reads and writes and its delta
// (package volume), and what its reads of the base read and moved (package prefetch).
type VolumeStats struct {
	volume.Stats
	prefetch.ReadStats
}

// Node is safe for concurrent use.
type Node struct {
	cfg      Config
	log      *slog.Logger
	fetcher  *fetch.Fetcher
	cache    *cache.Cache
	prefetch *prefetch.Engine
	fs       *fusefs.FS
	lease    *leaser // nil if the store keeps no records

	mapsMu sync.Mutex
	maps   map[digest.Digest]*blockmap.Map

	mu   sync.Mutex
	vols map[string]*vol

	imagesMu sync.Mutex
	images   map[digest.Digest]*imageRoot // read-only image mounts of shared roots

	overlayOnce sync.Once
	overlayErr  error // why this node cannot make shared roots

	local *localImages // nil without Config.LocalImageBytes
	// localStore: the store is a directory on this node (cache.ObjectFiles),
	// whose chunks a read takes in place, without a fetch.
	localStore bool

	holder *fuseholder.Client // keeps the FUSE connection for the next slackerd; nil without one
	adopt  *adoption          // what Open found in place, taking the node over

	closing atomic.Bool // Close has begun: image roots no longer linger
	// preparing counts PrepareImage's mounts, CarryMap's store checks and
	// WarmStore's requests under way, which Close waits for; prepareMu orders
	// their start against Close's.
	prepareMu sync.Mutex
	preparing sync.WaitGroup
	warming   atomic.Bool // WarmStore's connections are being opened
}

type vol struct {
	mu sync.Mutex       // serializes mount, unmount, snapshot, delete
	v  *volume.Volume   // nil for a shared root
	r  *prefetch.Reader // reads v's base and fetches ahead of it
	// shared is what a shared root (RootShared) has instead of v and r.
	shared *sharedRoot
	rec    Record
	dev    string // loop device while mounted
	mnt    string
	file   string // FUSE file
	gone   bool
	// files, for a volume made for a start (a block root, an image root),
	// records the files the start opens on its mount and warms the mount from a
	// replayed trace's (startupfiles.go); nil otherwise.
	files *rootFiles
	// startupRA, while a start's volume reads ahead StartupReadahead, restores
	// the volume readahead when the start-up window closes (startupreadahead.go).
	startupRA *time.Timer
}

var idPattern = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}$`)

// Open opens the node at cfg.Root, reconciling what a previous run left behind.
func Open(ctx context.Context, cfg Config) (*Node, error) {
	if cfg.Root == "" || cfg.Store == nil {
		return nil, fmt.Errorf("open node: root and store are required")
	}
	root, err := filepath.Abs(cfg.Root)
	if err != nil {
		return nil, err
	}
	cfg.Root = root
	if cfg.CacheBytes <= 0 {
		cfg.CacheBytes = 10 << 30
	}
	if cfg.ChunkSize <= 0 {
		cfg.ChunkSize = volume.DefaultChunkSize
	}
	if cfg.DefaultSize <= 0 {
		cfg.DefaultSize = 10 << 30
	}
	if cfg.PrepareHold <= 0 {
		cfg.PrepareHold = DefaultPrepareHold
	}
	if cfg.RootMode == "" {
		cfg.RootMode = RootShared
	}
	if _, err := ParseRootMode(string(cfg.RootMode)); err != nil {
		return nil, fmt.Errorf("open node: %w", err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("open node: slackerd must run as root (it mounts FUSE, loop devices and ext4)")
	}
	n := &Node{cfg: cfg, log: log, maps: map[digest.Digest]*blockmap.Map{}, vols: map[string]*vol{},
		images: map[digest.Digest]*imageRoot{}}
	for _, d := range []string{"volumes", "maps", "cache", "mnt"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o700); err != nil {
			return nil, fmt.Errorf("open node: %w", err)
		}
	}
	fopts := cfg.Fetch
	fopts.Logger = log
	n.fetcher = fetch.New(cfg.Store, fopts)
	copts := cache.Options{Dir: filepath.Join(root, "cache"), MaxBytes: cfg.CacheBytes,
		MemBytes: cfg.CacheMemBytes, NoDisk: cfg.CacheNoDisk, Logger: log}
	if of, ok := cfg.Store.(cache.ObjectFiles); ok { // a local directory: reads of a few blocks go to its files
		copts.StoreFiles = of
		n.localStore = true
	}
	n.cache, err = cache.Open(copts, n.fetcher)
	if err != nil {
		return nil, fmt.Errorf("open node: %w", err)
	}
	popts := prefetch.Options{StartupWindow: cfg.StartupWindow, ReplayBudget: n.replayBudget(),
		FirstStartAhead: cfg.FirstStartReadahead, StoreRoundTrip: n.fetcher.RoundTrip, Logger: log}
	if !n.localStore && cfg.FirstStartReadahead >= 0 {
		// A first start fetches the image's inode tables in use as it begins,
		// from a store 5 ms or more away (docs/design.md, "A first start loads
		// the inode tables"); first_start_readahead = "off" turns both off.
		popts.FirstStartRanges = inodeTables
	}
	if refs, ok := cfg.Store.(store.Refs); ok {
		popts.Traces = refs
	}
	n.prefetch = prefetch.New(n.cache, popts)
	// The FUSE connection first (a dead FUSE mount left by a crash fails even a
	// stat, so reconciliation comes before anything looks under the root): taken
	// over, or new (takeover.go).
	if err := n.openFUSE(ctx, fusefs.Options{Logger: log, PageCache: cfg.NoDirectIO, Observe: cfg.ObserveFUSE}); err != nil {
		if n.holder != nil {
			n.holder.Close()
		}
		return nil, err
	}
	fail := func(err error) (*Node, error) {
		if n.Resumed() {
			// Taking over: the containers' mounts stay for the next attempt, the
			// connection with the holder, which waits for it (fuse_hold).
			n.log.Error("takeover-failed", "err", err)
			n.holder.Close()
			return nil, err
		}
		n.Close(ctx)
		return nil, err
	}
	if cfg.LocalImageBytes > 0 {
		// Taking over, the local images the containers' roots stand on stay.
		if n.local, err = newLocalImages(filepath.Join(root, "images"), cfg.LocalImageBytes, cfg.LocalImageFormat, n.adopt != nil); err != nil {
			return fail(fmt.Errorf("open node: %w", err))
		}
	}
	if err := n.loadVolumes(ctx); err != nil {
		return fail(err)
	}
	if n.lease, err = startLeaser(n); err != nil {
		return fail(err)
	}
	return n, nil
}

// reconcile tears down mounts and loop devices left under the root by a previous
// process (normally one that crashed).
func (n *Node) reconcile() error {
	mounts, err := mount.Mounts(n.cfg.Root)
	if err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	for _, m := range mounts {
		if m.FSType == "ext4" && thawLeftFrozen(m.Target) {
			// A daemon killed in the middle of a snapshot leaves its filesystem
			// frozen; unmounted frozen, it would hold its loop device for good.
			n.log.Warn("reconcile-thawed", "target", m.Target)
		}
		lazy, err := mount.Unmount(m.Target, 2*time.Second)
		if err != nil {
			return fmt.Errorf("reconcile: %w", err)
		}
		n.log.Warn("reconcile-unmounted", "target", m.Target, "fstype", m.FSType, "source", m.Source, "lazy", lazy)
	}
	loops, err := mount.ListLoops()
	if err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	fuseDir := filepath.Join(n.cfg.Root, "fuse") + "/"
	for _, l := range loops {
		if strings.HasPrefix(l.BackingFile, fuseDir) {
			if err := mount.DetachLoop(l.Path); err != nil {
				return fmt.Errorf("reconcile: %w", err)
			}
			n.log.Warn("reconcile-detached-loop", "device", l.Path, "file", l.BackingFile)
		}
	}
	return nil
}

// ioctlFITHAW is FITHAW from linux/fs.h: _IOWR('X', 120, int).
const ioctlFITHAW = 0xC0045878

// thawLeftFrozen thaws the filesystem mounted at target and reports whether it was
// frozen.
func thawLeftFrozen(target string) bool {
	f, err := os.Open(target)
	if err != nil {
		return false
	}
	defer f.Close()
	return unix.IoctlSetInt(int(f.Fd()), ioctlFITHAW, 0) == nil
}

func (n *Node) loadVolumes(ctx context.Context) error {
	ents, err := os.ReadDir(filepath.Join(n.cfg.Root, "volumes"))
	if err != nil {
		return fmt.Errorf("load volumes: %w", err)
	}
	var shared []Record // loaded once the image roots they stand on are back
	var mounted []*vol  // block volumes to mount once all are added
	for _, e := range ents {
		id := e.Name()
		dir := n.volDir(id)
		if strings.HasSuffix(id, ".deleting") {
			os.RemoveAll(dir) // a delete interrupted by a crash
			continue
		}
		rec, err := readRecord(dir)
		if err != nil {
			n.log.Error("volume-unreadable", "volume", id, "err", err)
			continue
		}
		if rec.Mode == RootShared {
			shared = append(shared, rec)
			continue
		}
		meta, err := volume.ReadMeta(dir)
		if err != nil {
			n.log.Error("volume-unreadable", "volume", id, "err", err)
			continue
		}
		var base *blockmap.Map
		if meta.Base != "" {
			if base, err = n.Map(ctx, meta.Base); err != nil {
				n.log.Error("volume-base-unavailable", "volume", id, "snapshot", meta.Base, "err", err)
				continue
			}
		}
		r := n.baseReader(id, base)
		v, err := volume.Open(dir, base, r)
		if err != nil {
			r.Close()
			n.log.Error("volume-unreadable", "volume", id, "err", err)
			continue
		}
		x := &vol{v: v, r: r, rec: rec}
		if x.file, err = n.fs.Add(id, v, fusefs.FileOptions{Generation: uint64(rec.Created.UnixNano())}); err != nil {
			v.Close()
			return err
		}
		n.vols[id] = x
		if rec.Mounted {
			mounted = append(mounted, x)
		}
	}
	// Every volume file is there: a connection taken over is served from now on
	// (the requests the previous process left unanswered come again), and the
	// mounts made over it are adopted, or made.
	n.fs.Serve()
	for _, x := range mounted {
		if n.adoptLocked(x) {
			continue
		}
		if err := n.mountLocked(x, x.rec.ReadOnly); err != nil {
			n.log.Error("volume-remount-failed", "volume", x.rec.ID, "err", err)
			continue
		}
		n.log.Info("volume-remounted", "volume", x.rec.ID, "mountpoint", x.mnt)
	}
	// Parents before the roots that stand on them.
	for len(shared) > 0 {
		var later []Record
		for _, rec := range shared {
			if rec.Parent != "" && slices.ContainsFunc(shared, func(r Record) bool { return r.ID == rec.Parent }) {
				later = append(later, rec)
				continue
			}
			if err := n.loadShared(ctx, rec); err != nil {
				n.log.Error("volume-remount-failed", "volume", rec.ID, "mode", RootShared, "err", err)
			}
		}
		if len(later) == len(shared) { // a cycle: records written by hand
			for _, rec := range later {
				n.log.Error("volume-unreadable", "volume", rec.ID, "err", "its parents form a cycle")
			}
			break
		}
		shared = later
	}
	// An image root no shared root uses (a crash came between the last one's
	// delete and the root's) goes, and so does a clone a local image was being
	// copied from (local images do not outlive the slackerd that made them).
	for id, x := range n.vols {
		kind := x.rec.Labels[labels.Kind]
		if kind != labels.KindImageRoot && kind != labels.KindLocalImage {
			continue
		}
		if ir := n.images[x.v.Meta().Base]; kind == labels.KindLocalImage || ir == nil || ir.users == 0 {
			if err := n.DeleteVolume(ctx, id); err != nil {
				n.log.Warn("volume-delete-failed", "volume", id, "err", err)
			}
		}
	}
	return nil
}

func (n *Node) volDir(id string) string { return filepath.Join(n.cfg.Root, "volumes", id) }

func readRecord(dir string) (Record, error) {
	var r Record
	b, err := os.ReadFile(filepath.Join(dir, "node.json"))
	if err != nil {
		return r, err
	}
	return r, json.Unmarshal(b, &r)
}

func writeRecord(dir string, r Record) error { return writeRecordWith(atomicfile.Writer{}, dir, r) }

// mountedRecords replace a volume's record when it is mounted: atomically (the old
// record or the new one, never a torn one) but without an fsync. The flag says
// which volumes a restarted slackerd mounts again; a process crash keeps the page
// cache, and a power cut, which could lose the new record, unmounts everything
// anyway (the volume is then found unmounted, its data as synced). The fsync sat
// on every start's path, waiting for a journal commit that flushes the cache
// writes of the start under way: 5-15 ms per mount at 1 Gbit/s, two mounts per
// start of a shared root (its image's and its own).
var mountedRecords = atomicfile.Writer{NoSync: true}

func writeRecordWith(w atomicfile.Writer, dir string, r Record) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return w.WriteFile(filepath.Join(dir, "node.json"), b, 0o600)
}

// mapFiles writes the block maps the node keeps (maps/): replaced atomically,
// never fsynced (each is verified against its ID whenever it is read).
var mapFiles = atomicfile.Writer{NoSync: true}

// Map returns the decoded block map of snapshot id, from the node's map directory or
// the store. Every map is verified against its ID.
func (n *Node) Map(ctx context.Context, id digest.Digest) (*blockmap.Map, error) {
	m, _, err := n.mapOf(ctx, id)
	return m, err
}

// StoredMap is Map for a snapshot that must still be in the store (a pull): a map
// the node kept is checked against the store (the snapshot may have been collected
// since), a map just fetched from the store is not asked about again. Over a link
// with a 20 ms round trip the check is 20 ms of every first pull otherwise. The
// snapshot's start-up trace is fetched meanwhile, for the start that follows a
// pull (FetchTraceAhead).
func (n *Node) StoredMap(ctx context.Context, id digest.Digest) (*blockmap.Map, error) {
	n.FetchTraceAhead(id)
	m, fetched, err := n.mapOf(ctx, id)
	if err != nil || fetched {
		return m, err
	}
	ok, err := n.Stored(ctx, id)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("snapshot %s is no longer in the store (garbage collected?): %w", id, errdefs.ErrNotFound)
	}
	return m, nil
}

// mapOf is Map, and whether the map was fetched from the store by this call.
func (n *Node) mapOf(ctx context.Context, id digest.Digest) (*blockmap.Map, bool, error) {
	if err := store.CheckDigest(id); err != nil {
		return nil, false, fmt.Errorf("snapshot %q: %w", id, errdefs.ErrInvalid)
	}
	n.mapsMu.Lock()
	m, ok := n.maps[id]
	n.mapsMu.Unlock()
	if ok {
		return m, false, nil
	}
	path := filepath.Join(n.cfg.Root, "maps", id.Encoded())
	b, err := os.ReadFile(path)
	fetched := false
	if err != nil || store.Verify(id, b) != nil {
		b, err = n.fetcher.Object(ctx, id)
		if errors.Is(err, errdefs.ErrNotFound) {
			return nil, false, fmt.Errorf("snapshot %s is not in the store: %w", id, errdefs.ErrNotFound)
		}
		if err != nil {
			return nil, false, fmt.Errorf("fetch snapshot %s: %w", id, err)
		}
		fetched = true
		// Kept for the next start (and a restart while the store is away); a
		// failed write only means fetching it again. Not fsynced: a file a crash
		// tore fails the check above and is fetched again, so an fsync of the file
		// and its directory would buy nothing for its cost on every first use.
		mapFiles.WriteFile(path, b, 0o600)
	}
	m, err = blockmap.Decode(b)
	if err != nil {
		return nil, false, fmt.Errorf("snapshot %s: %w", id, err)
	}
	n.mapsMu.Lock()
	n.maps[id] = m
	n.mapsMu.Unlock()
	return m, fetched, nil
}

// CreateOptions configure CreateVolume.
type CreateOptions struct {
	ID       string            // empty: a random ID
	Snapshot digest.Digest     // base; empty for a blank volume
	Size     int64             // 0: the base's size (or DefaultSize if blank)
	Labels   map[string]string //
	// Startup marks a container's root: the store's start-up trace of Snapshot is
	// replayed (its chunks prefetched) and, if there is none, one is recorded from
	// this volume's reads (package trace).
	Startup bool
	// StartupFallback are snapshots whose traces are replayed, the first found, when
	// Snapshot has none yet (its image's earlier layers, newest first: a commit
	// changes little of what start-up reads).
	StartupFallback []digest.Digest
	// Mode is how the volume is made from Snapshot: RootBlock (a block-level
	// clone), RootShared (an overlay over the node's read-only mount of Snapshot),
	// or empty: the node's Config.RootMode for a container's root (Startup), a
	// block clone otherwise.
	Mode RootMode
	// Parent, for a shared root, is another shared root of Snapshot it stands on:
	// the parent's upper layer lies under its own (Docker's init layer under a
	// container's). A parent cannot be deleted while a root stands on it.
	Parent string

	// backing is the local image an image root is read through (passthrough).
	backing *os.File
}

func randomID() string {
	b := make([]byte, 12)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// CreateVolume clones a snapshot (or makes a blank volume) in O(1).
func (n *Node) CreateVolume(ctx context.Context, opts CreateOptions) (VolumeInfo, error) {
	id := opts.ID
	if id == "" {
		id = randomID()
	}
	if !idPattern.MatchString(id) || strings.HasSuffix(id, ".deleting") {
		return VolumeInfo{}, fmt.Errorf("volume ID %q: %w: use letters, digits, '_', '.', '-'", id, errdefs.ErrInvalid)
	}
	mode, err := ParseRootMode(string(opts.Mode))
	if err != nil {
		return VolumeInfo{}, err
	}
	if mode == "" {
		mode = RootBlock
		if opts.Startup && opts.Snapshot != "" {
			mode = n.cfg.RootMode
		}
	}
	if mode == RootShared {
		return n.createShared(ctx, id, opts)
	}
	var base *blockmap.Map
	size := opts.Size
	if opts.Snapshot != "" {
		var err error
		if base, err = n.Map(ctx, opts.Snapshot); err != nil {
			return VolumeInfo{}, err
		}
		if size == 0 {
			size = base.Size
		}
	} else if size == 0 {
		size = n.cfg.DefaultSize
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.vols[id]; ok {
		return VolumeInfo{}, fmt.Errorf("volume %s: %w", id, errdefs.ErrExists)
	}
	dir := n.volDir(id)
	r := n.baseReader(id, base)
	v, err := volume.Create(dir, opts.Snapshot, base, size, r)
	if err != nil {
		r.Close()
		if errors.Is(err, os.ErrExist) {
			return VolumeInfo{}, fmt.Errorf("volume %s: %w", id, errdefs.ErrExists)
		}
		return VolumeInfo{}, fmt.Errorf("%w: %v", errdefs.ErrInvalid, err)
	}
	rec := Record{ID: id, Labels: opts.Labels, Created: time.Now().UTC()}
	if err := writeRecord(dir, rec); err != nil {
		r.Close()
		v.Delete()
		return VolumeInfo{}, fmt.Errorf("create volume %s: %w", id, err)
	}
	x := &vol{v: v, r: r, rec: rec}
	if x.file, err = n.fs.Add(id, v, fusefs.FileOptions{Generation: uint64(rec.Created.UnixNano()), Backing: opts.backing}); err != nil {
		r.Close()
		v.Delete()
		return VolumeInfo{}, err
	}
	n.vols[id] = x
	if opts.Startup {
		x.files = newRootFiles(n.log.With("volume", id, "snapshot", opts.Snapshot), func() { n.replayReadahead(x) })
		r.BeginStartup(opts.Snapshot, opts.StartupFallback, x.files)
	}
	n.lease.poke()
	n.log.Info("volume-created", "volume", id, "snapshot", opts.Snapshot, "size", size, "startup", opts.Startup)
	return x.info(), nil
}

func (x *vol) info() VolumeInfo {
	if sr := x.shared; sr != nil {
		// A shared root reads its image through the image root, which every
		// container of the image shares: its read counters are the image's.
		info := VolumeInfo{Record: x.rec, Base: sr.image, Mountpoint: x.mnt}
		if ix := sr.root.volume(); ix != nil {
			info.Size, info.Stats.ReadStats = ix.v.Size(), ix.r.Stats()
		}
		info.Stats.DeltaBytes = upperBytes(sr.upper)
		info.Upper, info.Lowers = sr.upper, sr.lowers()
		if l := sr.root.lower(); l != "" {
			info.Lowers = append(info.Lowers, l)
		}
		return info
	}
	m := x.v.Meta()
	return VolumeInfo{Record: x.rec, Base: m.Base, Size: m.Size, Mountpoint: x.mnt, Device: x.dev,
		File: x.file, Stats: VolumeStats{Stats: x.v.Stats(), ReadStats: x.r.Stats()}}
}

// baseReader returns the reader of volume id's base snapshot (nil: a blank volume).
func (n *Node) baseReader(id string, base *blockmap.Map) *prefetch.Reader {
	return n.prefetch.Open(id, base)
}

func (n *Node) get(id string) (*vol, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	x, ok := n.vols[id]
	if !ok {
		return nil, fmt.Errorf("volume %s: %w", id, errdefs.ErrNotFound)
	}
	return x, nil
}

// Volume describes one volume.
func (n *Node) Volume(id string) (VolumeInfo, error) {
	x, err := n.get(id)
	if err != nil {
		return VolumeInfo{}, err
	}
	x.mu.Lock()
	info := x.info()
	x.mu.Unlock()
	n.markIdle(&info)
	return info, nil
}

// markIdle sets info.Idle when info is an image root no shared root stands on
// and none is expected (PrepareImage), or the clone a local image is being
// copied from (no container's either).
func (n *Node) markIdle(info *VolumeInfo) {
	switch info.Labels[labels.Kind] {
	case labels.KindLocalImage:
		info.Idle = true
		return
	case labels.KindImageRoot:
		if n.imageHeld(info.Base) {
			return
		}
	default:
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, y := range n.vols {
		if y.shared != nil && y.shared.image == info.Base {
			return
		}
	}
	info.Idle = true
}

// allVols returns the node's volumes at this moment.
func (n *Node) allVols() []*vol {
	n.mu.Lock()
	defer n.mu.Unlock()
	xs := make([]*vol, 0, len(n.vols))
	for _, x := range n.vols {
		xs = append(xs, x)
	}
	return xs
}

// Volumes lists every volume, sorted by creation time.
func (n *Node) Volumes() []VolumeInfo {
	xs := n.allVols()
	out := make([]VolumeInfo, 0, len(xs))
	for _, x := range xs {
		x.mu.Lock()
		out = append(out, x.info())
		x.mu.Unlock()
		n.markIdle(&out[len(out)-1])
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.Before(out[j].Created) })
	return out
}

// MountVolume attaches the volume to a loop device and mounts its ext4 filesystem.
// Mounting a mounted volume returns its mountpoint.
func (n *Node) MountVolume(ctx context.Context, id string, readOnly bool) (VolumeInfo, error) {
	x, err := n.get(id)
	if err != nil {
		return VolumeInfo{}, err
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.gone {
		return VolumeInfo{}, fmt.Errorf("volume %s: %w", id, errdefs.ErrNotFound)
	}
	if x.mnt != "" {
		return x.info(), nil
	}
	if err := n.mountLocked(x, readOnly); err != nil {
		return VolumeInfo{}, err
	}
	x.rec.Mounted, x.rec.ReadOnly = true, readOnly
	if err := writeRecordWith(mountedRecords, n.volDir(id), x.rec); err != nil {
		n.unmountLocked(x)
		return VolumeInfo{}, fmt.Errorf("mount volume %s: %w", id, err)
	}
	return x.info(), nil
}

// DefaultStartupChunkSize is the largest chunk a start-up layout gathers into
// unless Config.StartupChunkSize says: four of the default chunk size, so that a
// replay of a re-laid image makes a quarter of the requests (docs/design.md,
// "Start-up layout").
const DefaultStartupChunkSize = 1 << 20

// DefaultVolumeReadahead is a volume's loop device's readahead unless
// Config.VolumeReadahead says. A first start of an image with no trace fetches
// what the guest asks for as it asks: 1 MiB reads of a program's pages fetch
// four chunks at once where 128 KiB reads (the kernel's usual default) wait for
// each in turn, so HelloBench's first runs at 1 Gbit/s ran faster
// (docs/design.md, "The guest's readahead").
const DefaultVolumeReadahead = 1 << 20

func (n *Node) mountLocked(x *vol, readOnly bool) error {
	if x.shared != nil {
		return n.mountSharedLocked(x, readOnly)
	}
	start := time.Now()
	loop, err := mount.AttachLoop(x.file, mount.LoopOptions{ReadOnly: readOnly, DirectIO: !n.cfg.NoDirectIO, Autoclear: true})
	if err != nil {
		return fmt.Errorf("mount volume %s: %w", x.rec.ID, err)
	}
	defer loop.Close() // the mount holds the device; autoclear frees it on unmount
	if err := loop.SetReadahead(n.volumeReadahead()); err != nil {
		return fmt.Errorf("mount volume %s: %w", x.rec.ID, err)
	}
	mnt := filepath.Join(n.cfg.Root, "mnt", x.rec.ID)
	if err := mount.MountExt4(loop.Path, mnt, readOnly, ""); err != nil {
		return fmt.Errorf("mount volume %s: %w (is it a formatted ext4 volume?)", x.rec.ID, err)
	}
	x.dev, x.mnt = loop.Path, mnt
	n.log.Info("volume-mounted", "volume", x.rec.ID, "device", loop.Path, "mountpoint", mnt, "read_only", readOnly,
		"took", time.Since(start))
	if x.files != nil { // made for a start: lean reads while it starts, its files recorded or warmed
		n.beginStartupReadaheadLocked(x, loop)
		x.files.mountedAt(mnt)
	}
	return nil
}

// UnmountVolume unmounts the volume's filesystem and detaches its loop device.
func (n *Node) UnmountVolume(ctx context.Context, id string) error {
	x, err := n.get(id)
	if err != nil {
		return err
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if err := n.flushLocked(x); err != nil {
		return err
	}
	if err := n.unmountLocked(x); err != nil {
		return err
	}
	x.rec.Mounted = false
	return writeRecord(n.volDir(id), x.rec)
}

// flushLocked writes a mounted read-write volume's filesystem whole to the volume
// before an unmount whose volume is kept, and fails if the filesystem lost writes.
// Unmounting alone ensures neither. A mount namespace made while the volume was
// mounted (a container starting, any unshare) holds its own copy of the mount, and
// while anything there keeps that copy busy, unmounting ours returns without
// shutting the filesystem down, its writes still unwritten, for as long as the copy
// lives (a lazy unmount after EBUSY does the same); and a write the kernel fails to
// write back when the filesystem is shut down (the volume's delta could not be
// written: its disk is full) is only logged by the kernel. Either way a snapshot
// taken then silently misses writes, every chunk sound: a converted image without
// its files. syncfs writes everything back and reports a writeback error since the
// mount that nobody has seen (the kernel keeps one per filesystem); FIFREEZE then
// FITHAW checkpoint the journal; a filesystem that went read-only after errors is
// an error too.
func (n *Node) flushLocked(x *vol) error {
	if x.shared != nil {
		return n.flushSharedLocked(x)
	}
	if x.mnt == "" || x.rec.ReadOnly {
		return nil
	}
	fail := func(err error) error {
		return fmt.Errorf("unmount volume %s: flush its filesystem: %w", x.rec.ID, err)
	}
	n.trimLocked(x)
	f, err := os.Open(x.mnt)
	if err != nil {
		return fail(err)
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		return fail(fmt.Errorf("writes to it were lost: %w", err))
	}
	thaw, err := mount.Freeze(x.mnt)
	if err != nil {
		return fail(err)
	}
	if err := thaw(); err != nil {
		return fail(err)
	}
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &st); err != nil {
		return fail(err)
	}
	if st.Flags&unix.ST_RDONLY != 0 {
		return fail(errors.New("it turned read-only after errors (see the kernel log)"))
	}
	return nil
}

func (n *Node) unmountLocked(x *vol) error {
	if x.files != nil { // its recording and warm-up end before the mount goes (or if it never came)
		x.files.close()
		x.files = nil
	}
	if x.startupRA != nil {
		x.startupRA.Stop()
		x.startupRA = nil
	}
	if x.mnt == "" {
		return nil
	}
	lazy, err := mount.Unmount(x.mnt, 10*time.Second)
	if err != nil {
		return fmt.Errorf("unmount volume %s: %w: %w", x.rec.ID, errdefs.ErrBusy, err)
	}
	if lazy {
		n.log.Warn("volume-unmounted-lazily", "volume", x.rec.ID, "mountpoint", x.mnt,
			"reason", "still busy after 10s; detached, the device goes when its last user does")
	}
	if x.shared == nil && !n.waitLoopFree(x.file, x.dev) {
		n.log.Warn("volume-filesystem-held-elsewhere", "volume", x.rec.ID, "device", x.dev,
			"reason", "unmounted here, but its filesystem lives on (a busy copy of the mount in another mount namespace?); the device goes when it does")
	}
	os.Remove(x.mnt)
	x.mnt, x.dev = "", ""
	return nil
}

// waitLoopFree waits for autoclear to detach dev from file, and detaches it if not
// (a device still in use is then only marked to go on its last close). It reports
// whether the device was freed in time.
func (n *Node) waitLoopFree(file, dev string) bool {
	for i := 0; i < 250; i++ {
		loops, _ := mount.ListLoops()
		busy := false
		for _, l := range loops {
			if l.BackingFile == file {
				busy = true
			}
		}
		if !busy {
			return true
		}
		time.Sleep(4 * time.Millisecond)
	}
	if err := mount.DetachLoop(dev); err != nil {
		n.log.Warn("loop-detach-failed", "device", dev, "err", err)
	}
	return false
}

// SnapshotOptions configure SnapshotVolume.
type SnapshotOptions struct {
	ChunkSize int64
	Progress  func(done, total int64)
}

// SnapshotVolume snapshots a volume in O(changed data). A mounted filesystem is
// frozen (flushed and held still) for the duration.
func (n *Node) SnapshotVolume(ctx context.Context, id string, opts SnapshotOptions) (*volume.SnapshotResult, error) {
	x, err := n.get(id)
	if err != nil {
		return nil, err
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.gone {
		return nil, fmt.Errorf("volume %s: %w", id, errdefs.ErrNotFound)
	}
	if x.shared != nil {
		return n.commitShared(ctx, x, opts)
	}
	start := time.Now()
	if x.mnt != "" && !x.rec.ReadOnly {
		n.trimLocked(x)
		thaw, err := mount.Freeze(x.mnt)
		if err != nil {
			return nil, fmt.Errorf("snapshot volume %s: %w", id, err)
		}
		defer func() {
			if err := thaw(); err != nil {
				n.log.Error("thaw-failed", "volume", id, "err", err)
			}
		}()
	}
	chunk := opts.ChunkSize
	if chunk == 0 {
		chunk = n.cfg.ChunkSize
	}
	var up *upload // the snapshot's chunks in the node's lease
	var written digest.Digest
	defer func() {
		if up != nil {
			up.end(written)
		}
	}()
	// Uploads go through the fetcher's bounds: a store that hangs fails the
	// snapshot after fetch.MaxWait instead of holding the frozen filesystem.
	res, err := x.v.Snapshot(ctx, n.fetcher.Bounded(), volume.SnapshotOptions{
		ChunkSize: chunk,
		Progress:  opts.Progress,
		Prepare: func(ctx context.Context, chunks []blockmap.Chunk) error {
			if n.lease == nil {
				return nil
			}
			var err error
			up, err = n.lease.beginUpload(ctx, id, chunks)
			return err
		},
		BeforeMap: func(ctx context.Context, mapID digest.Digest) (bool, error) {
			if up == nil {
				return false, nil
			}
			again, err := up.clear(ctx, mapID)
			if again && err == nil {
				err = n.checkBase(ctx, x.v.Base(), x.v.Meta().Base)
			}
			return again, err
		},
		OnChunk: func(c blockmap.Chunk, data []byte) {
			// This node is likely to read what it just wrote: keep it cached.
			if err := n.cache.Put(c, data); err != nil {
				n.log.Warn("cache-seed-failed", "chunk", c.Digest, "err", err)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	written = res.ID
	n.mapsMu.Lock()
	n.maps[res.ID] = res.Map
	n.mapsMu.Unlock()
	n.log.Info("volume-snapshotted", "volume", id, "snapshot", res.ID, "delta_bytes", res.DeltaBytes,
		"new_bytes", res.NewBytes, "new_chunks", res.NewChunks, "reused_chunks", res.ReusedChunks, "took", time.Since(start))
	return res, nil
}

// DeleteVolume unmounts and deletes a volume.
func (n *Node) DeleteVolume(ctx context.Context, id string) error {
	x, err := n.get(id)
	if err != nil {
		return err
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.shared != nil {
		return n.deleteSharedLocked(ctx, x)
	}
	if err := n.unmountLocked(x); err != nil {
		return err
	}
	x.r.Close() // before the volume goes: a start-up trace is written from what it read
	if err := n.fs.Remove(id); err != nil {
		n.log.Warn("fuse-remove-failed", "volume", id, "err", err)
	}
	// Rename first, so a crash mid-delete leaves a directory Open removes.
	dir := n.volDir(id)
	trash := dir + ".deleting"
	if err := os.Rename(dir, trash); err != nil {
		return fmt.Errorf("delete volume %s: %w", id, err)
	}
	x.gone = true
	n.mu.Lock()
	delete(n.vols, id)
	n.mu.Unlock()
	n.lease.poke()
	x.v.Delete() // closes; its directory is already renamed
	if err := os.RemoveAll(trash); err != nil {
		return fmt.Errorf("delete volume %s: %w", id, err)
	}
	n.log.Info("volume-deleted", "volume", id)
	return nil
}

// MakeFilesystem makes a blank ext4 filesystem of size bytes (0: DefaultSize) and
// returns its snapshot: the base every converted image starts from.
func (n *Node) MakeFilesystem(ctx context.Context, size int64) (*volume.SnapshotResult, error) {
	info, err := n.CreateVolume(ctx, CreateOptions{Size: size, Labels: map[string]string{labels.Kind: labels.KindMkfs}})
	if err != nil {
		return nil, err
	}
	defer n.DeleteVolume(context.WithoutCancel(ctx), info.ID)
	if err := mount.Mkfs(ctx, info.File, mount.MkfsOptions{}); err != nil {
		return nil, err
	}
	return n.SnapshotVolume(ctx, info.ID, SnapshotOptions{})
}

// Stats are node-wide counters.
type Stats struct {
	Cache cache.Stats `json:"cache"`
	// Fetch is the fetcher's, but for FetchedBytes: all the node moved from its
	// store, the chunks of a local store first read in place included
	// (Cache.InPlaceBytes).
	Fetch    fetch.Stats    `json:"fetch"`
	Prefetch prefetch.Stats `json:"prefetch"`
	Volumes  int            `json:"volumes"`
	Mounted  int            `json:"mounted"`
	// LocalImages are the whole local copies image roots are read through.
	LocalImages LocalImageStats `json:"local_images"`
}

func (n *Node) Stats() Stats {
	s := Stats{Cache: n.cache.Stats(), Fetch: n.fetcher.Stats(), Prefetch: n.prefetch.Stats(),
		LocalImages: n.local.stats()}
	// A local store's chunk first read in place is read whole from the store's
	// file (ahead, by the kernel): moved from the store as a fetch of it would be.
	s.Fetch.FetchedBytes += s.Cache.InPlaceBytes
	for _, v := range n.Volumes() {
		s.Volumes++
		if v.Mountpoint != "" {
			s.Mounted++
		}
	}
	return s
}

// RootMode is how container roots are made when their CreateOptions.Mode is
// empty (Config.RootMode, RootShared by default).
func (n *Node) RootMode() RootMode { return n.cfg.RootMode }

// DefaultSize is the virtual size of the blank filesystems this node makes.
func (n *Node) DefaultSize() int64 { return n.cfg.DefaultSize }

// DropCaches makes the node cold for the next container (benchmarks and tests):
// the image roots no container uses are unmounted (their page cache goes with
// them), and the memory tier of the cache is emptied; with disk, also its disk
// tier and the local images no image root reads.
func (n *Node) DropCaches(ctx context.Context, disk bool) {
	n.unmountIdleImages(ctx)
	if !disk {
		n.cache.DropMemory()
		return
	}
	n.cache.Purge()
	n.local.drop()
}

// Cache returns the node's chunk cache.
func (n *Node) Cache() *cache.Cache { return n.cache }

// Root returns the node's state directory.
func (n *Node) Root() string { return n.cfg.Root }

// Close unmounts every volume (keeping their records, so the next Open mounts them
// again), closes them and unmounts the FUSE directory. A second Close does nothing.
func (n *Node) Close(ctx context.Context) error {
	if n.closing.Swap(true) {
		return nil // closed already
	}
	n.prepareMu.Lock() // no PrepareImage starts after this
	n.prepareMu.Unlock()
	n.preparing.Wait()
	// Start-up traces being looked up or written finish first (each is bounded by
	// its own deadline); replays and loads ahead stop.
	if n.prefetch != nil {
		n.prefetch.Close(ctx)
	}
	n.lease.close()
	n.imagesMu.Lock()
	for _, ir := range n.images {
		ir.mu.Lock()
		if ir.held.Load() { // a prepared root no container took: as a lingering one
			ir.endHoldLocked()
			ir.users--
		}
		if ir.users == 0 {
			n.wakeLocked(ir) // a lingering root is unmounted below, with the others
		}
		ir.mu.Unlock()
	}
	n.imagesMu.Unlock()
	xs := n.allVols()
	// Shared roots first: their overlays hold the image roots below them.
	sort.SliceStable(xs, func(i, j int) bool { return xs[i].shared != nil && xs[j].shared == nil })
	var errs []error
	for _, x := range xs {
		x.mu.Lock()
		if err := n.flushLocked(x); err != nil {
			errs = append(errs, err) // and unmounted all the same
		}
		if err := n.unmountLocked(x); err != nil {
			errs = append(errs, err)
		}
		if x.v != nil {
			if err := x.v.Close(); err != nil {
				errs = append(errs, fmt.Errorf("close volume %s: %w", x.rec.ID, err))
			}
		}
		x.gone = true
		x.mu.Unlock()
	}
	// Image roots that are local images' trees are no volumes: let go here,
	// once the shared roots over them are unmounted.
	n.imagesMu.Lock()
	for s, ir := range n.images {
		ir.mu.Lock()
		if ir.tree != "" {
			n.unmountImageLocked(ctx, s, ir, "closing")
		}
		ir.mu.Unlock()
	}
	n.imagesMu.Unlock()
	n.local.close() // after the image roots it backs are unmounted
	if n.cache != nil {
		n.cache.Close()
	}
	if n.fs != nil {
		if err := n.fs.Unmount(); err != nil {
			if _, lerr := mount.Unmount(n.fs.Mountpoint(), time.Second); lerr != nil {
				errs = append(errs, err)
			}
		}
	}
	if n.holder != nil {
		// A stop, not a hand-over: the holder lets the connection go.
		if err := n.holder.Release(ctx); err != nil {
			n.log.Warn("fuse-release-failed", "err", err)
		}
		n.holder.Close()
	}
	return errors.Join(errs...)
}

// trimLocked discards the free blocks of mounted read-write volume x, so that data
// deleted in it is not in its next snapshot: each discard becomes a hole in the
// delta (volume.Zero). A failure is logged: the snapshot is right all the same,
// only bigger.
func (n *Node) trimLocked(x *vol) {
	if x.mnt == "" || x.rec.ReadOnly || x.shared != nil {
		return
	}
	start := time.Now()
	// Blocks freed in the journal's running transaction are not free to trim until
	// it commits: write it out first.
	if f, err := os.Open(x.mnt); err == nil {
		unix.Syncfs(int(f.Fd()))
		f.Close()
	}
	trimmed, err := mount.Trim(x.mnt)
	if err != nil {
		n.log.Warn("volume-trim-failed", "volume", x.rec.ID, "err", err)
		return
	}
	n.log.Debug("volume-trimmed", "volume", x.rec.ID, "bytes", trimmed, "took", time.Since(start))
}

// replayBudget bounds what one replay may prefetch: half the disk tier when there
// is one, else half the memory tier (more could evict what it fetched before the
// container reads it).
func (n *Node) replayBudget() int64 {
	if n.cfg.CacheNoDisk {
		mem := n.cfg.CacheMemBytes
		if mem <= 0 {
			mem = 64 << 20 // the cache's default
		}
		return max(mem/2, 1<<20)
	}
	return max(n.cfg.CacheBytes/2, 1<<20)
}

// inodeTables is prefetch.Options.FirstStartRanges for a volume holding an ext4
// filesystem: the ranges of its inode tables in use.
func inodeTables(base io.ReaderAt, size int64) ([][2]int64, error) {
	rs, err := ext4meta.InodeTables(base, size)
	if err != nil {
		return nil, err
	}
	out := make([][2]int64, len(rs))
	for i, r := range rs {
		out[i] = [2]int64{r.Off, r.Off + r.Len}
	}
	return out, nil
}
