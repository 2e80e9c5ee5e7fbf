package graphdriver

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/opencontainers/go-digest"
	"golang.org/x/sys/unix"

	"github.com/slacker-dev/slacker/internal/archive"
	"github.com/slacker-dev/slacker/internal/atomicfile"
	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/image"
	"github.com/slacker-dev/slacker/internal/labels"
	"github.com/slacker-dev/slacker/internal/node"
)

// unsupported ends the message of an errdefs.ErrUnsupported error of the driver.
const unsupported = "not supported by the slacker graph driver"

// Options configure a Driver.
type Options struct {
	// Root is the driver's state directory (layer records); slackerd uses
	// <state root>/graphdriver.
	Root string
	// Store is the location of the node's store, written into Slacker layers.
	Store string
	// SharedStore says that the nodes pulling what this node pushes use this node's
	// store: Diff of a container then makes a Slacker layer. Otherwise Diff makes an
	// ordinary tar that any Docker can apply.
	SharedStore bool
	// Size is the virtual size of the blank filesystem under base layers (0: the
	// node's default).
	Size   int64
	Logger *slog.Logger
	// OnError, if set, is told of every error the plugin answers dockerd with
	// (slackerd's metrics count them by kind).
	OnError func(err error)
}

// Driver keeps Docker's layers as records naming snapshots of one node. It is safe
// for concurrent use.
type Driver struct {
	n   *node.Node
	o   Options
	log *slog.Logger

	mu     sync.Mutex
	layers map[string]*layer

	baseMu sync.Mutex
}

// layer is one Docker layer (an image layer, or a container's "-init" or read-write
// layer).
type layer struct {
	mu   sync.Mutex // serializes the layer's operations; never held across two layers
	rec  record
	refs int // Get (and internal views) minus Put
	gone bool
}

// record is a layer's persistent state (<Root>/layers/<id>.json).
type record struct {
	ID     string `json:"id"`
	Parent string `json:"parent,omitempty"`
	RW     bool   `json:"rw,omitempty"` // made by CreateReadWrite: Get mounts it read-write
	// Snapshot is the layer's content, unless Dirty. Empty: a base layer whose blank
	// filesystem is not made yet (a Slacker layer applied to it never needs one).
	Snapshot digest.Digest `json:"snapshot,omitempty"`
	// Volume is the node volume holding the layer while it is used (made at the first
	// Get, a clone of Snapshot).
	Volume string `json:"volume,omitempty"`
	// Dirty says Volume may differ from Snapshot (it was mounted read-write).
	Dirty bool `json:"dirty,omitempty"`
	// Slacker is the Slacker layer this layer was applied from, verbatim, and
	// Kind its format: kindMarker (this package's, made by commits) or kindImage
	// (package image's, pushed by `slacker push`).
	Slacker []byte `json:"slacker,omitempty"`
	Kind    string `json:"kind,omitempty"`
	Size    int64  `json:"size,omitempty"`
	// Mode is node.RootShared for a container's layer made as a shared root: its
	// Volume, made by CreateReadWrite and kept until Remove, is the layer (its
	// upper layer holds the layer's changes), and Snapshot is the image it stands
	// on. Empty for every other layer (block volumes, as above).
	Mode node.RootMode `json:"mode,omitempty"`
	// ParentVolume, for a shared layer, is the shared root of its parent layer that
	// it stands on (a container on its init layer); empty when it stands on
	// Snapshot alone.
	ParentVolume string    `json:"parent_volume,omitempty"`
	Created      time.Time `json:"created"`
}

// Formats of Slacker layers.
const (
	kindMarker = "marker"
	kindImage  = "image"
)

var idPattern = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,119}$`)

func volumeID(id string) string { return "docker-" + id }

// shared reports whether l is a shared root (record.Mode). A layer's mode never
// changes, so it is read without the layer's lock.
func (l *layer) shared() bool { return l.rec.Mode == node.RootShared }

// optRootMode is the one storage option (docker run --storage-opt) the driver
// takes, for a container's layers: root-mode=shared or root-mode=block.
const optRootMode = "root-mode"

// parseStorageOpt returns the root mode a CreateReadWrite's storage options ask
// for ("": none asked).
func parseStorageOpt(rw bool, opts map[string]string) (node.RootMode, error) {
	var other []string
	var mode node.RootMode
	for k, v := range opts {
		if k != optRootMode || !rw {
			other = append(other, k+"="+v)
			continue
		}
		m, err := node.ParseRootMode(v)
		if err != nil || m == "" {
			return "", errdefs.Errorf(errdefs.ErrInvalid, "storage option %s=%q: use %s=%s (a read-only mount of the image shared "+
				"by its containers, an overlay per container) or %s=%s (a block-level clone per container)",
				optRootMode, v, optRootMode, node.RootShared, optRootMode, node.RootBlock)
		}
		mode = m
	}
	if len(other) > 0 {
		sort.Strings(other)
		what := "a container's layer takes only " + optRootMode + "=shared or " + optRootMode + "=block"
		if !rw {
			what = "an image layer takes none"
		}
		return "", errdefs.Errorf(errdefs.ErrUnsupported, "storage options %v are %s (%s)", other, unsupported, what)
	}
	return mode, nil
}

// Open opens the driver's state on n, reconciling it with the node: volumes left
// mounted by a previous run are unmounted (Docker calls Get again), volumes no record
// names are deleted (shared roots before those they stand on), and block layers
// whose volume is gone fall back to their snapshot; a shared layer whose root is
// gone keeps its name, logged lost (the next Get makes an empty one if the node
// still has none).
func Open(ctx context.Context, n *node.Node, o Options) (*Driver, error) {
	if o.Root == "" {
		return nil, fmt.Errorf("graph driver: no state directory")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	d := &Driver{n: n, o: o, log: o.Logger, layers: map[string]*layer{}}
	dir := filepath.Join(o.Root, "layers")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("graph driver: %w", err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("graph driver: %w", err)
	}
	vols := map[string]node.VolumeInfo{}
	for _, v := range n.Volumes() {
		if v.Labels[labels.Kind] == labels.KindDocker {
			vols[v.ID] = v
		}
	}
	used := map[string]bool{}
	for _, e := range ents {
		name := e.Name()
		if !strings.HasSuffix(name, ".json") {
			os.Remove(filepath.Join(dir, name)) // a temporary file of an interrupted write
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		var rec record
		if err == nil {
			err = json.Unmarshal(b, &rec)
		}
		if err != nil || rec.ID+".json" != name {
			d.log.Error("graphdriver-record-unreadable", "file", name, "err", err)
			continue
		}
		l := &layer{rec: rec}
		if rec.Volume != "" {
			v, ok := vols[rec.Volume]
			switch {
			case !ok && l.shared():
				// Its upper layer is the layer: keep the name, so that a root the node
				// loads again later is still this layer's (Get makes an empty one if
				// there is none).
				d.log.Error("graphdriver-volume-lost", "layer", rec.ID, "volume", rec.Volume, "mode", node.RootShared)
			case !ok:
				if rec.Dirty {
					d.log.Error("graphdriver-volume-lost", "layer", rec.ID, "volume", rec.Volume, "snapshot", rec.Snapshot)
				}
				l.rec.Volume, l.rec.Dirty = "", false
			case !rec.RW:
				// An image layer's volume is only a view: drop it.
				if err := n.DeleteVolume(ctx, v.ID); err != nil {
					return nil, fmt.Errorf("graph driver: %w", err)
				}
				delete(vols, v.ID)
				l.rec.Volume = ""
			default:
				used[v.ID] = true
				if v.Mountpoint != "" {
					if err := n.UnmountVolume(ctx, v.ID); err != nil {
						return nil, fmt.Errorf("graph driver: %w", err)
					}
				}
			}
			if err := d.save(&l.rec); err != nil {
				return nil, err
			}
		}
		d.layers[rec.ID] = l
	}
	// Volumes no record names, those standing on others (shared roots) first.
	var orphans []string
	for id := range vols {
		if !used[id] {
			orphans = append(orphans, id)
		}
	}
	depth := func(id string) int {
		n := 0
		for p := vols[id].Parent; p != "" && n < len(vols); p = vols[p].Parent {
			n++
		}
		return n
	}
	sort.Slice(orphans, func(i, j int) bool { return depth(orphans[i]) > depth(orphans[j]) })
	for _, id := range orphans {
		err := n.DeleteVolume(ctx, id)
		switch {
		case errors.Is(err, errdefs.ErrBusy):
			// A layer's root stands on it: a record lost by hand. Keep it.
			d.log.Warn("graphdriver-orphan-volume-kept", "volume", id, "err", err)
		case err != nil && !errors.Is(err, errdefs.ErrNotFound):
			return nil, fmt.Errorf("graph driver: %w", err)
		default:
			d.log.Warn("graphdriver-orphan-volume-deleted", "volume", id)
		}
	}
	d.log.Info("graphdriver-ready", "layers", len(d.layers), "shared_store", o.SharedStore)
	return d, nil
}

func (d *Driver) recordPath(id string) string { return filepath.Join(d.o.Root, "layers", id+".json") }

func (d *Driver) save(r *record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(d.recordPath(r.ID), b, 0o600); err != nil {
		return fmt.Errorf("save layer %s: %w", r.ID, err)
	}
	return nil
}

func (d *Driver) lookup(id string) (*layer, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	l, ok := d.layers[id]
	if !ok {
		return nil, errdefs.Errorf(errdefs.ErrNotFound, "no such layer: %s", id)
	}
	return l, nil
}

// Init checks what dockerd asks for: no storage options, no user-namespace remapping.
func (d *Driver) Init(home string, opts []string, remapped bool) error {
	if remapped {
		return errdefs.Errorf(errdefs.ErrUnsupported, "user namespace remapping (userns-remap) is %s", unsupported)
	}
	if len(opts) > 0 {
		return errdefs.Errorf(errdefs.ErrUnsupported, "storage options %q are %s (configure slackerd instead)", opts, unsupported)
	}
	if home != "" {
		if err := os.MkdirAll(home, 0o700); err != nil {
			return err
		}
	}
	d.log.Info("graphdriver-init", "home", home)
	return nil
}

// base returns the blank filesystem under every base layer, making it once.
func (d *Driver) base(ctx context.Context) (digest.Digest, error) {
	d.baseMu.Lock()
	defer d.baseMu.Unlock()
	p := filepath.Join(d.o.Root, "base.json")
	var st struct {
		Snapshot digest.Digest `json:"snapshot"`
		Size     int64         `json:"size"`
	}
	if b, err := os.ReadFile(p); err == nil && json.Unmarshal(b, &st) == nil && st.Size == d.o.Size {
		if _, err := d.n.Map(ctx, st.Snapshot); err == nil {
			return st.Snapshot, nil
		}
	}
	res, err := d.n.MakeFilesystem(ctx, d.o.Size)
	if err != nil {
		return "", fmt.Errorf("make the base filesystem: %w", err)
	}
	st.Snapshot, st.Size = res.ID, d.o.Size
	b, _ := json.Marshal(st)
	if err := atomicfile.WriteFile(p, b, 0o600); err != nil {
		return "", err
	}
	d.log.Info("graphdriver-base-made", "snapshot", res.ID)
	return res.ID, nil
}

// Create makes layer id on parent in O(1). rw marks a container layer
// (CreateReadWrite), which Get mounts read-write; its storage option root-mode
// (else its parent's mode if the parent is a container layer too, else the node's
// container root mode) says how. A block layer is its parent's snapshot
// (snapshotting the parent first only if it was written since its last snapshot),
// cloned when Get is called. A shared layer is made at once as a shared root: on
// its parent's shared root if it has one (a container on its init layer), else on
// its parent's snapshot, whose read-only mount every shared root of that image on
// the node shares.
func (d *Driver) Create(ctx context.Context, id, parent string, rw bool, storageOpt map[string]string) error {
	mode, err := parseStorageOpt(rw, storageOpt)
	if err != nil {
		return err
	}
	if !idPattern.MatchString(id) {
		return errdefs.Errorf(errdefs.ErrInvalid, "layer ID %q: invalid", id)
	}
	if d.Exists(id) {
		return errdefs.Errorf(errdefs.ErrExists, "layer already exists: %s", id)
	}
	var p *layer
	if parent != "" {
		if p, err = d.lookup(parent); err != nil {
			return fmt.Errorf("create layer %s: %w", id, err)
		}
	}
	if rw && mode == "" {
		mode = d.n.RootMode()
		if p != nil && p.rec.RW {
			mode = node.RootBlock
			if p.shared() {
				mode = node.RootShared
			}
		}
	}
	rec := record{ID: id, Parent: parent, RW: rw, Created: time.Now().UTC()}
	// A base layer's blank filesystem is made when first needed.
	if p != nil && (!rw || mode != node.RootShared || !p.shared()) {
		if rec.Snapshot, err = d.snapshotOf(ctx, p); err != nil {
			return fmt.Errorf("create layer %s: %w", id, err)
		}
	}
	if rw && mode == node.RootShared {
		if err := d.createShared(ctx, &rec, p); err != nil {
			return fmt.Errorf("create layer %s: %w", id, err)
		}
	}
	l := &layer{rec: rec}
	d.mu.Lock()
	defer d.mu.Unlock()
	_, taken := d.layers[id]
	if !taken {
		err = d.save(&l.rec)
	}
	if taken || err != nil {
		if l.rec.Volume != "" {
			d.n.DeleteVolume(context.WithoutCancel(ctx), l.rec.Volume)
		}
		if taken {
			return errdefs.Errorf(errdefs.ErrExists, "layer already exists: %s", id)
		}
		return err
	}
	d.layers[id] = l
	d.log.Debug("layer-created", "layer", id, "parent", parent, "rw", rw, "snapshot", l.rec.Snapshot, "mode", l.rec.Mode)
	return nil
}

// createShared makes the shared root of rec (a new container layer on p, nil for
// none) and records it in rec.
func (d *Driver) createShared(ctx context.Context, rec *record, p *layer) error {
	rec.Mode, rec.Volume = node.RootShared, volumeID(rec.ID)
	switch {
	case p != nil && p.shared():
		// On the parent's root: its upper layer lies under this one's.
		var err error
		if rec.Snapshot, rec.ParentVolume, err = d.sharedBase(ctx, p); err != nil {
			return err
		}
	case p == nil:
		var err error
		if rec.Snapshot, err = d.base(ctx); err != nil {
			return err
		}
	}
	// A volume of that name is another Create of this ID at work (Open deletes the
	// volumes no record names): not this call's to take.
	if _, err := d.n.CreateVolume(ctx, sharedOptions(*rec)); err != nil {
		return fmt.Errorf("make its shared root: %w", err)
	}
	return nil
}

// sharedOptions are the node options of shared layer rec's root. Startup: the
// first root of an image mounts it, and replays (or records) its start-up trace.
func sharedOptions(rec record) node.CreateOptions {
	return node.CreateOptions{ID: rec.Volume, Snapshot: rec.Snapshot, Mode: node.RootShared, Parent: rec.ParentVolume,
		Startup: true, Labels: map[string]string{labels.Kind: labels.KindDocker, labels.DockerLayer: rec.ID}}
}

// sharedBase returns the image shared layer l stands on and its root, which it
// makes again if the node lost it.
func (d *Driver) sharedBase(ctx context.Context, l *layer) (digest.Digest, string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.gone {
		return "", "", errdefs.Errorf(errdefs.ErrNotFound, "no such layer: %s", l.rec.ID)
	}
	if err := d.ensureSharedLocked(ctx, l); err != nil {
		return "", "", err
	}
	return l.rec.Snapshot, l.rec.Volume, nil
}

// ensureSharedLocked makes shared layer l's root again, empty, if the node has
// none by its name (Open logged it lost).
func (d *Driver) ensureSharedLocked(ctx context.Context, l *layer) error {
	_, err := d.n.Volume(l.rec.Volume)
	if !errors.Is(err, errdefs.ErrNotFound) {
		return err
	}
	if _, err := d.n.CreateVolume(ctx, sharedOptions(l.rec)); err != nil {
		return fmt.Errorf("make the lost root of layer %s again: %w", l.rec.ID, err)
	}
	d.log.Warn("graphdriver-root-remade", "layer", l.rec.ID, "volume", l.rec.Volume, "snapshot", l.rec.Snapshot)
	return nil
}

// snapshotOf returns l's snapshot, snapshotting its volume first if it was written
// since the last one: every child created from an unchanged layer shares one snapshot.
func (d *Driver) snapshotOf(ctx context.Context, l *layer) (digest.Digest, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.gone {
		return "", errdefs.Errorf(errdefs.ErrNotFound, "no such layer: %s", l.rec.ID)
	}
	if l.shared() {
		return d.commitSharedLocked(ctx, l)
	}
	if l.rec.Volume == "" || !l.rec.Dirty {
		return d.resolveLocked(ctx, l)
	}
	start := time.Now()
	res, err := d.n.SnapshotVolume(ctx, l.rec.Volume, node.SnapshotOptions{})
	if err != nil {
		return "", fmt.Errorf("snapshot layer %s: %w", l.rec.ID, err)
	}
	l.rec.Snapshot = res.ID
	l.rec.Dirty = l.refs > 0 // still mounted read-write: it may change again
	if !l.rec.Dirty {
		// The snapshot holds everything the volume does (an init layer once its
		// container is created): the next Get clones it again.
		if err := d.n.DeleteVolume(ctx, l.rec.Volume); err != nil {
			d.log.Warn("graphdriver-volume-delete-failed", "volume", l.rec.Volume, "err", err)
		} else {
			l.rec.Volume = ""
		}
	}
	if err := d.save(&l.rec); err != nil {
		return "", err
	}
	d.log.Info("layer-snapshotted", "layer", l.rec.ID, "snapshot", res.ID, "new_bytes", res.NewBytes, "took", time.Since(start))
	return res.ID, nil
}

// commitSharedLocked snapshots shared layer l's whole content (its image and the
// upper layers of its root and of the roots under it: node.SnapshotVolume), in
// O(data written). The root stays the layer: nothing is recorded.
func (d *Driver) commitSharedLocked(ctx context.Context, l *layer) (digest.Digest, error) {
	if err := d.ensureSharedLocked(ctx, l); err != nil {
		return "", err
	}
	start := time.Now()
	res, err := d.n.SnapshotVolume(ctx, l.rec.Volume, node.SnapshotOptions{})
	if err != nil {
		return "", fmt.Errorf("snapshot layer %s: %w", l.rec.ID, err)
	}
	d.log.Info("layer-snapshotted", "layer", l.rec.ID, "snapshot", res.ID, "mode", node.RootShared, "new_bytes", res.NewBytes,
		"took", time.Since(start))
	return res.ID, nil
}

// resolveLocked returns l's snapshot, making the blank filesystem first for a base
// layer that has none yet.
func (d *Driver) resolveLocked(ctx context.Context, l *layer) (digest.Digest, error) {
	if l.rec.Snapshot != "" {
		return l.rec.Snapshot, nil
	}
	snap, err := d.base(ctx)
	if err != nil {
		return "", fmt.Errorf("layer %s: %w", l.rec.ID, err)
	}
	l.rec.Snapshot = snap
	return snap, d.save(&l.rec)
}

// Remove deletes layer id and its volume. Removing a layer that does not exist is
// not an error.
func (d *Driver) Remove(ctx context.Context, id string) error {
	l, err := d.lookup(id)
	if err != nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.refs > 0 {
		d.log.Warn("layer-removed-while-mounted", "layer", id, "refs", l.refs)
	}
	if l.rec.Volume != "" {
		if err := d.n.DeleteVolume(ctx, l.rec.Volume); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			return fmt.Errorf("remove layer %s: %w", id, err)
		}
	}
	if err := os.Remove(d.recordPath(id)); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("remove layer %s: %w", id, err)
	}
	l.gone, l.refs = true, 0
	d.mu.Lock()
	delete(d.layers, id)
	d.mu.Unlock()
	d.log.Debug("layer-removed", "layer", id)
	return nil
}

// Get mounts layer id and returns its mountpoint. The first Get clones the layer's
// snapshot (O(1)); data is fetched as it is read. Get and Put are counted: the
// layer is unmounted at the last Put.
func (d *Driver) Get(ctx context.Context, id string) (string, error) {
	l, err := d.lookup(id)
	if err != nil {
		return "", err
	}
	return d.acquire(ctx, l, true)
}

// acquire mounts l (read-write for container layers, read-only for image layers)
// and counts one user. A container layer mounted for Docker is marked dirty.
func (d *Driver) acquire(ctx context.Context, l *layer, forDocker bool) (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.gone {
		return "", errdefs.Errorf(errdefs.ErrNotFound, "no such layer: %s", l.rec.ID)
	}
	if l.shared() {
		if err := d.ensureSharedLocked(ctx, l); err != nil {
			return "", err
		}
	} else if l.rec.Volume == "" {
		if _, err := d.resolveLocked(ctx, l); err != nil {
			return "", err
		}
		vid := volumeID(l.rec.ID)
		_, err := d.n.CreateVolume(ctx, node.CreateOptions{ID: vid, Snapshot: l.rec.Snapshot,
			Labels: map[string]string{labels.Kind: labels.KindDocker, labels.DockerLayer: l.rec.ID}})
		if errors.Is(err, errdefs.ErrExists) {
			// Left by a crash between creating it and recording it: it holds nothing
			// the record does not.
			if err = d.n.DeleteVolume(ctx, vid); err == nil {
				_, err = d.n.CreateVolume(ctx, node.CreateOptions{ID: vid, Snapshot: l.rec.Snapshot,
					Labels: map[string]string{labels.Kind: labels.KindDocker, labels.DockerLayer: l.rec.ID}})
			}
		}
		if err != nil {
			return "", fmt.Errorf("clone layer %s: %w", l.rec.ID, err)
		}
		l.rec.Volume, l.rec.Dirty = vid, false
		if err := d.save(&l.rec); err != nil {
			d.n.DeleteVolume(context.WithoutCancel(ctx), vid)
			l.rec.Volume = ""
			return "", err
		}
	}
	start := time.Now()
	// An image layer from package image's Slacker layer shows the layer's own
	// files too (.slacker/image.json, ...): dockerd reassembles the layer from them
	// (tar-split) when it pushes or saves it. The view is the layer's alone: its
	// children clone the snapshot.
	withFiles := !l.rec.RW && l.rec.Kind == kindImage && l.refs == 0
	v, err := d.n.MountVolume(ctx, l.rec.Volume, !l.rec.RW && !withFiles)
	if err != nil {
		return "", fmt.Errorf("mount layer %s: %w", l.rec.ID, err)
	}
	if withFiles {
		if _, err := archive.Apply(ctx, v.Mountpoint, bytes.NewReader(l.rec.Slacker), archive.Options{Logger: d.log}); err != nil {
			d.n.UnmountVolume(context.WithoutCancel(ctx), l.rec.Volume)
			return "", fmt.Errorf("mount layer %s: %w", l.rec.ID, err)
		}
	}
	l.refs++
	if forDocker && l.rec.RW && !l.rec.Dirty {
		l.rec.Dirty = true
		if err := d.save(&l.rec); err != nil {
			return "", err
		}
	}
	d.log.Debug("layer-mounted", "layer", l.rec.ID, "mountpoint", v.Mountpoint, "refs", l.refs, "took", time.Since(start))
	return v.Mountpoint, nil
}

// Put undoes one Get. A Put without a Get is logged and ignored, as Docker's own
// drivers do.
func (d *Driver) Put(ctx context.Context, id string) error {
	l, err := d.lookup(id)
	if err != nil {
		return err
	}
	return d.release(ctx, l)
}

func (d *Driver) release(ctx context.Context, l *layer) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.gone {
		return nil
	}
	if l.refs == 0 {
		d.log.Warn("layer-put-unmounted", "layer", l.rec.ID)
		return nil
	}
	l.refs--
	if l.refs > 0 {
		return nil
	}
	return d.unmountLocked(ctx, l)
}

// unmountLocked unmounts l. A volume that holds nothing its snapshot does not (an
// image layer's view, a block container layer mounted only to be read) is
// deleted; a shared layer's root is the layer, and stays.
func (d *Driver) unmountLocked(ctx context.Context, l *layer) error {
	if l.rec.Volume == "" {
		return nil
	}
	if !l.shared() && (!l.rec.RW || !l.rec.Dirty) {
		if err := d.n.DeleteVolume(ctx, l.rec.Volume); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			return fmt.Errorf("unmount layer %s: %w", l.rec.ID, err)
		}
		l.rec.Volume = ""
		return d.save(&l.rec)
	}
	if err := d.n.UnmountVolume(ctx, l.rec.Volume); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return fmt.Errorf("unmount layer %s: %w", l.rec.ID, err)
	}
	return nil
}

// Exists reports whether layer id exists.
func (d *Driver) Exists(id string) bool {
	_, err := d.lookup(id)
	return err == nil
}

// Status is what `docker info` shows under the storage driver.
func (d *Driver) Status() [][2]string {
	d.mu.Lock()
	ls := make([]*layer, 0, len(d.layers))
	for _, l := range d.layers {
		ls = append(ls, l)
	}
	d.mu.Unlock()
	var lazy, mounted int
	for _, l := range ls {
		if !l.mu.TryLock() {
			continue // busy (a layer being applied): docker info does not wait for it
		}
		if l.rec.Slacker != nil {
			lazy++
		}
		if l.refs > 0 {
			mounted++
		}
		l.mu.Unlock()
	}
	mode := "off: commits make ordinary layer tars"
	if d.o.SharedStore {
		mode = "on: commits make Slacker layers (store shared)"
	}
	backing := "ext4 on Slacker volumes (block-level copy-on-write, data fetched as read)"
	roots := "block: a block-level clone of the image per container (--storage-opt root-mode=shared for a shared one)"
	if d.n.RootMode() == node.RootShared {
		backing = "ext4 on Slacker volumes (data fetched as read), under overlayfs for containers"
		roots = "shared: one read-only mount of each image per node, an overlay per container (--storage-opt root-mode=block for a block clone)"
	}
	return [][2]string{
		{"Backing Filesystem", backing},
		{"Container Roots", roots},
		{"Store", d.o.Store},
		{"Slacker Layers", mode},
		{"Layers", strconv.Itoa(len(ls))},
		{"Layers From Slacker Layers", strconv.Itoa(lazy)},
		{"Mounted", strconv.Itoa(mounted)},
	}
}

// Metadata is what `docker inspect` shows as GraphDriver.Data.
func (d *Driver) Metadata(ctx context.Context, id string) (map[string]string, error) {
	l, err := d.lookup(id)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	m := map[string]string{"Snapshot": l.rec.Snapshot.String(), "SlackerLayer": strconv.FormatBool(l.rec.Slacker != nil)}
	if l.rec.RW {
		m["RootMode"] = string(node.RootBlock)
		if l.shared() {
			m["RootMode"] = string(node.RootShared) // Snapshot is then the image it stands on
		}
	}
	if l.rec.Volume != "" {
		m["Volume"] = l.rec.Volume
		if v, err := d.n.Volume(l.rec.Volume); err == nil {
			if v.Mountpoint != "" {
				m["Mountpoint"] = v.Mountpoint
			}
			if v.Upper != "" {
				m["UpperDir"] = v.Upper
			}
		}
	}
	return m, nil
}

// Cleanup unmounts every layer (dockerd calls it when it stops).
func (d *Driver) Cleanup(ctx context.Context) error {
	d.mu.Lock()
	ls := make([]*layer, 0, len(d.layers))
	for _, l := range d.layers {
		ls = append(ls, l)
	}
	d.mu.Unlock()
	var errs []error
	for _, l := range ls {
		l.mu.Lock()
		if l.refs > 0 && !l.gone {
			l.refs = 0
			if err := d.unmountLocked(ctx, l); err != nil {
				errs = append(errs, err)
			}
		}
		l.mu.Unlock()
	}
	d.log.Info("graphdriver-cleanup", "layers", len(ls))
	return errors.Join(errs...)
}

// ApplyDiff applies a layer tar to layer id (just created on parent) and returns its
// size. A Slacker layer is only recorded: its snapshot is cloned when Get is called.
// An ordinary layer is applied into a clone of the parent, which is snapshotted.
func (d *Driver) ApplyDiff(ctx context.Context, id, parent string, r io.Reader) (int64, error) {
	l, err := d.lookup(id)
	if err != nil {
		return 0, err
	}
	if l.shared() {
		return 0, errdefs.Errorf(errdefs.ErrUnsupported, "apply a layer tar to container layer %s (a shared root): %s", id, unsupported)
	}
	br := bufio.NewReaderSize(r, maxLayerPeek)
	prefix, _ := br.Peek(maxLayerPeek)
	switch {
	case IsSlackerLayer(prefix):
		b, err := io.ReadAll(io.LimitReader(br, maxLayerPeek+1))
		if err != nil {
			return 0, fmt.Errorf("read layer: %w", err)
		}
		m, err := DecodeLayer(b)
		if err != nil {
			return 0, err
		}
		return d.applySlacker(ctx, l, m, b, kindMarker)
	case isImageLayer(prefix):
		// Probably the one layer of an image pushed by `slacker push`: read it whole
		// (it is bounded) and look for the descriptor.
		b, err := io.ReadAll(io.LimitReader(br, image.MaxLayerSize+1))
		if err != nil {
			return 0, fmt.Errorf("read layer: %w", err)
		}
		desc, err := image.DecodeLayer(bytes.NewReader(b))
		if err == nil {
			m := Marker{Version: MarkerVersion, Snapshot: desc.Snapshot, Size: desc.DataSize}
			return d.applySlacker(ctx, l, m, b, kindImage)
		}
		if !errors.Is(err, image.ErrNotSlackerLayer) {
			return 0, err
		}
		return d.applyTar(ctx, l, io.MultiReader(bytes.NewReader(b), br))
	}
	return d.applyTar(ctx, l, br)
}

// isImageLayer reports whether a layer tar starts like package image's Slacker layer
// (the .slacker/ directory, then the descriptor).
func isImageLayer(prefix []byte) bool {
	hdr, err := tar.NewReader(bytes.NewReader(prefix)).Next()
	if err != nil {
		return false
	}
	name := strings.TrimPrefix(hdr.Name, "./")
	return name == ".slacker/" || name == image.LayerDescriptorPath
}

func (d *Driver) applySlacker(ctx context.Context, l *layer, m Marker, b []byte, kind string) (int64, error) {
	if _, err := d.n.Map(ctx, m.Snapshot); err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			where := "another store"
			if m.Store != "" {
				where = "store " + m.Store
			}
			return 0, errdefs.Errorf(errdefs.ErrNotFound, "this Slacker layer names snapshot %s, which is not in this node's store (%s) "+
				"but in %s: run this slackerd on that store (--store), or pull an image made where "+
				"graphdriver.shared_store is off, whose layers are ordinary tars (docs/docker.md)",
				m.Snapshot, d.o.Store, where)
		}
		return 0, fmt.Errorf("Slacker layer's snapshot %s: %w", m.Snapshot, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.refs > 0 {
		return 0, errdefs.Errorf(errdefs.ErrBusy, "apply to layer %s: layer in use", l.rec.ID)
	}
	if l.rec.Volume != "" {
		if err := d.n.DeleteVolume(ctx, l.rec.Volume); err != nil {
			return 0, err
		}
		l.rec.Volume = ""
	}
	l.rec.Snapshot, l.rec.Slacker, l.rec.Kind, l.rec.Size, l.rec.Dirty = m.Snapshot, b, kind, m.Size, false
	if err := d.save(&l.rec); err != nil {
		return 0, err
	}
	d.log.Info("slacker-layer-applied", "layer", l.rec.ID, "lazy", true, "snapshot", m.Snapshot, "size", m.Size, "format", kind)
	return m.Size, nil
}

func (d *Driver) applyTar(ctx context.Context, l *layer, r io.Reader) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.refs > 0 {
		return 0, errdefs.Errorf(errdefs.ErrBusy, "apply to layer %s: layer in use", l.rec.ID)
	}
	start := time.Now()
	vid := l.rec.Volume
	if vid == "" {
		if _, err := d.resolveLocked(ctx, l); err != nil {
			return 0, err
		}
		vid = volumeID(l.rec.ID)
		if _, err := d.n.CreateVolume(ctx, node.CreateOptions{ID: vid, Snapshot: l.rec.Snapshot,
			Labels: map[string]string{labels.Kind: labels.KindDocker, labels.DockerLayer: l.rec.ID}}); err != nil {
			return 0, fmt.Errorf("clone the parent of layer %s: %w", l.rec.ID, err)
		}
	}
	cleanup := func() {
		d.n.DeleteVolume(context.WithoutCancel(ctx), vid)
		l.rec.Volume, l.rec.Dirty = "", false
		d.save(&l.rec)
	}
	v, err := d.n.MountVolume(ctx, vid, false)
	if err != nil {
		cleanup()
		return 0, fmt.Errorf("mount layer %s: %w", l.rec.ID, err)
	}
	st, err := archive.Apply(ctx, v.Mountpoint, r, archive.Options{AllowDevices: true, Logger: d.log})
	if err != nil {
		cleanup()
		return 0, fmt.Errorf("apply layer %s: %w", l.rec.ID, err)
	}
	io.Copy(io.Discard, r) // tar padding after the end marker
	if err := d.n.UnmountVolume(ctx, vid); err != nil {
		cleanup()
		return 0, err
	}
	res, err := d.n.SnapshotVolume(ctx, vid, node.SnapshotOptions{})
	if err != nil {
		cleanup()
		return 0, fmt.Errorf("snapshot layer %s: %w", l.rec.ID, err)
	}
	if err := d.n.DeleteVolume(ctx, vid); err != nil {
		d.log.Warn("graphdriver-volume-delete-failed", "volume", vid, "err", err)
	}
	l.rec.Volume, l.rec.Dirty, l.rec.Snapshot, l.rec.Slacker, l.rec.Kind, l.rec.Size = "", false, res.ID, nil, "", st.Bytes
	if err := d.save(&l.rec); err != nil {
		return 0, err
	}
	// Not lazy, and said so: an ordinary layer is copied in whole.
	d.log.Info("layer-applied", "layer", l.rec.ID, "lazy", false, "files", st.Files, "bytes", st.Bytes, "snapshot", res.ID,
		"new_bytes", res.NewBytes, "took", time.Since(start))
	return st.Bytes, nil
}

// views mounts each layer's tree (nil: no tree) to be read, and returns the
// mountpoints and a release. A container layer is its own volume, mounted or not; an
// image layer gets a private read-only clone of its snapshot, so that what Docker's
// Get adds to its view (the files of a Slacker layer) is never compared.
func (d *Driver) views(ctx context.Context, ls ...*layer) ([]string, func(), error) {
	paths := make([]string, len(ls))
	var undo []func()
	release := func() {
		for _, f := range undo {
			f()
		}
	}
	for i, l := range ls {
		if l == nil {
			continue
		}
		l.mu.Lock()
		rw := l.rec.RW
		l.mu.Unlock()
		if rw {
			p, err := d.acquire(ctx, l, false)
			if err != nil {
				release()
				return nil, nil, err
			}
			undo = append(undo, func() {
				if err := d.release(context.WithoutCancel(ctx), l); err != nil {
					d.log.Warn("graphdriver-release-failed", "layer", l.rec.ID, "err", err)
				}
			})
			paths[i] = p
			continue
		}
		snap, err := d.snapshotOf(ctx, l)
		if err != nil {
			release()
			return nil, nil, err
		}
		vid := "docker-view-" + randomHex()
		v, err := d.n.CreateVolume(ctx, node.CreateOptions{ID: vid, Snapshot: snap,
			Labels: map[string]string{labels.Kind: labels.KindDocker}}) // no record names it: Open deletes it after a crash
		if err == nil {
			undo = append(undo, func() {
				if err := d.n.DeleteVolume(context.WithoutCancel(ctx), vid); err != nil {
					d.log.Warn("graphdriver-volume-delete-failed", "volume", vid, "err", err)
				}
			})
			v, err = d.n.MountVolume(ctx, vid, true)
		}
		if err != nil {
			release()
			return nil, nil, fmt.Errorf("view of layer %s: %w", l.rec.ID, err)
		}
		paths[i] = v.Mountpoint
	}
	return paths, release, nil
}

// pair looks up id and parent ("" for none).
func (d *Driver) pair(id, parent string) (*layer, *layer, error) {
	l, err := d.lookup(id)
	if err != nil {
		return nil, nil, err
	}
	var p *layer
	if parent != "" {
		if p, err = d.lookup(parent); err != nil {
			return nil, nil, err
		}
	}
	return l, p, nil
}

func (d *Driver) changes(ctx context.Context, l, p *layer) ([]change, error) {
	if v, ok := d.upperOf(l, p); ok {
		return upperChanges(ctx, v)
	}
	paths, release, err := d.views(ctx, l, p)
	if err != nil {
		return nil, err
	}
	defer release()
	return treeChanges(ctx, paths[0], paths[1])
}

// Changes lists what layer id changed relative to parent.
func (d *Driver) Changes(ctx context.Context, id, parent string) ([]Change, error) {
	l, p, err := d.pair(id, parent)
	if err != nil {
		return nil, err
	}
	cs, err := d.changes(ctx, l, p)
	if err != nil {
		return nil, err
	}
	return publicChanges(cs), nil
}

// DiffSize is the bytes of files layer id adds or changes relative to parent.
func (d *Driver) DiffSize(ctx context.Context, id, parent string) (int64, error) {
	l, p, err := d.pair(id, parent)
	if err != nil {
		return 0, err
	}
	cs, err := d.changes(ctx, l, p)
	if err != nil {
		return 0, err
	}
	return changesSize(cs), nil
}

// Diff returns layer id's changes relative to parent as a layer tar: the Slacker
// layer it was applied from, verbatim; else, with a shared store, a new Slacker layer
// (a snapshot: O(changed blocks)); else an ordinary tar of the changed files.
func (d *Driver) Diff(ctx context.Context, id, parent string) (io.ReadCloser, error) {
	l, p, err := d.pair(id, parent)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	kept := l.rec.Slacker
	if l.rec.Dirty || l.rec.Parent != parent {
		kept = nil
	}
	l.mu.Unlock()
	if kept != nil {
		return io.NopCloser(bytes.NewReader(kept)), nil
	}
	if d.o.SharedStore {
		b, err := d.makeSlackerLayer(ctx, l, p)
		if err != nil {
			return nil, err
		}
		return io.NopCloser(bytes.NewReader(b)), nil
	}
	if v, ok := d.upperOf(l, p); ok {
		return d.upperTar(ctx, l, parent, v)
	}
	paths, release, err := d.views(ctx, l, p)
	if err != nil {
		return nil, err
	}
	cs, err := treeChanges(ctx, paths[0], paths[1])
	if err != nil {
		release()
		return nil, err
	}
	pr, pw := io.Pipe()
	go func() {
		defer release()
		pw.CloseWithError(writeChanges(ctx, pw, paths[0], cs))
	}()
	d.log.Info("layer-diff-tar", "layer", l.rec.ID, "parent", parent, "changes", len(cs))
	return pr, nil
}

// isInit reports whether l is a container's init layer: Docker writes /.dockerenv,
// /etc/hosts and the like into it, under the container's own layer.
func isInit(l *layer) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rec.RW && strings.HasSuffix(l.rec.ID, "-init") && l.rec.Parent != ""
}

// makeSlackerLayer snapshots l and returns the Slacker layer naming that snapshot.
// Docker commits a container by Diff(container, its init layer) and applies the
// result on the image's top layer, so what the init layer added (/.dockerenv, empty
// /etc/hosts, ...) is taken back out of the snapshot, except where the container
// changed it itself.
func (d *Driver) makeSlackerLayer(ctx context.Context, l, p *layer) ([]byte, error) {
	if v, ok := d.upperOf(l, p); ok && isInit(p) {
		return d.makeSharedSlackerLayer(ctx, l, p, v)
	}
	start := time.Now()
	snap, err := d.snapshotOf(ctx, l)
	if err != nil {
		return nil, err
	}
	cs, err := d.changes(ctx, l, p)
	if err != nil {
		return nil, err
	}
	var under digest.Digest
	if p != nil {
		if under, err = d.snapshotOf(ctx, p); err != nil {
			return nil, err
		}
	}
	if p != nil && isInit(p) {
		t, err := d.lookup(p.rec.Parent)
		if err != nil {
			return nil, err
		}
		if snap, err = d.revertInit(ctx, snap, cs, p, t); err != nil {
			return nil, err
		}
		if under, err = d.snapshotOf(ctx, t); err != nil {
			return nil, err
		}
	}
	m := Marker{Version: MarkerVersion, Snapshot: snap, Parent: under, Store: d.o.Store, Size: changesSize(cs)}
	b, err := EncodeLayer(m)
	if err != nil {
		return nil, err
	}
	d.log.Info("slacker-layer-made", "layer", l.rec.ID, "snapshot", snap, "size", m.Size, "took", time.Since(start))
	return b, nil
}

// revertInit returns snap with the init layer p's changes (relative to the image
// layer t) undone where the container (whose changes are cs) left them alone.
func (d *Driver) revertInit(ctx context.Context, snap digest.Digest, cs []change, p, t *layer) (digest.Digest, error) {
	initCh, err := d.changes(ctx, p, t)
	if err != nil {
		return "", err
	}
	// The container's own change of a path wins, and so does its deletion of a
	// directory above it; a directory above that it only modified does not count.
	touched, deleted := map[string]bool{}, map[string]bool{}
	for _, c := range cs {
		touched[c.Path] = true
		if c.Kind == ChangeDelete {
			deleted[c.Path] = true
		}
	}
	var undo []change
	for _, c := range initCh {
		if !touched[c.Path] && !underAny(c.Path, deleted) {
			undo = append(undo, c)
		}
	}
	if len(undo) == 0 {
		return snap, nil
	}
	paths, release, err := d.views(ctx, t)
	if err != nil {
		return "", err
	}
	defer release()
	// The inverse: remove what init added, put back from t what it changed or removed.
	var inv []change
	for _, c := range undo {
		switch c.Kind {
		case ChangeAdd:
			if !underAny(path.Dir(c.Path), addedSet(undo)) {
				inv = append(inv, change{Change: Change{Path: c.Path, Kind: ChangeDelete}})
			}
		case ChangeModify:
			inv = append(inv, change{Change: Change{Path: c.Path, Kind: ChangeModify}})
		case ChangeDelete:
			sub, err := subtree(ctx, paths[0], c.Path)
			if err != nil {
				return "", err
			}
			inv = append(inv, sub...)
		}
	}
	sort.Slice(inv, func(i, j int) bool { return inv[i].Path < inv[j].Path })
	vid := "docker-commit-" + randomHex()
	v, err := d.n.CreateVolume(ctx, node.CreateOptions{ID: vid, Snapshot: snap,
		Labels: map[string]string{labels.Kind: labels.KindDocker}}) // no record names it: Open deletes it after a crash
	if err != nil {
		return "", err
	}
	defer d.n.DeleteVolume(context.WithoutCancel(ctx), vid)
	if v, err = d.n.MountVolume(ctx, vid, false); err != nil {
		return "", err
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeChanges(ctx, pw, paths[0], inv)) }()
	_, err = archive.Apply(ctx, v.Mountpoint, pr, archive.Options{AllowDevices: true, Logger: d.log})
	pr.CloseWithError(errors.New("apply stopped"))
	if err != nil {
		return "", fmt.Errorf("undo the init layer: %w", err)
	}
	if err := d.n.UnmountVolume(ctx, vid); err != nil {
		return "", err
	}
	res, err := d.n.SnapshotVolume(ctx, vid, node.SnapshotOptions{})
	if err != nil {
		return "", err
	}
	d.log.Debug("init-layer-undone", "paths", len(inv), "snapshot", res.ID)
	return res.ID, nil
}

func addedSet(cs []change) map[string]bool {
	m := map[string]bool{}
	for _, c := range cs {
		if c.Kind == ChangeAdd {
			m[c.Path] = true
		}
	}
	return m
}

// subtree lists p (an absolute path inside the tree at root) and everything under
// it, as additions read from that tree.
func subtree(ctx context.Context, root, p string) ([]change, error) {
	rootFd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(rootFd)
	dir, base := path.Split(strings.TrimPrefix(p, "/"))
	dfd := rootFd
	if dir != "" {
		if dfd, err = unix.Openat2(rootFd, dir, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS}); err != nil {
			return nil, fmt.Errorf("open %s: %w", dir, err)
		}
		defer unix.Close(dfd)
	}
	df := &differ{ctx: ctx}
	if err := df.added(dfd, base, p); err != nil {
		return nil, err
	}
	for i := range df.out {
		df.out[i].Kind = ChangeModify
	}
	return df.out, nil
}

func randomHex() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}
