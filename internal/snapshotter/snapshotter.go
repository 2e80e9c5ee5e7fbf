package snapshotter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/containerd/containerd/errdefs"
	"github.com/containerd/containerd/mount"
	"github.com/containerd/containerd/snapshots"
	"github.com/containerd/containerd/snapshots/storage"
	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/atomicfile"
	"github.com/slacker-dev/slacker/internal/blockmap"
	slerrdefs "github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/image"
	"github.com/slacker-dev/slacker/internal/labels"
	"github.com/slacker-dev/slacker/internal/node"
	"github.com/slacker-dev/slacker/internal/store"
	"github.com/slacker-dev/slacker/internal/volume"
)

// Node is what the snapshotter needs from the node (*node.Node has it).
type Node interface {
	CreateVolume(ctx context.Context, o node.CreateOptions) (node.VolumeInfo, error)
	MountVolume(ctx context.Context, id string, readOnly bool) (node.VolumeInfo, error)
	UnmountVolume(ctx context.Context, id string) error
	SnapshotVolume(ctx context.Context, id string, o node.SnapshotOptions) (*volume.SnapshotResult, error)
	DeleteVolume(ctx context.Context, id string) error
	Volume(id string) (node.VolumeInfo, error)
	Volumes() []node.VolumeInfo
	Map(ctx context.Context, id digest.Digest) (*blockmap.Map, error)
	MakeFilesystem(ctx context.Context, size int64) (*volume.SnapshotResult, error)
	// Store is the node's store: the blank base is recorded there for other nodes.
	Store() store.Store
	// PrepareImage readies an image's shared root for a container expected soon.
	PrepareImage(snapshot digest.Digest)
	// FetchTraceAhead fetches an image's start-up trace for a start expected soon.
	FetchTraceAhead(snapshot digest.Digest)
	// DefaultSize is the size of the blank filesystems MakeFilesystem(ctx, 0) makes.
	DefaultSize() int64
}

var _ Node = (*node.Node)(nil)

// Options configure New.
type Options struct {
	// Dir holds metadata.db, the records of committed snapshots and the blank base.
	Dir string
	// Size is the virtual size of the filesystems of first layers (0: the node's
	// default).
	Size int64
	// VolumePrefix prefixes the IDs of the volumes this snapshotter makes
	// (default "ctrd-"); two snapshotters on one node need different prefixes.
	VolumePrefix string
	// RootMode is how containers' roots are made (active snapshots over an
	// image, not layers being unpacked): empty for the node's container_root.
	RootMode node.RootMode
	Logger   *slog.Logger
	// OnError, if set, is told of every error the snapshotter answers containerd
	// with, before it is mapped (slackerd's metrics count them by kind).
	OnError func(err error)
	// Store describes the node's store, for the error that says an image's
	// snapshot is not in it.
	Store string
	// Attached, if set, finds the Slacker descriptor attached to the ordinary
	// image ref (as containerd names it in a layer's labels: CRI, nerdctl), one
	// whose snapshot is in the node's store; nil and no error when it has none.
	// The layers of such an image are prepared from the descriptor's lineage,
	// without a download or an unpack. slackerd gives registry.Attached; this
	// package never talks to a registry itself.
	Attached func(ctx context.Context, ref string) (*image.Descriptor, error)
}

// Snapshotter implements containerd's snapshots.Snapshotter and snapshots.Cleaner.
// It is safe for concurrent use.
type Snapshotter struct {
	n      Node
	o      Options
	log    *slog.Logger
	ms     *storage.MetaStore
	recDir string

	// mu keeps Cleanup (writer) from deleting a volume that a Prepare or Commit
	// (readers) made but has not recorded yet.
	mu sync.RWMutex

	baseMu sync.Mutex
	base   digest.Digest

	notLazyMu sync.Mutex
	notLazy   map[string]bool // images already logged as not lazy

	attachedMu sync.Mutex
	attached   map[string]attachedEntry // what Options.Attached said of an image, for a while
}

// attachedEntry is Options.Attached's answer about an image (d nil: none).
type attachedEntry struct {
	d    *image.Descriptor
	when time.Time
}

// attachedFor is how long an answer of Options.Attached is reused: the layers of
// one pull ask one after the other.
const attachedFor = time.Minute

var (
	_ snapshots.Snapshotter = (*Snapshotter)(nil)
	_ snapshots.Cleaner     = (*Snapshotter)(nil)
)

// record is what the snapshotter keeps of a committed snapshot (records/<id>.json).
type record struct {
	Snapshot digest.Digest `json:"snapshot"`
	Lazy     bool          `json:"lazy,omitempty"` // prepared remotely, never unpacked here
}

// New opens (or creates) the snapshotter's metadata in o.Dir.
func New(n Node, o Options) (*Snapshotter, error) {
	if o.Dir == "" {
		return nil, fmt.Errorf("snapshotter: no directory given")
	}
	if o.VolumePrefix == "" {
		o.VolumePrefix = "ctrd-"
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	recDir := filepath.Join(o.Dir, "records")
	if err := os.MkdirAll(recDir, 0o700); err != nil {
		return nil, fmt.Errorf("snapshotter: %w", err)
	}
	ms, err := storage.NewMetaStore(filepath.Join(o.Dir, "metadata.db"))
	if err != nil {
		return nil, fmt.Errorf("snapshotter: %w", err)
	}
	return &Snapshotter{n: n, o: o, log: log, ms: ms, recDir: recDir, notLazy: map[string]bool{},
		attached: map[string]attachedEntry{}}, nil
}

func (s *Snapshotter) volumeID(id string) string { return s.o.VolumePrefix + id }

// MapError is the snapshotter's one translation of an error (errdefs.KindOf) to
// containerd's errdefs, which the gRPC service turns into status codes: NotFound,
// AlreadyExists, InvalidArgument, FailedPrecondition (busy), Unavailable (a passed
// deadline too) and NotImplemented (unsupported). A canceled error keeps its
// context.Canceled (code Canceled); corrupt data, a range out of range and errors of
// no kind stay as they are (code Unknown: containerd has no code for them).
func MapError(err error) error {
	var class error
	switch slerrdefs.KindOf(err) {
	case slerrdefs.NotFound:
		class = errdefs.ErrNotFound
	case slerrdefs.Exists:
		class = errdefs.ErrAlreadyExists
	case slerrdefs.Invalid:
		class = errdefs.ErrInvalidArgument
	case slerrdefs.Busy:
		class = errdefs.ErrFailedPrecondition
	case slerrdefs.Unavailable:
		class = errdefs.ErrUnavailable
	case slerrdefs.Unsupported:
		class = errdefs.ErrNotImplemented
	default:
		return err
	}
	return fmt.Errorf("%w: %w", class, err)
}

// mapError is MapError, telling Options.OnError of err first.
func (s *Snapshotter) mapError(err error) error {
	if s.o.OnError != nil {
		s.o.OnError(err)
	}
	return MapError(err)
}

// Stat returns the info of the snapshot named key.
func (s *Snapshotter) Stat(ctx context.Context, key string) (snapshots.Info, error) {
	var info snapshots.Info
	err := s.ms.WithTransaction(ctx, false, func(ctx context.Context) error {
		var err error
		_, info, _, err = storage.GetInfo(ctx, key)
		return err
	})
	return info, err
}

// Update updates the labels of a snapshot (the only mutable field).
func (s *Snapshotter) Update(ctx context.Context, info snapshots.Info, fieldpaths ...string) (snapshots.Info, error) {
	err := s.ms.WithTransaction(ctx, true, func(ctx context.Context) error {
		var err error
		info, err = storage.UpdateInfo(ctx, info, fieldpaths...)
		return err
	})
	return info, err
}

// Usage of an active or view snapshot is the bytes its volume holds in its delta
// (blocks written, at 4 KiB granularity); of a committed one, the delta it was
// committed with (0 for a lazily prepared one: nothing of it is on this node).
func (s *Snapshotter) Usage(ctx context.Context, key string) (snapshots.Usage, error) {
	var (
		id    string
		info  snapshots.Info
		usage snapshots.Usage
	)
	err := s.ms.WithTransaction(ctx, false, func(ctx context.Context) error {
		var err error
		id, info, usage, err = storage.GetInfo(ctx, key)
		return err
	})
	if err != nil {
		return usage, err
	}
	if info.Kind == snapshots.KindActive || info.Kind == snapshots.KindView {
		v, err := s.n.Volume(s.volumeID(id))
		if err != nil {
			return usage, s.mapError(err)
		}
		usage.Size = v.Stats.DeltaBytes
	}
	return usage, nil
}

// Mounts returns the mounts of an active or view snapshot, mounting its volume
// again if it is not mounted.
func (s *Snapshotter) Mounts(ctx context.Context, key string) ([]mount.Mount, error) {
	var snap storage.Snapshot
	err := s.ms.WithTransaction(ctx, false, func(ctx context.Context) error {
		var err error
		snap, err = storage.GetSnapshot(ctx, key)
		return err
	})
	if err != nil {
		return nil, err
	}
	ro := snap.Kind == snapshots.KindView
	v, err := s.n.MountVolume(ctx, s.volumeID(snap.ID), ro)
	if err != nil {
		return nil, s.mapError(err)
	}
	return bindMounts(v.Mountpoint, ro), nil
}

func bindMounts(mountpoint string, ro bool) []mount.Mount {
	mode := "rw"
	if ro {
		mode = "ro"
	}
	return []mount.Mount{{Type: "bind", Source: mountpoint, Options: []string{"rbind", mode}}}
}

// Prepare makes an active snapshot: a writable clone of parent. With the labels of
// a Slacker layer it takes the remote-snapshot path instead (see the package doc)
// and returns ErrAlreadyExists.
func (s *Snapshotter) Prepare(ctx context.Context, key, parent string, opts ...snapshots.Opt) ([]mount.Mount, error) {
	return s.create(ctx, snapshots.KindActive, key, parent, opts)
}

// View makes a read-only clone of parent.
func (s *Snapshotter) View(ctx context.Context, key, parent string, opts ...snapshots.Opt) ([]mount.Mount, error) {
	return s.create(ctx, snapshots.KindView, key, parent, opts)
}

func (s *Snapshotter) create(ctx context.Context, kind snapshots.Kind, key, parent string, opts []snapshots.Opt) ([]mount.Mount, error) {
	var base snapshots.Info
	for _, o := range opts {
		if err := o(&base); err != nil {
			return nil, err
		}
	}
	if kind == snapshots.KindActive {
		if target := base.Labels[labels.SnapshotRef]; target != "" {
			if snap := base.Labels[labels.LayerSnapshot]; snap != "" {
				return nil, s.prepareRemote(ctx, key, parent, target, digest.Digest(snap), "label", opts)
			}
			if snap := s.attachedLayer(ctx, base.Labels[labels.CRIImageRef], target); snap != "" {
				return nil, s.prepareRemote(ctx, key, parent, target, snap, "attached", opts)
			}
			s.logNotLazy(key, target, base.Labels)
		}
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	// The blank base may need a mkfs: make it before taking the write transaction.
	var blank digest.Digest
	if parent == "" {
		var err error
		if blank, err = s.blankBase(ctx); err != nil {
			return nil, err
		}
	}
	var mounts []mount.Mount
	err := s.ms.WithTransaction(ctx, true, func(ctx context.Context) error {
		snap, err := storage.CreateSnapshot(ctx, kind, key, parent, opts...)
		if err != nil {
			return err
		}
		from := blank
		// ParentIDs starts with the immediate parent (whatever storage's doc says).
		if len(snap.ParentIDs) > 0 {
			rec, err := s.readRecord(snap.ParentIDs[0])
			if err != nil {
				return fmt.Errorf("parent %s: %w", parent, err)
			}
			from = rec.Snapshot
		}
		vid := s.volumeID(snap.ID)
		ro := kind == snapshots.KindView
		// A container's root (an active snapshot that no layer is unpacked into) gets
		// its image's start-up trace.
		container := kind == snapshots.KindActive && parent != "" && base.Labels[labels.SnapshotRef] == "" &&
			!strings.HasPrefix(key, "extract-")
		mode := node.RootBlock // a layer is unpacked into a block clone, then snapshotted
		if container {
			mode = s.o.RootMode
		}
		if _, err := s.n.CreateVolume(ctx, node.CreateOptions{ID: vid, Snapshot: from, Startup: container, Mode: mode,
			Labels: map[string]string{labels.Kind: labels.KindContainerd, labels.ContainerdKey: key}}); err != nil {
			return fmt.Errorf("clone %s for %s: %w", from, key, s.mapError(err))
		}
		v, err := s.n.MountVolume(ctx, vid, ro)
		if err != nil {
			s.deleteVolume(context.WithoutCancel(ctx), vid)
			return fmt.Errorf("mount %s: %w", key, s.mapError(err))
		}
		mounts = bindMounts(v.Mountpoint, ro)
		s.log.Debug("snapshot-prepared", "key", key, "parent", parent, "kind", kind.String(), "volume", vid, "from", from)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return mounts, nil
}

// prepareRemote records the committed snapshot target for the Slacker snapshot snap
// without unpacking anything, and returns ErrAlreadyExists (containerd's contract
// for a remote snapshot).
func (s *Snapshotter) prepareRemote(ctx context.Context, key, parent, target string, snap digest.Digest, via string, opts []snapshots.Opt) error {
	start := time.Now()
	if err := store.CheckDigest(snap); err != nil {
		return fmt.Errorf("label %s=%q: %w", labels.LayerSnapshot, snap, errdefs.ErrInvalidArgument)
	}
	if via == "label" { // a Slacker image's one layer: its start comes next
		s.n.FetchTraceAhead(snap)
	}
	// The block map must be in the store this node reads: fail the pull with advice
	// rather than let containerd unpack the placeholder layer.
	m, err := s.n.Map(ctx, snap)
	if err != nil {
		if errors.Is(err, slerrdefs.ErrNotFound) {
			name := imageOf(opts)
			if name == "" {
				name = "the image"
			}
			return s.mapError(image.NotInStore(name, snap, s.o.Store))
		}
		return s.mapError(err)
	}
	err = s.ms.WithTransaction(ctx, true, func(ctx context.Context) error {
		if _, _, _, err := storage.GetInfo(ctx, target); err == nil {
			return nil // another pull (or namespace) made it already
		}
		info, err := storage.CreateSnapshot(ctx, snapshots.KindActive, key, parent, opts...)
		if err != nil {
			return err
		}
		if err := s.writeRecord(info.ID, record{Snapshot: snap, Lazy: true}); err != nil {
			return err
		}
		_, err = storage.CommitActive(ctx, key, target, snapshots.Usage{}, opts...)
		return err
	})
	if err != nil && !errdefs.IsAlreadyExists(err) {
		return err
	}
	s.log.Info("remote-snapshot-prepared", "key", key, "chain", target, "snapshot", snap, "via", via,
		"image", imageOf(opts), "size", m.Size, "took", time.Since(start))
	if via == "label" { // a Slacker image's one layer: the image itself
		s.prepareImage(snap)
	}
	return fmt.Errorf("target snapshot %q: %w", target, errdefs.ErrAlreadyExists)
}

// prepareImage has the node ready the image snapshot, just pulled, for its
// container (node.PrepareImage), when containers' roots are shared. A layer of an
// ordinary image with a descriptor attached is not prepared: it may not be the
// image's top layer, the one its containers stand on.
func (s *Snapshotter) prepareImage(snap digest.Digest) {
	if s.o.RootMode == "" || s.o.RootMode == node.RootShared {
		s.n.PrepareImage(snap)
	}
}

// attachedLayer returns the Slacker snapshot of the layer whose chain ID is chain
// in the descriptor attached to the ordinary image ref, if it has one
// (Options.Attached); "" otherwise. A failed lookup is logged, and the layer is
// unpacked as for any ordinary image.
func (s *Snapshotter) attachedLayer(ctx context.Context, ref, chain string) digest.Digest {
	if s.o.Attached == nil || ref == "" {
		return ""
	}
	s.attachedMu.Lock()
	e, ok := s.attached[ref]
	s.attachedMu.Unlock()
	if !ok || time.Since(e.when) > attachedFor {
		d, err := s.o.Attached(ctx, ref)
		if err != nil {
			s.log.Warn("attached-lookup-failed", "image", ref, "err", err, "action", "unpacking the image's layers")
		}
		e = attachedEntry{d: d, when: time.Now()}
		s.attachedMu.Lock()
		if len(s.attached) > 1024 {
			s.attached = map[string]attachedEntry{}
		}
		s.attached[ref] = e
		s.attachedMu.Unlock()
	}
	if e.d == nil {
		return ""
	}
	for _, l := range e.d.Layers {
		if l.ChainID.String() == chain {
			return l.Snapshot
		}
	}
	return "" // a layer the conversion did not see (the image was rebuilt): unpacked
}

func imageOf(opts []snapshots.Opt) string {
	var info snapshots.Info
	for _, o := range opts {
		o(&info)
	}
	return info.Labels[labels.CRIImageRef]
}

// logNotLazy says, once per image when containerd names it (CRI, nerdctl) and once
// per layer otherwise, that a layer is being unpacked rather than mounted lazily.
func (s *Snapshotter) logNotLazy(key, chain string, ls map[string]string) {
	img := ls[labels.CRIImageRef]
	if img != "" {
		s.notLazyMu.Lock()
		seen := s.notLazy[img]
		if len(s.notLazy) > 4096 {
			s.notLazy = map[string]bool{}
		}
		s.notLazy[img] = true
		s.notLazyMu.Unlock()
		if seen {
			return
		}
	}
	s.log.Warn("snapshot-not-lazy", "image", img, "chain", chain, "layer", ls[labels.CRILayerDigest], "key", key,
		"reason", "not a Slacker image: containerd downloads this layer and unpacks it into a clone; "+
			"convert the image with `slacker convert` and push it for lazy pulls")
}

// Commit snapshots the active snapshot key's volume (a Slacker snapshot), records it
// under name and deletes the volume.
func (s *Snapshotter) Commit(ctx context.Context, name, key string, opts ...snapshots.Opt) error {
	var (
		snap storage.Snapshot
		info snapshots.Info
	)
	err := s.ms.WithTransaction(ctx, false, func(ctx context.Context) error {
		var err error
		if snap, err = storage.GetSnapshot(ctx, key); err != nil {
			return err
		}
		_, info, _, err = storage.GetInfo(ctx, key)
		return err
	})
	if err != nil {
		return err
	}
	if snap.Kind != snapshots.KindActive {
		return fmt.Errorf("commit %s: snapshot is %s, not active: %w", key, snap.Kind, errdefs.ErrFailedPrecondition)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	vid := s.volumeID(snap.ID)
	// A first layer that is a Slacker layer (unpacked because the client passed no
	// labels, as ctr 1.6 does) stands for its snapshot, not for its files.
	var rec record
	var usage snapshots.Usage
	if len(snap.ParentIDs) == 0 {
		d, err := s.slackerLayer(vid)
		if err != nil {
			return fmt.Errorf("commit %s: %w", key, err)
		}
		if d != nil {
			if _, err := s.n.Map(ctx, d.Snapshot); err != nil {
				return fmt.Errorf("commit %s: the Slacker layer names snapshot %s, which this node cannot read: %w "+
					"(point slackerd at the store the image was pushed to)", key, d.Snapshot, s.mapError(err))
			}
			rec = record{Snapshot: d.Snapshot, Lazy: true}
			s.log.Info("remote-snapshot-prepared", "key", key, "chain", name, "snapshot", d.Snapshot, "via", "layer")
			s.prepareImage(d.Snapshot)
		}
	}
	if rec.Snapshot == "" {
		res, err := s.n.SnapshotVolume(ctx, vid, node.SnapshotOptions{})
		if err != nil {
			return fmt.Errorf("commit %s: %w", key, s.mapError(err))
		}
		rec, usage.Size = record{Snapshot: res.ID}, res.DeltaBytes
		s.log.Info("snapshot-committed", "name", name, "key", key, "snapshot", res.ID, "delta_bytes", res.DeltaBytes,
			"new_bytes", res.NewBytes)
		// An unpack without labels (ctr 1.6 passes none) is known for what it was
		// only now; with labels, Prepare said it already.
		if info.Labels[labels.SnapshotRef] == "" && isUnpackKey(key) {
			s.logNotLazy(key, name, info.Labels)
		}
	}
	err = s.ms.WithTransaction(ctx, true, func(ctx context.Context) error {
		if err := s.writeRecord(snap.ID, rec); err != nil {
			return err
		}
		_, err := storage.CommitActive(ctx, key, name, usage, opts...)
		return err
	})
	if err != nil {
		return err
	}
	s.deleteVolume(context.WithoutCancel(ctx), vid)
	return nil
}

// isUnpackKey tells containerd's unpack keys ("extract-<unique> <chain ID>", after
// the metadata layer's "<namespace>/<n>/" prefix) from a container's.
func isUnpackKey(key string) bool {
	if i := strings.LastIndex(key, "/extract-"); i >= 0 {
		key = key[i+1:]
	}
	return strings.HasPrefix(key, "extract-") && strings.Contains(key, " sha256:")
}

// slackerLayer returns the descriptor if the volume holds exactly a Slacker layer
// (only .slacker/ at its root, with the descriptor), nil otherwise. The files are
// untrusted: they are read inside the mount with os.Root, never following a link
// out of it.
func (s *Snapshotter) slackerLayer(vid string) (*image.Descriptor, error) {
	v, err := s.n.Volume(vid)
	if err != nil {
		return nil, s.mapError(err)
	}
	if v.Mountpoint == "" {
		return nil, nil
	}
	ents, err := os.ReadDir(v.Mountpoint)
	if err != nil || len(ents) != 1 || ents[0].Name() != ".slacker" || !ents[0].IsDir() {
		return nil, nil
	}
	root, err := os.OpenRoot(v.Mountpoint)
	if err != nil {
		return nil, nil
	}
	defer root.Close()
	fi, err := root.Lstat(image.LayerDescriptorPath)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() > image.MaxSize {
		return nil, nil
	}
	f, err := root.Open(image.LayerDescriptorPath)
	if err != nil {
		return nil, nil
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, image.MaxSize+1))
	if err != nil {
		return nil, fmt.Errorf("read the Slacker layer: %w", err)
	}
	d, err := image.Decode(b)
	if err != nil {
		return nil, fmt.Errorf("the layer holds a malformed Slacker descriptor: %w", errdefs.ErrInvalidArgument)
	}
	return d, nil
}

// Remove removes a snapshot and, for an active or view one, its volume.
func (s *Snapshotter) Remove(ctx context.Context, key string) error {
	var (
		id   string
		kind snapshots.Kind
	)
	err := s.ms.WithTransaction(ctx, true, func(ctx context.Context) error {
		var err error
		id, kind, err = storage.Remove(ctx, key)
		if err != nil {
			return fmt.Errorf("failed to remove snapshot %s: %w", key, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if kind == snapshots.KindCommitted {
		os.Remove(s.recordPath(id))
		return nil
	}
	s.deleteVolume(context.WithoutCancel(ctx), s.volumeID(id))
	return nil
}

// deleteVolume deletes a volume, leaving it to Cleanup if that fails.
func (s *Snapshotter) deleteVolume(ctx context.Context, vid string) {
	if err := s.n.DeleteVolume(ctx, vid); err != nil && !errors.Is(err, slerrdefs.ErrNotFound) {
		s.log.Warn("snapshot-volume-delete-failed", "volume", vid, "err", err, "reason", "left for Cleanup")
	}
}

// Walk calls fn for every snapshot matching the filters.
func (s *Snapshotter) Walk(ctx context.Context, fn snapshots.WalkFunc, filters ...string) error {
	return s.ms.WithTransaction(ctx, false, func(ctx context.Context) error {
		return storage.WalkInfo(ctx, fn, filters...)
	})
}

// Cleanup deletes volumes and records no snapshot owns (left by a crash or a failed
// delete).
func (s *Snapshotter) Cleanup(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.baseMu.Lock() // a blank base being made is not garbage
	defer s.baseMu.Unlock()
	kinds := map[string]snapshots.Kind{}
	err := s.ms.WithTransaction(ctx, false, func(ctx context.Context) error {
		return storage.WalkInfo(ctx, func(ctx context.Context, info snapshots.Info) error {
			id, _, _, err := storage.GetInfo(ctx, info.Name)
			if err != nil {
				return err
			}
			kinds[id] = info.Kind
			return nil
		})
	})
	if err != nil {
		return err
	}
	var errs []error
	for _, v := range s.n.Volumes() {
		id, ok := strings.CutPrefix(v.ID, s.o.VolumePrefix)
		if !ok || !strings.HasPrefix(v.Labels[labels.Kind], labels.KindContainerd) {
			continue
		}
		if k, ok := kinds[id]; ok && k != snapshots.KindCommitted {
			continue
		}
		if err := s.n.DeleteVolume(ctx, v.ID); err != nil && !errors.Is(err, slerrdefs.ErrNotFound) {
			errs = append(errs, fmt.Errorf("cleanup volume %s: %w", v.ID, s.mapError(err)))
			continue
		}
		s.log.Info("snapshot-volume-cleaned", "volume", v.ID)
	}
	// Records go in a write transaction: a record is written in the transaction
	// that commits its snapshot (Prepare of a remote snapshot, Commit), so none is
	// half-way while this one runs, and none written after the walk above, for a
	// snapshot committed since, is taken for garbage (it was: a record of a
	// concurrent pull was removed, even its temporary file before its rename).
	err = s.ms.WithTransaction(ctx, true, func(ctx context.Context) error {
		committed := map[string]bool{}
		err := storage.WalkInfo(ctx, func(ctx context.Context, info snapshots.Info) error {
			id, _, _, err := storage.GetInfo(ctx, info.Name)
			if err == nil && info.Kind == snapshots.KindCommitted {
				committed[id] = true
			}
			return err
		})
		if err != nil {
			return err
		}
		ents, _ := os.ReadDir(s.recDir)
		for _, e := range ents {
			id, ok := strings.CutSuffix(e.Name(), ".json")
			if ok && !strings.HasPrefix(id, ".") && !committed[id] {
				os.Remove(filepath.Join(s.recDir, e.Name()))
			}
		}
		return nil
	})
	if err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Close closes the metadata store. Volumes stay (and stay mounted): they belong to
// the node, which outlives the gRPC service.
func (s *Snapshotter) Close() error { return s.ms.Close() }

func (s *Snapshotter) recordPath(id string) string { return filepath.Join(s.recDir, id+".json") }

func (s *Snapshotter) readRecord(id string) (record, error) {
	var r record
	b, err := os.ReadFile(s.recordPath(id))
	if err != nil {
		return r, fmt.Errorf("snapshot record %s: %w", id, errdefs.ErrNotFound)
	}
	if err := json.Unmarshal(b, &r); err != nil || store.CheckDigest(r.Snapshot) != nil {
		return r, fmt.Errorf("snapshot record %s is corrupt: %v", id, err)
	}
	return r, nil
}

// writeRecord writes a record atomically and durably (package atomicfile).
func (s *Snapshotter) writeRecord(id string, r record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(s.recordPath(id), b, 0o600)
}

// Warm makes the blank base ahead of the first pull (slackerd calls it in the
// background at start): a cold node then clones it in O(1) when containerd prepares
// its first layer, instead of running mkfs in the pull. A Prepare that arrives while
// it runs waits for it rather than making a second one.
func (s *Snapshotter) Warm(ctx context.Context) {
	if _, err := s.blankBase(ctx); err != nil {
		s.log.Warn("blank-base-warm-failed", "err", err, "action", "made on the first pull instead")
	}
}

// blankBase returns the blank ext4 snapshot first layers start from: mkfs, with
// lost+found removed (a layer never has it, and containerd compares trees exactly).
// It is made once and remembered in base.json.
func (s *Snapshotter) blankBase(ctx context.Context) (digest.Digest, error) {
	s.baseMu.Lock()
	defer s.baseMu.Unlock()
	if s.base != "" {
		return s.base, nil
	}
	path := filepath.Join(s.o.Dir, "base.json")
	var saved struct {
		Size     int64         `json:"size"`
		Snapshot digest.Digest `json:"snapshot"`
	}
	// The size recorded is the filesystem's (Options.Size or the node's default);
	// a record written before it was, with 0 for the default, still matches.
	if b, err := os.ReadFile(path); err == nil && json.Unmarshal(b, &saved) == nil &&
		(saved.Size == s.baseSize() || saved.Size == s.o.Size) {
		if _, err := s.n.Map(ctx, saved.Snapshot); err == nil {
			s.base = saved.Snapshot
			return s.base, nil
		}
		s.log.Warn("blank-base-missing", "snapshot", saved.Snapshot, "reason", "not in the store; making a new one")
	}
	if d, ok := s.sharedBase(ctx); ok {
		saved.Size, saved.Snapshot = s.baseSize(), d
		b, _ := json.Marshal(saved)
		if err := atomicfile.WriteFile(path, b, 0o600); err != nil {
			return "", err
		}
		s.base = d
		s.log.Info("blank-base-found", "snapshot", d, "record", s.baseRefName())
		return s.base, nil
	}
	start := time.Now()
	mk, err := s.n.MakeFilesystem(ctx, s.o.Size)
	if err != nil {
		return "", fmt.Errorf("make the blank filesystem: %w", s.mapError(err))
	}
	vid := s.o.VolumePrefix + "base-" + fmt.Sprint(time.Now().UnixNano())
	if _, err := s.n.CreateVolume(ctx, node.CreateOptions{ID: vid, Snapshot: mk.ID,
		Labels: map[string]string{labels.Kind: labels.KindContainerdBase}}); err != nil {
		return "", s.mapError(err)
	}
	defer s.deleteVolume(context.WithoutCancel(ctx), vid)
	v, err := s.n.MountVolume(ctx, vid, false)
	if err != nil {
		return "", s.mapError(err)
	}
	if err := os.Remove(filepath.Join(v.Mountpoint, "lost+found")); err != nil && !os.IsNotExist(err) {
		return "", fmt.Errorf("make the blank filesystem: %w", err)
	}
	if err := s.n.UnmountVolume(ctx, vid); err != nil {
		return "", s.mapError(err)
	}
	res, err := s.n.SnapshotVolume(ctx, vid, node.SnapshotOptions{})
	if err != nil {
		return "", s.mapError(err)
	}
	saved.Size, saved.Snapshot = s.baseSize(), res.ID
	b, _ := json.Marshal(saved)
	if err := atomicfile.WriteFile(path, b, 0o600); err != nil {
		return "", err
	}
	s.base = res.ID
	s.log.Info("blank-base-made", "snapshot", res.ID, "took", time.Since(start))
	if refs, ok := s.n.Store().(store.Refs); ok {
		if err := refs.PutRef(ctx, s.baseRefName(), b); err != nil {
			s.log.Warn("blank-base-not-shared", "record", s.baseRefName(), "err", err)
		}
	}
	return s.base, nil
}

// baseSize is the size of the blank base's filesystem: Options.Size, or the
// node's default. Records of the base name and hold this size, so that a node
// left at the default and one set to the default's value share one base.
func (s *Snapshotter) baseSize() int64 {
	if s.o.Size > 0 {
		return s.o.Size
	}
	return s.n.DefaultSize()
}

// baseRefName names the store record of the blank base that the nodes of a store
// share, by the size of its filesystem (baseSize).
func (s *Snapshotter) baseRefName() string {
	return fmt.Sprintf("containerd/blank-base/%d", s.baseSize())
}

// sharedBase returns the blank base another node of the store made and recorded,
// if there is one and its map is in the store. Every node then starts first
// layers from the same base (their snapshots are the same, and shared), and a
// new node does not run mkfs and snapshot a blank volume (0.4 s of its cores,
// measured on a 2-core machine) at its start.
func (s *Snapshotter) sharedBase(ctx context.Context) (digest.Digest, bool) {
	refs, ok := s.n.Store().(store.Refs)
	if !ok {
		return "", false
	}
	b, err := refs.GetRef(ctx, s.baseRefName())
	if err != nil {
		if !errors.Is(err, slerrdefs.ErrNotFound) {
			s.log.Warn("blank-base-record-unreadable", "record", s.baseRefName(), "err", err)
		}
		return "", false
	}
	var rec struct {
		Size     int64         `json:"size"`
		Snapshot digest.Digest `json:"snapshot"`
	}
	// The record's size is its filesystem's; 0 in records written before it was,
	// by a node at its default, which the record's name says was this size.
	if json.Unmarshal(b, &rec) != nil || (rec.Size != s.baseSize() && rec.Size != 0) || rec.Snapshot.Validate() != nil {
		s.log.Warn("blank-base-record-unreadable", "record", s.baseRefName(), "err", "malformed")
		return "", false
	}
	if _, err := s.n.Map(ctx, rec.Snapshot); err != nil {
		s.log.Warn("blank-base-missing", "snapshot", rec.Snapshot, "reason", "recorded, not in the store; making a new one")
		return "", false
	}
	return rec.Snapshot, true
}
