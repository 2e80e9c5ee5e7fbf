package graphdriver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	"golang.org/x/sys/unix"

	"github.com/slacker-dev/slacker/internal/archive"
	"github.com/slacker-dev/slacker/internal/labels"
	"github.com/slacker-dev/slacker/internal/node"
)

// upperOf returns the node's view of l's root when l is a shared layer standing
// on p, its parent: the root's upper layer is then exactly l's changes against p
// (what the layers under it show), and no tree needs comparing.
func (d *Driver) upperOf(l, p *layer) (node.VolumeInfo, bool) {
	if p == nil || !l.shared() {
		return node.VolumeInfo{}, false
	}
	l.mu.Lock()
	on, gone, vid := l.rec.Parent == p.rec.ID, l.gone, l.rec.Volume
	l.mu.Unlock()
	if !on || gone {
		return node.VolumeInfo{}, false
	}
	v, err := d.n.Volume(vid)
	if err != nil || v.Upper == "" {
		return node.VolumeInfo{}, false // lost: the trees are compared (Get makes it again)
	}
	return v, true
}

// upperChanges lists the changes of shared root v against the layers under it,
// sorted by path, read from its upper layer (archive.UpperChanges) and, to tell
// an addition from a change, looked up in the directories under it as overlayfs
// does. As Docker's overlay2 driver reports them: a whiteout is a deletion; a
// directory that is only there because something below it changed (its mode,
// owner and mtime are those under it: overlayfs copies them up) is left out,
// unless something was added or deleted in it; a directory made again (opaque)
// is changed and everything in it is added. Nothing but names, inodes and one
// xattr is read.
func upperChanges(ctx context.Context, v node.VolumeInfo) ([]change, error) {
	ups, err := archive.UpperChanges(ctx, v.Upper)
	if err != nil {
		return nil, err
	}
	var out []change
	opaque := map[string]bool{}       // directories made again
	quiet := map[string]unix.Stat_t{} // directories copied up, unchanged
	touch := func(p string) {         // Docker reports the directory of an addition or deletion
		dir := path.Dir(p)
		if st, ok := quiet[dir]; ok {
			out = append(out, change{Change: Change{Path: dir, Kind: ChangeModify}, st: st})
			delete(quiet, dir)
		}
	}
	for _, u := range ups {
		p := "/" + u.Path
		if u.Delete {
			touch(p)
			out = append(out, change{Change: Change{Path: p, Kind: ChangeDelete}})
			continue
		}
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(v.Upper, u.Path), &st); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue // removed meanwhile
			}
			return nil, fmt.Errorf("changes: %w", err)
		}
		var below unix.Stat_t
		found := false
		if !underAny(path.Dir(p), opaque) {
			if below, found, err = lookupBelow(v.Lowers, u.Path); err != nil {
				return nil, fmt.Errorf("changes: %w", err)
			}
		}
		isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
		if u.Opaque {
			opaque[p] = true
		}
		switch {
		case !found:
			touch(p)
			out = append(out, change{Change: Change{Path: p, Kind: ChangeAdd}, st: st})
		case isDir && !u.Opaque && below.Mode == st.Mode && below.Uid == st.Uid && below.Gid == st.Gid && below.Mtim == st.Mtim:
			quiet[p] = st
		default:
			out = append(out, change{Change: Change{Path: p, Kind: ChangeModify}, st: st})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// lookupBelow finds rel in the layers of an overlay under an upper layer (dirs,
// nearest first) as overlayfs does: the nearest layer holding it wins, and a
// whiteout of it or of a directory above it, a non-directory above it, or an
// opaque directory above it hides it in every layer further down.
func lookupBelow(dirs []string, rel string) (unix.Stat_t, bool, error) {
	parts := strings.Split(rel, "/")
	for _, dir := range dirs {
		var st unix.Stat_t
		cur, opaque := dir, false
		for i, name := range parts {
			cur = filepath.Join(cur, name)
			err := unix.Lstat(cur, &st)
			if errors.Is(err, unix.ENOENT) {
				if opaque {
					return st, false, nil
				}
				break // not in this layer: look further down
			}
			if err != nil {
				return st, false, err
			}
			if st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0 { // a whiteout
				return st, false, nil
			}
			if i == len(parts)-1 {
				return st, true, nil
			}
			if st.Mode&unix.S_IFMT != unix.S_IFDIR {
				return st, false, nil
			}
			// Every component so far is a directory, never a symlink: the next
			// lookup stays inside dir.
			if isOpaqueDir(cur) {
				opaque = true
			}
		}
	}
	return unix.Stat_t{}, false, nil
}

// isOpaqueDir reports whether directory p of an upper layer is opaque.
func isOpaqueDir(p string) bool {
	b := make([]byte, 2)
	n, err := unix.Lgetxattr(p, "trusted.overlay.opaque", b)
	return err == nil && string(b[:n]) == "y"
}

// upperTar writes shared root v's changes as an ordinary layer tar, straight from
// its upper layer (whiteouts, opaque directories).
func (d *Driver) upperTar(ctx context.Context, l *layer, parent string, v node.VolumeInfo) (io.ReadCloser, error) {
	ups, err := archive.UpperChanges(ctx, v.Upper)
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	go func() {
		pw.CloseWithError(archive.WriteChanges(ctx, pw, v.Upper, ups, archive.WriteOptions{Xattrs: exportXattrs}))
	}()
	d.log.Info("layer-diff-tar", "layer", l.rec.ID, "parent", parent, "changes", len(ups), "mode", node.RootShared)
	return pr, nil
}

// applyUpper returns the snapshot of base with the changes of the upper layer at
// upper applied onto a clone of it, in place (a changed file is rewritten where
// its blocks differ: O(data written), as node commits a shared root).
func (d *Driver) applyUpper(ctx context.Context, base digest.Digest, upper string) (digest.Digest, error) {
	ups, err := archive.UpperChanges(ctx, upper)
	if err != nil {
		return "", err
	}
	vid := "docker-commit-" + randomHex()
	v, err := d.n.CreateVolume(ctx, node.CreateOptions{ID: vid, Snapshot: base, Mode: node.RootBlock,
		Labels: map[string]string{labels.Kind: labels.KindDocker}}) // no record names it: Open deletes it after a crash
	if err != nil {
		return "", err
	}
	defer func() {
		if err := d.n.DeleteVolume(context.WithoutCancel(ctx), vid); err != nil {
			d.log.Warn("graphdriver-volume-delete-failed", "volume", vid, "err", err)
		}
	}()
	if v, err = d.n.MountVolume(ctx, vid, false); err != nil {
		return "", err
	}
	pr, pw := io.Pipe()
	go func() {
		pw.CloseWithError(archive.WriteChanges(ctx, pw, upper, ups, archive.WriteOptions{Xattrs: archive.OverlayXattrs}))
	}()
	st, err := archive.Apply(ctx, v.Mountpoint, pr, archive.Options{AllowDevices: true, InPlace: true, Logger: d.log})
	pr.CloseWithError(errors.New("apply stopped"))
	if err != nil {
		return "", fmt.Errorf("apply the upper layer %s: %w", upper, err)
	}
	if err := d.n.UnmountVolume(ctx, vid); err != nil {
		return "", err
	}
	res, err := d.n.SnapshotVolume(ctx, vid, node.SnapshotOptions{})
	if err != nil {
		return "", err
	}
	d.log.Debug("upper-layer-applied", "base", base, "changes", len(ups), "files_rewritten", st.Rewritten,
		"bytes_rewritten", st.RewrittenBytes, "snapshot", res.ID)
	return res.ID, nil
}

// makeSharedSlackerLayer is makeSlackerLayer for a shared container layer l on its
// init layer p: the snapshot is the image under p with l's upper layer applied,
// which holds the container's changes and none of the init layer's.
func (d *Driver) makeSharedSlackerLayer(ctx context.Context, l, p *layer, v node.VolumeInfo) ([]byte, error) {
	start := time.Now()
	t, err := d.lookup(p.rec.Parent)
	if err != nil {
		return nil, err
	}
	under, err := d.snapshotOf(ctx, t)
	if err != nil {
		return nil, err
	}
	cs, err := upperChanges(ctx, v)
	if err != nil {
		return nil, err
	}
	snap, err := d.applyUpper(ctx, under, v.Upper)
	if err != nil {
		return nil, fmt.Errorf("commit layer %s: %w", l.rec.ID, err)
	}
	m := Marker{Version: MarkerVersion, Snapshot: snap, Parent: under, Store: d.o.Store, Size: changesSize(cs)}
	b, err := EncodeLayer(m)
	if err != nil {
		return nil, err
	}
	d.log.Info("slacker-layer-made", "layer", l.rec.ID, "snapshot", snap, "size", m.Size, "mode", node.RootShared,
		"took", time.Since(start))
	return b, nil
}
