package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/opencontainers/go-digest"
	"golang.org/x/sys/unix"

	"github.com/slacker-dev/slacker/internal/archive"
	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/labels"
	"github.com/slacker-dev/slacker/internal/mount"
	"github.com/slacker-dev/slacker/internal/volume"
)

// RootMode says how a container's root filesystem is made from its image.
type RootMode string

const (
	// RootShared: an overlay whose lower layer is the node's one read-only mount
	// of the image's snapshot, shared by every container of the image (so its page
	// cache exists once per node), and whose upper layer, on node-local disk,
	// takes the container's writes. A first write to an image file copies the
	// whole file up, as overlay2 does.
	RootShared RootMode = "shared"
	// RootBlock: a block-level clone of the image's snapshot with an ext4 of its
	// own: copy-on-write of 4 KiB blocks whatever the file's size, and a page
	// cache of its own.
	RootBlock RootMode = "block"
)

// ParseRootMode reads a root mode by name; "" is "" (the default applies).
func ParseRootMode(s string) (RootMode, error) {
	switch m := RootMode(s); m {
	case "", RootShared, RootBlock:
		return m, nil
	}
	return "", fmt.Errorf("unknown container root mode %q: use %q or %q: %w", s, RootShared, RootBlock, errdefs.ErrInvalid)
}

// imageRoot is the node's read-only mount of one image snapshot, shared by the
// container roots (RootShared) made from it.
type imageRoot struct {
	mu sync.Mutex // serializes making and releasing the mount
	x  *vol       // the read-only clone, mounted; nil when there is none
	// tree, with no x, is the directory of the snapshot's local image in
	// LocalTree: the image root is that directory, no mount, no volume.
	tree  string
	users int
	local bool // the root is read through the snapshot's local image (one use of it)
	// While no container uses x, it lingers (Config.ImageRootLinger), its page
	// cache kept for the image's next container: linger ends it, settle starts
	// the image's local image once the root has been idle a while. idle counts
	// the idle spells: a timer of an earlier one does nothing.
	linger, settle *time.Timer
	idle           uint64
	// held: PrepareImage mounted it for a container expected soon, and holds one
	// use of it until that container takes it over (acquireImage) or the hold
	// ends (hold, of generation holds).
	held  atomic.Bool // written under mu; read without it (markIdle)
	hold  *time.Timer
	holds uint64
}

// localImageSettle is how long an image root stays idle before its local image is
// written: containers of the image started in quick succession (a CI job's steps)
// keep the warm root and pay nothing for a local image they would not read. A
// variable for the tests.
var localImageSettle = 10 * time.Second

// imageRootID names the volume of the read-only mount of snapshot s.
func imageRootID(s digest.Digest) string { return "image-" + s.Encoded() }

// sharedRoot is what a RootShared volume has instead of a block volume.
type sharedRoot struct {
	image    digest.Digest
	root     *imageRoot
	upper    string // the container's changes
	work     string // overlayfs's work directory, beside upper
	readOnly bool   // mounted read-only
	// parents are the shared roots this one stands on (CreateOptions.Parent),
	// nearest first: their upper layers lie between its own and the image root.
	parents []*vol
}

// lowers returns the upper layers of x's parents, nearest first.
func (sr *sharedRoot) lowers() []string {
	out := make([]string, 0, len(sr.parents))
	for _, p := range sr.parents {
		out = append(out, p.shared.upper)
	}
	return out
}

// parentsOf returns the chain of shared roots a new root on parent stands on
// (parent first), checking that parent is a shared root of image.
func (n *Node) parentsOf(parent string, image digest.Digest) ([]*vol, error) {
	if parent == "" {
		return nil, nil
	}
	p, err := n.get(parent)
	if err != nil {
		return nil, fmt.Errorf("parent %w", err)
	}
	if p.shared == nil || p.shared.image != image {
		return nil, fmt.Errorf("parent volume %s is not a shared root of %s: %w", parent, image, errdefs.ErrInvalid)
	}
	return append([]*vol{p}, p.shared.parents...), nil
}

// childrenOf returns the IDs of the shared roots standing on x.
func (n *Node) childrenOf(x *vol) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	for id, y := range n.vols {
		if y.shared != nil && len(y.shared.parents) > 0 && y.shared.parents[0] == x {
			out = append(out, id)
		}
	}
	return out
}

// checkShared reports why this node cannot make shared roots, if it cannot.
func (n *Node) checkShared() error {
	n.overlayOnce.Do(func() { n.overlayErr = mount.OverlaySupported() })
	if n.overlayErr != nil {
		return fmt.Errorf("shared container roots need overlayfs: %v; use the root mode %q: %w",
			n.overlayErr, RootBlock, errdefs.ErrUnsupported)
	}
	return nil
}

// acquireImage returns the image root of snapshot, mounting it read-only if no
// container uses it yet, and counts one more user. startup, with fallback, is a
// container's start: a new image root then replays (or records) the image's
// start-up trace, since all of the container's reads of the image go through it.
//
// hold (PrepareImage) marks the use as a hold for a container expected soon from
// before the mount is made, so that the root is never seen idle; the caller
// starts the hold's timer.
func (n *Node) acquireImage(ctx context.Context, snapshot digest.Digest, startup bool, fallback []digest.Digest, hold bool) (_ *imageRoot, err error) {
	n.imagesMu.Lock()
	ir := n.images[snapshot]
	if ir == nil {
		ir = &imageRoot{}
		n.images[snapshot] = ir
	}
	ir.mu.Lock() // held while the mount is made: other users of the image wait for it
	n.imagesMu.Unlock()
	defer ir.mu.Unlock()
	if ir.held.Load() && ir.mountedLocked() {
		// A prepared root: this user (a container, or a new hold) takes over the
		// hold's use of it.
		ir.endHoldLocked()
		ir.users--
	}
	if hold {
		ir.held.Store(true)
		defer func() {
			if err != nil {
				ir.held.Store(false)
			}
		}()
	}
	if ir.users == 0 {
		n.wakeLocked(ir) // a lingering root serves its next container, page cache and all
	}
	if !ir.mountedLocked() {
		id := imageRootID(snapshot)
		// Its volume, mounted already (taken over from the previous slackerd, its
		// containers' overlays on it): the root, whatever local image there is now.
		if x, err := n.get(id); err == nil && n.adopt != nil {
			x.mu.Lock()
			mnt := x.mnt
			x.mu.Unlock()
			if mnt != "" {
				ir.x = x
				ir.users++
				n.log.Info("image-root-adopted", "snapshot", snapshot, "volume", id, "mountpoint", mnt)
				return ir, nil
			}
		}
		// All of it on the node: the kernel reads it there.
		var backing *os.File
		if path, format, ok := n.local.acquire(snapshot); ok && format == LocalTree {
			ir.tree, ir.local = path, true
			ir.users++
			n.log.Info("image-root-mounted", "snapshot", snapshot, "dir", path, "local_image", true, "format", format)
			return ir, nil
		} else if ok {
			f, err := os.Open(path)
			if err != nil {
				n.local.release(snapshot)
			} else {
				backing = f
			}
		}
		local := backing != nil
		_, err := n.CreateVolume(ctx, CreateOptions{ID: id, Snapshot: snapshot, Mode: RootBlock,
			Labels: map[string]string{labels.Kind: labels.KindImageRoot}, backing: backing})
		if local {
			backing.Close() // the FUSE file has a descriptor of its own
		}
		unuse := func() {
			if local {
				n.local.release(snapshot)
				local = false
			}
		}
		if err != nil {
			unuse() // not read through it (a volume left by a previous slackerd reads through this one)
		}
		if err != nil && !errors.Is(err, errdefs.ErrExists) {
			return nil, fmt.Errorf("image root of %s: %w", snapshot, err)
		}
		if err == nil && startup && !local {
			// Before the mount: its first reads are the trace's first chunks. (Read
			// through a local image, it needs no prefetch and sees no reads to record.)
			// Its files are recorded or warmed once it is mounted (x.files).
			if x, err := n.get(id); err == nil {
				x.mu.Lock()
				x.files = newRootFiles(n.log.With("snapshot", snapshot, "volume", id), func() { n.replayReadahead(x) })
				files := x.files
				x.mu.Unlock()
				x.r.BeginStartup(snapshot, fallback, files)
			}
		}
		if _, err := n.MountVolume(ctx, id, true); err != nil {
			if derr := n.DeleteVolume(context.WithoutCancel(ctx), id); derr != nil {
				n.log.Warn("volume-delete-failed", "volume", id, "err", derr)
			}
			unuse()
			return nil, fmt.Errorf("image root of %s: %w", snapshot, err)
		}
		x, err := n.get(id)
		if err != nil {
			unuse()
			return nil, err
		}
		ir.x, ir.local = x, local
		n.log.Info("image-root-mounted", "snapshot", snapshot, "volume", id, "mountpoint", x.mnt,
			"local_image", local)
	}
	ir.users++
	return ir, nil
}

// releaseImage counts one user less of ir. When it had the last, the image root
// lingers for Config.ImageRootLinger, unmounted then if no container took it
// again; after localImageSettle idle, the image's local image is written if all
// of it is on the node, and once it is, the idle root goes at once, so that the
// next one reads through it (localimage.go). No linger: the root goes now.
func (n *Node) releaseImage(ctx context.Context, snapshot digest.Digest, ir *imageRoot) {
	ir.mu.Lock()
	defer ir.mu.Unlock()
	ir.users--
	if ir.users > 0 || !ir.mountedLocked() {
		return
	}
	if n.cfg.ImageRootLinger <= 0 || n.closing.Load() {
		n.unmountImageLocked(ctx, snapshot, ir, "released")
		n.maybeMakeLocalImage(snapshot, nil)
		return
	}
	// The start the root recorded is over: its trace is written now, as a block
	// clone's is when it goes, and not lost if slackerd stops before the window
	// closes (a lingering root is unmounted at Close without writing it).
	if ir.x != nil {
		ir.x.r.EndStartup()
	}
	ir.idle++
	spell := ir.idle
	ir.linger = time.AfterFunc(n.cfg.ImageRootLinger, func() { n.expireImage(snapshot, ir, spell, "idle") })
	if !ir.local && n.local != nil {
		n.local.pending.Add(1)
		ir.settle = time.AfterFunc(localImageSettle, func() {
			n.local.pending.Add(-1)
			n.maybeMakeLocalImage(snapshot, func(written bool) {
				if written {
					n.expireImage(snapshot, ir, spell, "local-image-written")
				}
			})
		})
	}
}

// wakeLocked ends ir's idle spell, if it is in one: its timers stop, and those
// that fire all the same find a later spell. ir.mu is held.
func (n *Node) wakeLocked(ir *imageRoot) {
	ir.idle++
	if ir.linger != nil {
		ir.linger.Stop()
		ir.linger = nil
	}
	if ir.settle != nil {
		if ir.settle.Stop() {
			n.local.pending.Add(-1)
		}
		ir.settle = nil
	}
}

// expireImage unmounts ir if it is still in the idle spell spell.
func (n *Node) expireImage(snapshot digest.Digest, ir *imageRoot, spell uint64, why string) {
	ir.mu.Lock()
	defer ir.mu.Unlock()
	if ir.idle != spell || ir.users > 0 || !ir.mountedLocked() || n.closing.Load() {
		return
	}
	n.wakeLocked(ir)
	n.unmountImageLocked(context.Background(), snapshot, ir, why)
}

// unmountIdleImages unmounts every image root no container uses (a cold start:
// DropCaches).
func (n *Node) unmountIdleImages(ctx context.Context) {
	n.imagesMu.Lock()
	irs := make(map[digest.Digest]*imageRoot, len(n.images))
	for s, ir := range n.images {
		irs[s] = ir
	}
	n.imagesMu.Unlock()
	for s, ir := range irs {
		ir.mu.Lock()
		if ir.users == 0 && ir.mountedLocked() {
			n.wakeLocked(ir)
			n.unmountImageLocked(ctx, s, ir, "caches-dropped")
		}
		ir.mu.Unlock()
	}
}

// unmountImageLocked unmounts the image root and deletes its volume (a clone
// never written: nothing is lost). ir.mu is held.
func (n *Node) unmountImageLocked(ctx context.Context, snapshot digest.Digest, ir *imageRoot, why string) {
	if ir.tree != "" { // a directory: nothing mounted, nothing to unmount
		n.local.release(snapshot)
		n.log.Info("image-root-released", "snapshot", snapshot, "dir", ir.tree, "why", why)
		ir.tree, ir.local = "", false
		return
	}
	id := ir.x.rec.ID
	ir.x = nil
	if err := n.DeleteVolume(ctx, id); err != nil {
		n.log.Error("image-root-release-failed", "snapshot", snapshot, "volume", id, "err", err)
		return
	}
	if ir.local {
		n.local.release(snapshot) // the kernel reads the file no more: the volume is gone
		ir.local = false
	}
	n.log.Info("image-root-released", "snapshot", snapshot, "volume", id, "why", why)
}

// createShared makes the shared root id of opts.Snapshot: its directory, record
// and upper layer, and a use of the image root.
func (n *Node) createShared(ctx context.Context, id string, opts CreateOptions) (VolumeInfo, error) {
	if opts.Snapshot == "" {
		return VolumeInfo{}, fmt.Errorf("volume %s: a shared root needs an image snapshot: %w", id, errdefs.ErrInvalid)
	}
	if err := n.checkShared(); err != nil {
		return VolumeInfo{}, err
	}
	if _, err := n.Map(ctx, opts.Snapshot); err != nil {
		return VolumeInfo{}, err
	}
	parents, err := n.parentsOf(opts.Parent, opts.Snapshot)
	if err != nil {
		return VolumeInfo{}, err
	}
	n.mu.Lock()
	_, taken := n.vols[id]
	n.mu.Unlock()
	if taken {
		return VolumeInfo{}, fmt.Errorf("volume %s: %w", id, errdefs.ErrExists)
	}
	dir := n.volDir(id)
	if err := os.Mkdir(dir, 0o700); err != nil { // the directory makes the ID this call's
		if errors.Is(err, fs.ErrExist) {
			return VolumeInfo{}, fmt.Errorf("volume %s: %w", id, errdefs.ErrExists)
		}
		return VolumeInfo{}, fmt.Errorf("create volume %s: %w", id, err)
	}
	sr := &sharedRoot{image: opts.Snapshot, upper: filepath.Join(dir, "upper"), work: filepath.Join(dir, "work"),
		parents: parents}
	fail := func(err error) (VolumeInfo, error) {
		os.RemoveAll(dir)
		return VolumeInfo{}, err
	}
	for _, d := range []string{sr.upper, sr.work} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return fail(fmt.Errorf("create volume %s: %w", id, err))
		}
	}
	rec := Record{ID: id, Labels: opts.Labels, Mode: RootShared, Image: opts.Snapshot, Parent: opts.Parent,
		Created: time.Now().UTC()}
	if err := writeRecord(dir, rec); err != nil {
		return fail(fmt.Errorf("create volume %s: %w", id, err))
	}
	ir, err := n.acquireImage(ctx, opts.Snapshot, opts.Startup, opts.StartupFallback, false)
	if err != nil {
		return fail(err)
	}
	sr.root = ir
	x := &vol{rec: rec, shared: sr}
	n.mu.Lock()
	n.vols[id] = x
	n.mu.Unlock()
	n.lease.poke()
	n.log.Info("volume-created", "volume", id, "snapshot", opts.Snapshot, "mode", RootShared, "parent", opts.Parent,
		"startup", opts.Startup)
	return x.info(), nil
}

// loadShared takes back the shared root recorded in dir after a restart: its image
// root (remounted with the other volumes) gains a user, and a mounted one is
// mounted again.
func (n *Node) loadShared(ctx context.Context, rec Record) error {
	dir := n.volDir(rec.ID)
	sr := &sharedRoot{image: rec.Image, upper: filepath.Join(dir, "upper"), work: filepath.Join(dir, "work")}
	var err error
	if sr.parents, err = n.parentsOf(rec.Parent, rec.Image); err != nil {
		return err
	}
	ir, err := n.acquireImage(ctx, rec.Image, false, nil, false)
	if err != nil {
		return err
	}
	sr.root = ir
	x := &vol{rec: rec, shared: sr}
	n.mu.Lock()
	n.vols[rec.ID] = x
	n.mu.Unlock()
	if rec.Mounted {
		x.mu.Lock()
		defer x.mu.Unlock()
		if n.adoptLocked(x) {
			return nil
		}
		if err := n.mountSharedLocked(x, rec.ReadOnly); err != nil {
			return err
		}
		n.log.Info("volume-remounted", "volume", rec.ID, "mountpoint", x.mnt)
	}
	return nil
}

// mountSharedLocked mounts the overlay of shared root x.
func (n *Node) mountSharedLocked(x *vol, readOnly bool) error {
	sr := x.shared
	lower := sr.root.lower()
	if lower == "" {
		return fmt.Errorf("mount volume %s: the image root of %s is not mounted: %w", x.rec.ID, sr.image, errdefs.ErrUnavailable)
	}
	if _, err := os.Stat(sr.upper); err != nil {
		return fmt.Errorf("mount volume %s: its upper layer: %w", x.rec.ID, err)
	}
	mnt := filepath.Join(n.cfg.Root, "mnt", x.rec.ID)
	spec := mount.OverlaySpec{Lower: append(sr.lowers(), lower), Upper: sr.upper, Work: sr.work}
	if err := mount.MountOverlay(spec, mnt); err != nil {
		return fmt.Errorf("mount volume %s: %w", x.rec.ID, err)
	}
	if readOnly {
		if err := unix.Mount("", mnt, "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_BIND, ""); err != nil {
			mount.Unmount(mnt, time.Second)
			return fmt.Errorf("mount volume %s read-only: %w", x.rec.ID, err)
		}
	}
	x.mnt, sr.readOnly = mnt, readOnly
	n.log.Info("volume-mounted", "volume", x.rec.ID, "mountpoint", mnt, "mode", RootShared, "image", sr.image, "read_only", readOnly)
	return nil
}

// mountedLocked reports whether the image root is there (a volume mounted, or a
// local image's tree). ir.mu is held.
func (ir *imageRoot) mountedLocked() bool { return ir.x != nil || ir.tree != "" }

// lower returns the mountpoint of the image root, "" if it has none.
func (ir *imageRoot) lower() string {
	ir.mu.Lock()
	defer ir.mu.Unlock()
	if ir.tree != "" {
		return ir.tree
	}
	if ir.x == nil {
		return ""
	}
	ir.x.mu.Lock()
	defer ir.x.mu.Unlock()
	return ir.x.mnt
}

// flushSharedLocked writes the changes of a mounted shared root to its upper
// layer's filesystem (syncfs), and fails if the kernel lost a write there.
func (n *Node) flushSharedLocked(x *vol) error {
	if x.mnt == "" {
		return nil
	}
	f, err := os.Open(x.mnt)
	if err != nil {
		return fmt.Errorf("flush volume %s: %w", x.rec.ID, err)
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		return fmt.Errorf("flush volume %s: writes to its upper layer were lost: %w", x.rec.ID, err)
	}
	return nil
}

// commitShared makes the content of shared root x a snapshot in O(data written):
// a block-level clone of the image's snapshot, the upper layer's changes applied
// onto it in place (a changed file is rewritten where its blocks differ; deletions,
// opaque directories, modes, owners, xattrs, links and devices as the upper layer
// has them), free blocks trimmed, then the clone's snapshot. The caller keeps the
// container from writing meanwhile (slacker commit pauses it, as docker commit does).
func (n *Node) commitShared(ctx context.Context, x *vol, opts SnapshotOptions) (*volume.SnapshotResult, error) {
	sr := x.shared
	if _, err := os.Stat(sr.upper); err != nil {
		return nil, fmt.Errorf("commit volume %s: its upper layer %s is gone (%v): there is nothing to commit: %w",
			x.rec.ID, sr.upper, err, errdefs.ErrNotFound)
	}
	if err := n.flushSharedLocked(x); err != nil {
		return nil, err
	}
	start := time.Now()
	// The upper layers from the bottom up: the parents' (oldest first), then x's.
	uppers := append([]string{sr.upper}, sr.lowers()...)
	slices.Reverse(uppers)
	changes := make([][]archive.Change, len(uppers))
	for i, u := range uppers {
		var err error
		if changes[i], err = archive.UpperChanges(ctx, u); err != nil {
			return nil, fmt.Errorf("commit volume %s: %w", x.rec.ID, err)
		}
	}
	cid := "commit-" + x.rec.ID + "-" + randomID()[:8]
	info, err := n.CreateVolume(ctx, CreateOptions{ID: cid, Snapshot: sr.image, Mode: RootBlock,
		Labels: map[string]string{labels.Kind: labels.KindCommit}})
	if err != nil {
		return nil, fmt.Errorf("commit volume %s: %w", x.rec.ID, err)
	}
	defer func() {
		if err := n.DeleteVolume(context.WithoutCancel(ctx), cid); err != nil {
			n.log.Warn("volume-delete-failed", "volume", cid, "err", err)
		}
	}()
	if info, err = n.MountVolume(ctx, cid, false); err != nil {
		return nil, fmt.Errorf("commit volume %s: %w", x.rec.ID, err)
	}
	var st archive.Stats
	nchanges := 0
	for i, u := range uppers {
		pr, pw := io.Pipe()
		go func() {
			pw.CloseWithError(archive.WriteChanges(ctx, pw, u, changes[i], archive.WriteOptions{Xattrs: archive.OverlayXattrs}))
		}()
		s, err := archive.Apply(ctx, info.Mountpoint, pr, archive.Options{AllowDevices: true, InPlace: true, Logger: n.log})
		pr.CloseWithError(errors.New("apply stopped"))
		if err != nil {
			return nil, fmt.Errorf("commit volume %s: apply the upper layer %s: %w", x.rec.ID, u, err)
		}
		st.Rewritten += s.Rewritten
		st.RewrittenBytes += s.RewrittenBytes
		nchanges += len(changes[i])
	}
	if err := n.UnmountVolume(ctx, cid); err != nil { // trims and flushes first
		return nil, fmt.Errorf("commit volume %s: %w", x.rec.ID, err)
	}
	res, err := n.SnapshotVolume(ctx, cid, opts)
	if err != nil {
		return nil, fmt.Errorf("commit volume %s: %w", x.rec.ID, err)
	}
	n.log.Info("shared-root-committed", "volume", x.rec.ID, "snapshot", res.ID, "image", sr.image, "changes", nchanges,
		"files_rewritten", st.Rewritten, "bytes_rewritten", st.RewrittenBytes, "delta_bytes", res.DeltaBytes,
		"new_bytes", res.NewBytes, "took", time.Since(start))
	return res, nil
}

// deleteSharedLocked unmounts shared root x, removes its directory (the upper
// layer) and releases its image root.
func (n *Node) deleteSharedLocked(ctx context.Context, x *vol) error {
	if kids := n.childrenOf(x); len(kids) > 0 {
		return fmt.Errorf("delete volume %s: shared roots %v stand on it: %w", x.rec.ID, kids, errdefs.ErrBusy)
	}
	if err := n.unmountLocked(x); err != nil {
		return err
	}
	dir := n.volDir(x.rec.ID)
	trash := dir + ".deleting"
	if err := os.Rename(dir, trash); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete volume %s: %w", x.rec.ID, err)
	}
	x.gone = true
	n.mu.Lock()
	delete(n.vols, x.rec.ID)
	n.mu.Unlock()
	n.releaseImage(ctx, x.shared.image, x.shared.root)
	n.lease.poke()
	if err := os.RemoveAll(trash); err != nil {
		return fmt.Errorf("delete volume %s: %w", x.rec.ID, err)
	}
	n.log.Info("volume-deleted", "volume", x.rec.ID, "mode", RootShared)
	return nil
}

// upperBytes is the size of the files a shared root's upper layer holds.
func upperBytes(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if info, err := d.Info(); err == nil && info.Mode().IsRegular() {
			n += info.Size() // written but not yet allocated counts too
		}
		return nil
	})
	return n
}

// volume returns the image root's volume, nil if it has none.
func (ir *imageRoot) volume() *vol {
	ir.mu.Lock()
	defer ir.mu.Unlock()
	return ir.x
}
