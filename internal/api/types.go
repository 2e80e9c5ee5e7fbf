package api

import (
	"encoding/json"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/errdefs"
)

// DefaultSocket is where slackerd listens unless told otherwise.
const DefaultSocket = "/run/slacker/slackerd.sock"

// ErrDaemon: no slackerd answers on the socket (errdefs.ErrUnavailable).
var ErrDaemon = errdefs.New(errdefs.ErrUnavailable, "slackerd is not running")

// ErrorBody is the body of every failed request. Kind is the error's errdefs kind by
// name (errdefs.Kind.String: "not_found", "exists", "invalid", "busy",
// "unavailable", "corrupt", "unsupported", "out_of_range", "canceled", "internal").
type ErrorBody struct {
	Error string `json:"error"`
	Kind  string `json:"kind"`
}

// Info describes the daemon.
type Info struct {
	Version string `json:"version"`
	// StateRoot is Slacker's state directory on this node: the CLI keeps image names
	// (StateRoot/images), containers (StateRoot/containers) and runc's state
	// (StateRoot/runc) there.
	StateRoot string `json:"state_root"`
	Root      string `json:"root"` // the node's directory (volumes, cache, mounts)
	Store     string `json:"store"`
	ChunkSize int64  `json:"chunk_size"`
	PID       int    `json:"pid"`
}

// CreateVolumeRequest clones Snapshot (or makes a blank volume of Size).
type CreateVolumeRequest struct {
	ID       string            `json:"id,omitempty"`
	Snapshot digest.Digest     `json:"snapshot,omitempty"`
	Size     int64             `json:"size,omitempty"`
	Labels   map[string]string `json:"labels,omitempty"`
	Mount    bool              `json:"mount,omitempty"` // mount it at once
	ReadOnly bool              `json:"read_only,omitempty"`
	// Startup marks a container's root: the image's start-up trace is replayed, or
	// recorded if the store has none (docs/design.md, "Start-up traces").
	Startup bool `json:"startup,omitempty"`
	// StartupFallback are snapshots whose traces are replayed when Snapshot has none
	// (the image's earlier layers, newest first).
	StartupFallback []digest.Digest `json:"startup_fallback,omitempty"`
	// Mode is how the volume is made from Snapshot: "shared" (an overlay over the
	// node's read-only mount of the snapshot), "block" (a block-level clone), or
	// empty: the node's container_root for a container's root (Startup), a block
	// clone otherwise.
	Mode string `json:"mode,omitempty"`
}

// VolumeStats are a volume's I/O counters.
type VolumeStats struct {
	ReadBytes     int64 `json:"read_bytes"`
	WrittenBytes  int64 `json:"written_bytes"`
	BaseReadBytes int64 `json:"base_read_bytes"`
	FetchedBytes  int64 `json:"fetched_bytes"`
	CacheHits     int64 `json:"cache_hits"`
	CacheMisses   int64 `json:"cache_misses"`
	DeltaBytes    int64 `json:"delta_bytes"`
	DeltaRuns     int64 `json:"delta_runs"`
	// BaseReadRuns are the base snapshot's blocks (4 KiB) the volume read, as
	// sorted half-open runs [start, end); truncated after a bound (prefetch.MaxReadRuns).
	BaseReadRuns          [][2]int64 `json:"base_read_runs,omitempty"`
	BaseReadRunsTruncated bool       `json:"base_read_runs_truncated,omitempty"`
}

// Volume describes a volume.
type Volume struct {
	ID         string            `json:"id"`
	Labels     map[string]string `json:"labels,omitempty"`
	Base       digest.Digest     `json:"base,omitempty"`
	Size       int64             `json:"size"`
	Mounted    bool              `json:"mounted"`
	ReadOnly   bool              `json:"read_only,omitempty"`
	Mountpoint string            `json:"mountpoint,omitempty"`
	Device     string            `json:"device,omitempty"`
	File       string            `json:"file"`
	Mode       string            `json:"mode,omitempty"`  // "shared" for a shared root
	Image      digest.Digest     `json:"image,omitempty"` // a shared root's image snapshot
	// Idle, for an image root: no container stands on it; it lingers for the
	// image's next container (image_root_linger), then goes.
	Idle    bool        `json:"idle,omitempty"`
	Created time.Time   `json:"created"`
	Stats   VolumeStats `json:"stats"`
}

// MountRequest mounts a volume.
type MountRequest struct {
	ReadOnly bool `json:"read_only,omitempty"`
}

// SnapshotRequest snapshots a volume.
type SnapshotRequest struct {
	ChunkSize int64 `json:"chunk_size,omitempty"`
}

// Snapshot describes a snapshot taken or looked up.
// Layout is the result of a start-up layout of a snapshot (POST
// /v1/snapshots/{id}/layout): the re-laid snapshot, and what a start fetches to
// read its start-up data before and after.
type Layout struct {
	Snapshot      digest.Digest `json:"snapshot"`
	Unchanged     bool          `json:"unchanged,omitempty"`
	NewChunks     int           `json:"new_chunks"`
	GatheredBytes int64         `json:"gathered_bytes"`
	ReadBytes     int64         `json:"read_bytes"`
	FetchBefore   int64         `json:"fetch_before"`
	FetchAfter    int64         `json:"fetch_after"`
	TookSeconds   float64       `json:"took_seconds"`
}

type Snapshot struct {
	ID           digest.Digest `json:"id"`
	Size         int64         `json:"size"`      // virtual size
	DataSize     int64         `json:"data_size"` // bytes not in holes
	ChunkBytes   int64         `json:"chunk_bytes"`
	Chunks       int           `json:"chunks"`
	Extents      int           `json:"extents"`
	MapBytes     int           `json:"map_bytes,omitempty"`
	DeltaBytes   int64         `json:"delta_bytes,omitempty"` // of a snapshot just taken
	NewBytes     int64         `json:"new_bytes,omitempty"`
	NewChunks    int           `json:"new_chunks,omitempty"`
	ReusedChunks int           `json:"reused_chunks,omitempty"`
	TookSeconds  float64       `json:"took_seconds,omitempty"`
}

// MkfsRequest makes a blank ext4 snapshot.
type MkfsRequest struct {
	Size int64 `json:"size,omitempty"`
}

// CacheStats are the node cache's counters.
type CacheStats struct {
	MemHits      int64 `json:"mem_hits"`
	DiskHits     int64 `json:"disk_hits"`
	Misses       int64 `json:"misses"`
	FetchedBytes int64 `json:"fetched_bytes"`
	Evictions    int64 `json:"evictions"`
	Corrupt      int64 `json:"corrupt"`
	DiskBytes    int64 `json:"disk_bytes"`
	DiskChunks   int   `json:"disk_chunks"`
	MemBytes     int64 `json:"mem_bytes"`
	MaxBytes     int64 `json:"max_bytes"`
	// Reads served from the 4 KiB blocks they cover, read from a chunk's local
	// file and checked against the checksums taken when it was verified, and
	// the bytes they read; blocks found damaged that way (never served).
	PartialReads  int64 `json:"partial_reads"`
	PartialBytes  int64 `json:"partial_bytes"`
	SumMismatches int64 `json:"sum_mismatches"`
	SumChunks     int   `json:"sum_chunks"` // chunks whose block checksums are kept
	// StoreSums counts chunks whose block checksums came from the local store
	// (kept with its files), not from a whole read of the chunk.
	StoreSums int64 `json:"store_sums"`
	// InPlaceBytes is the size of the chunks first read in place from a local
	// store's files (read ahead whole from there): moved from the store, though
	// not fetched. FetchStats.FetchedBytes includes them.
	InPlaceBytes int64 `json:"in_place_bytes"`
}

// FetchStats are the node fetcher's counters.
type FetchStats struct {
	// FetchedBytes is what the node moved from its store: the chunks fetched,
	// and those of a local store first read in place (CacheStats.InPlaceBytes).
	FetchedBytes int64 `json:"fetched_bytes"`
	Requests     int64 `json:"requests"`
	Retries      int64 `json:"retries"`
	Failures     int64 `json:"failures"`
}

// PrefetchStats are the node's counters of fetching ahead.
type PrefetchStats struct {
	ReadaheadChunks int64 `json:"readahead_chunks"` // chunks fetched ahead of sequential readers
	ReplayedChunks  int64 `json:"replayed_chunks"`  // chunks fetched by start-up trace replays
	// FirstStartChunks are chunks fetched near the reads of starts that had no
	// trace to replay.
	FirstStartChunks int64 `json:"first_start_chunks"`
	FetchedBytes     int64 `json:"fetched_bytes"` // bytes all three moved from the store
	Busy             int64 `json:"busy"`          // loads not started: every slot was busy
	TracesReplayed   int64 `json:"traces_replayed"`
	TracesRecorded   int64 `json:"traces_recorded"`
}

// NodeStats are node-wide counters.
type NodeStats struct {
	Cache    CacheStats    `json:"cache"`
	Fetch    FetchStats    `json:"fetch"`
	Prefetch PrefetchStats `json:"prefetch"`
	Volumes  int           `json:"volumes"`
	Mounted  int           `json:"mounted"`
	RSSBytes int64         `json:"rss_bytes"`
	PeakRSS  int64         `json:"peak_rss_bytes"`
	// LocalImages are the whole local copies of images that image roots are read
	// through by FUSE passthrough (docs/design.md, "Local images").
	LocalImages LocalImageStats `json:"local_images"`
}

// LocalImageStats count a node's local images.
type LocalImageStats struct {
	Count   int   `json:"count"`   // written
	Bytes   int64 `json:"bytes"`   // of disk they take
	InUse   int   `json:"in_use"`  // read by an image root
	Writing int   `json:"writing"` // being written
	// Pending counts the idle image roots whose local image is yet to be tried.
	Pending int `json:"pending"`
}

// TrimCacheRequest trims the node cache's disk tier to KeepBytes.
type TrimCacheRequest struct {
	KeepBytes int64 `json:"keep_bytes"`
}

// TrimCacheResult says what a trim removed.
type TrimCacheResult struct {
	Chunks int        `json:"chunks"`
	Bytes  int64      `json:"bytes"`
	Cache  CacheStats `json:"cache"`
}

// GCRoot is a snapshot the caller names (the CLI's image names and registry
// references), for GCRequest and CheckRequest.
type GCRoot struct {
	Snapshot digest.Digest `json:"snapshot"`
	From     string        `json:"from"`
}

// GCRequest collects the node's store (package gc); the answer is a gc.Report.
type GCRequest struct {
	Roots        []GCRoot `json:"roots,omitempty"`
	GraceSeconds float64  `json:"grace_seconds"`
	SkewSeconds  float64  `json:"skew_seconds"` // negative: none
	DryRun       bool     `json:"dry_run,omitempty"`
	// Progress asks for a streamed answer (StreamLine): progress, then the result.
	Progress bool `json:"progress,omitempty"`
}

// CheckRequest checks the node's store (package gc); the answer is a
// gc.CheckReport.
type CheckRequest struct {
	Roots    []GCRoot `json:"roots,omitempty"`
	ReadData bool     `json:"read_data,omitempty"`
	// Progress asks for a streamed answer (StreamLine): progress, then the result.
	Progress bool `json:"progress,omitempty"`
}

// ProgressEvent says how far a phase of a long call has come (gc: list, mark,
// sweep; check: read).
type ProgressEvent struct {
	Phase string `json:"phase"`
	Done  int64  `json:"done"`
	Total int64  `json:"total,omitempty"` // 0: not known yet
}

// StreamLine is one line of a streamed answer (Content-Type
// application/x-ndjson, asked for with a request's Progress): any number of
// progress lines, then one with the result or the error.
type StreamLine struct {
	Progress *ProgressEvent  `json:"progress,omitempty"`
	Result   json.RawMessage `json:"result,omitempty"`
	Error    *ErrorBody      `json:"error,omitempty"`
}

// BlockMap is a snapshot's encoded block map (GET and PUT
// /v1/snapshots/{id}/map); its digest is the snapshot ID.
type BlockMap struct {
	Map []byte `json:"map"`
}
