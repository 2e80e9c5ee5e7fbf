package node

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/slacker-dev/slacker/internal/fusefs"
	"github.com/slacker-dev/slacker/internal/fuseholder"
	"github.com/slacker-dev/slacker/internal/labels"
	"github.com/slacker-dev/slacker/internal/mount"
)

// Taking a node over from a slackerd that died or handed over, its containers
// still running (docs/design.md, "Surviving slackerd"). The node's FUSE connection
// is kept by a holder process (package fuseholder): at Open, a node whose holder
// has its connection, still mounted, serves that connection (fusefs.Resume)
// instead of reconciling; every volume is reopened from its records (and the runs
// its last process wrote and had not synced, package volume), added to the FUSE
// directory under the node ID the kernel knows, and its mount, loop device and
// overlay, still in place, are adopted rather than made again. Otherwise the node
// reconciles as it always did, mounts a new connection and hands it to the holder.

// adoption is what a node taking over finds in place: the mounts under its root
// and the loop devices of its volume files.
type adoption struct {
	mounts map[string]mount.MountInfo // by target
	loops  map[string]string          // loop device by backing file
}

// openFUSE gives the node its FUSE directory: the connection the holder keeps,
// if it has one still mounted there (n.adopt is then set), or a new one, handed
// to the holder. Without Config.Holder, always a new one. It reconciles what a
// previous process left before a new mount.
func (n *Node) openFUSE(ctx context.Context, fopts fusefs.Options) error {
	dir := filepath.Join(n.cfg.Root, "fuse")
	var sess *fuseholder.Session
	if n.cfg.Holder != nil {
		c, err := n.cfg.Holder(ctx)
		if err != nil {
			return fmt.Errorf("open node: the FUSE holder: %w", err)
		}
		n.holder = c
		if sess, err = c.Take(ctx); err != nil {
			return fmt.Errorf("open node: take the FUSE connection over: %w", err)
		}
		if sess != nil && (sess.Mountpoint != dir || !fuseMounted(dir)) {
			n.log.Warn("fuse-session-stale", "mountpoint", sess.Mountpoint, "want", dir,
				"action", "mounting a new connection")
			sess.FD.Close()
			sess = nil
		}
	}
	if sess != nil {
		a, err := findAdoption(n.cfg.Root)
		if err != nil {
			sess.FD.Close()
			return fmt.Errorf("open node: %w", err)
		}
		if n.fs, err = fusefs.Resume(dir, fusefs.Session{Dev: sess.FD, Init: sess.Init}, fopts); err != nil {
			return fmt.Errorf("open node: %w", err)
		}
		n.adopt = a
		n.log.Info("fuse-connection-taken-over", "mountpoint", dir, "mounts", len(a.mounts), "loop_devices", len(a.loops))
		return nil
	}
	if err := n.reconcile(); err != nil {
		return err
	}
	var err error
	if n.fs, err = fusefs.Mount(dir, fopts); err != nil {
		return fmt.Errorf("open node: %w", err)
	}
	if n.holder != nil {
		s, err := n.fs.Session()
		if err == nil {
			err = n.holder.Hold(ctx, fuseholder.Session{FD: s.Dev, Init: s.Init, Mountpoint: dir})
			s.Dev.Close()
		}
		if err != nil {
			// The node works; a slackerd that dies then ends its containers' I/O.
			n.log.Error("fuse-hold-failed", "err", err,
				"effect", "the containers will not survive this slackerd")
			n.holder.Close()
			n.holder = nil
		}
	}
	return nil
}

// fuseMounted reports whether a FUSE filesystem of this package is mounted at dir.
func fuseMounted(dir string) bool {
	ms, err := mount.Mounts(dir)
	if err != nil {
		return false
	}
	for _, m := range ms {
		if m.Target == dir && m.FSType == "fuse.slacker" {
			return true
		}
	}
	return false
}

func findAdoption(root string) (*adoption, error) {
	ms, err := mount.Mounts(root)
	if err != nil {
		return nil, fmt.Errorf("take over: %w", err)
	}
	loops, err := mount.ListLoops()
	if err != nil {
		return nil, fmt.Errorf("take over: %w", err)
	}
	a := &adoption{mounts: map[string]mount.MountInfo{}, loops: map[string]string{}}
	for _, m := range ms {
		a.mounts[m.Target] = m
	}
	fuseDir := filepath.Join(root, "fuse") + "/"
	for _, l := range loops {
		if strings.HasPrefix(l.BackingFile, fuseDir) {
			a.loops[l.BackingFile] = l.Path
		}
	}
	return a, nil
}

// Resumed reports whether this node took its FUSE connection over from an
// earlier slackerd, its containers still running, rather than starting anew.
func (n *Node) Resumed() bool { return n.fs != nil && n.fs.Resumed() }

// adoptLocked takes x's mount over from the previous process, if it is in place:
// its filesystem (a block volume's ext4 on its loop device, or a shared root's
// overlay) mounted at its mountpoint. It reports whether it did.
func (n *Node) adoptLocked(x *vol) bool {
	if n.adopt == nil {
		return false
	}
	mnt := filepath.Join(n.cfg.Root, "mnt", x.rec.ID)
	m, ok := n.adopt.mounts[mnt]
	if !ok {
		return false
	}
	if x.shared != nil {
		if m.FSType != "overlay" {
			return false
		}
		x.mnt, x.shared.readOnly = mnt, x.rec.ReadOnly
	} else {
		dev, ok := n.adopt.loops[x.file]
		if !ok || m.FSType != "ext4" || m.Source != dev {
			return false
		}
		x.mnt, x.dev = mnt, dev
		// A start-up readahead the previous process set ends with it.
		if err := mount.SetDeviceReadahead(dev, n.volumeReadahead()); err != nil {
			n.log.Warn("volume-readahead-failed", "volume", x.rec.ID, "err", err)
		}
		if thawLeftFrozen(mnt) {
			// The previous process died in the middle of a snapshot.
			n.log.Warn("reconcile-thawed", "target", mnt)
		}
	}
	n.log.Info("volume-adopted", "volume", x.rec.ID, "mountpoint", mnt, "device", x.dev, "kind", x.rec.Labels[labels.Kind])
	return true
}

// Handover leaves the node to the next slackerd, its containers running: every
// volume's writes are made durable (one log line each), and nothing is
// unmounted; the caller then exits, and the holder keeps the FUSE connection
// until the next slackerd takes it (requests meanwhile wait). It fails, having
// done nothing, if no holder keeps the connection.
func (n *Node) Handover(ctx context.Context) error {
	if n.holder == nil {
		return errors.New("hand over: no holder keeps the FUSE connection (fuse_hold is off, or holding failed at start)")
	}
	if n.closing.Swap(true) {
		return errors.New("hand over: the node is closing")
	}
	if n.prefetch != nil {
		n.prefetch.Close(ctx)
	}
	n.lease.close()
	n.imagesMu.Lock()
	for _, ir := range n.images {
		ir.mu.Lock()
		n.wakeLocked(ir) // no idle root goes: the next slackerd decides
		ir.mu.Unlock()
	}
	n.imagesMu.Unlock()
	n.local.stop()
	xs := n.allVols()
	var errs []error
	for _, x := range xs {
		x.mu.Lock()
		var err error
		if x.v != nil {
			err = x.v.Sync(ctx)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("hand over volume %s: %w", x.rec.ID, err))
		}
		n.log.Info("volume-handed-over", "volume", x.rec.ID, "kind", x.rec.Labels[labels.Kind],
			"mode", x.rec.Mode, "mountpoint", x.mnt, "device", x.dev, "synced", err == nil)
		x.mu.Unlock()
	}
	return errors.Join(errs...)
}
