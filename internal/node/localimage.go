package node

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/opencontainers/go-digest"
	"golang.org/x/sys/unix"

	"github.com/slacker-dev/slacker/internal/archive"
	"github.com/slacker-dev/slacker/internal/atomicfile"
	"github.com/slacker-dev/slacker/internal/blockmap"
	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/labels"
)

// Local images. Once every chunk of an image snapshot is on the node, the node
// copies the snapshot into the node's own filesystem (images/<hex>), each chunk
// verified against its digest on the way, and the image roots it makes of that
// snapshot afterwards read that copy through the kernel, without a round trip to
// slackerd. By default (LocalTree) the copy is the snapshot's tree of files, and
// the image root is that directory: the overlay of each container stands on it as
// containerd's overlayfs snapshotter's stand on their layers, with no loop device,
// ext4 or FUSE in between. Else (LocalExt4, or an image the tree copy refuses) it
// is the snapshot's ext4 bytes in one file, which the image root's loop device
// reads through FUSE passthrough. A local image is made in the background when an
// image root is released by its last container, and used by the next image root of
// the snapshot; the roots already mounted keep their path. What the kernel reads
// this way is checked when the copy is made, not at every read, as any file on the
// node's disk; a node's local images go when it closes or opens (they are made
// again, verified, when needed), so one is only ever read by the slackerd that
// verified it, and its index lives in memory. docs/design.md, "Local images".

// LocalImageFormat is how the node keeps its local images.
type LocalImageFormat string

const (
	// LocalTree: the snapshot's files, copied into a directory that is the image
	// root itself (archive.CopyTree).
	LocalTree LocalImageFormat = "tree"
	// LocalExt4: the snapshot's bytes, an ext4 filesystem read by the image
	// root's loop device through FUSE passthrough (Linux 6.9).
	LocalExt4 LocalImageFormat = "ext4"
)

// ParseLocalImageFormat reads a local image format by name; "" is "" (the
// default, LocalTree).
func ParseLocalImageFormat(s string) (LocalImageFormat, error) {
	switch f := LocalImageFormat(s); f {
	case "", LocalTree, LocalExt4:
		return f, nil
	}
	return "", fmt.Errorf("unknown local image format %q: use %q or %q: %w", s, LocalTree, LocalExt4, errdefs.ErrInvalid)
}

// localImages keeps the node's local images, at most limit bytes of them.
type localImages struct {
	dir    string
	limit  int64
	format LocalImageFormat // the one new images are made in (an image the tree copy refuses is ext4)
	mu     sync.Mutex
	images map[digest.Digest]*localImage // written
	// making holds the snapshots being written.
	making  map[digest.Digest]bool
	pending atomic.Int64 // idle image roots whose local image is yet to be tried
	wg      sync.WaitGroup
	writeMu sync.Mutex // held while a local image is written
	ctx     context.Context
	cancel  context.CancelFunc
}

// localImage is one written local image.
type localImage struct {
	format LocalImageFormat
	bytes  int64     // of disk it takes
	used   time.Time // last written or acquired: its place in the eviction order
	users  int       // image roots reading it (it is not evicted while one does)
}

// newLocalImages empties dir and keeps local images there, made in format
// (LocalTree if empty). keep (a node taken over from a slackerd whose containers
// still run on them) keeps the images the previous process wrote instead.
func newLocalImages(dir string, limit int64, format LocalImageFormat, keep bool) (*localImages, error) {
	if !keep {
		// Left by a previous slackerd: it verified them, this one has not.
		if err := os.RemoveAll(dir); err != nil {
			return nil, fmt.Errorf("local images: %w", err)
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("local images: %w", err)
	}
	if format == "" {
		format = LocalTree
	}
	ctx, cancel := context.WithCancel(context.Background())
	li := &localImages{dir: dir, limit: limit, format: format, images: map[digest.Digest]*localImage{},
		making: map[digest.Digest]bool{}, ctx: ctx, cancel: cancel}
	if keep {
		if err := li.adopt(); err != nil {
			return nil, err
		}
	}
	return li, nil
}

// adopt keeps the local images in li.dir that the previous process of this node
// wrote (renamed into place whole: a partial one is a .tmp- entry, removed).
func (li *localImages) adopt() error {
	ents, err := os.ReadDir(li.dir)
	if err != nil {
		return fmt.Errorf("local images: %w", err)
	}
	for _, e := range ents {
		path := filepath.Join(li.dir, e.Name())
		s := digest.NewDigestFromEncoded(digest.SHA256, e.Name())
		if s.Validate() != nil {
			os.RemoveAll(path)
			continue
		}
		format := LocalExt4
		if e.IsDir() {
			format = LocalTree
		}
		size, err := diskBytes(path)
		if err != nil {
			return fmt.Errorf("local images: %w", err)
		}
		li.images[s] = &localImage{format: format, bytes: size, used: time.Now()}
	}
	return nil
}

// stop ends the writes of local images under way, leaving the images for the
// next slackerd (a hand-over).
func (li *localImages) stop() {
	if li == nil {
		return
	}
	li.cancel()
	li.wg.Wait()
}

func (li *localImages) path(s digest.Digest) string { return filepath.Join(li.dir, s.Encoded()) }

// acquire returns the path and format of the local image of s for an image root
// about to read it, and counts one more image root reading it; ok is false if
// there is none. Pair each acquire that returned ok with a release.
func (li *localImages) acquire(s digest.Digest) (path string, format LocalImageFormat, ok bool) {
	if li == nil {
		return "", "", false
	}
	li.mu.Lock()
	defer li.mu.Unlock()
	im := li.images[s]
	if im == nil {
		return "", "", false
	}
	im.users++
	im.used = time.Now()
	return li.path(s), im.format, true
}

// release counts one image root less reading the local image of s.
func (li *localImages) release(s digest.Digest) {
	li.mu.Lock()
	defer li.mu.Unlock()
	if im := li.images[s]; im != nil && im.users > 0 {
		im.users--
	}
}

// has reports whether the local image of s is written.
func (li *localImages) has(s digest.Digest) bool {
	li.mu.Lock()
	defer li.mu.Unlock()
	return li.images[s] != nil
}

// makeRoomLocked removes the local images no image root reads, least recently
// used first, until size more bytes fit under the limit and in the filesystem's
// free space (leaving a tenth of it free). It reports whether they fit. li.mu is
// held.
func (li *localImages) makeRoomLocked(size int64) bool {
	var total int64
	var idle []digest.Digest
	for s, im := range li.images {
		total += im.bytes
		if im.users == 0 {
			idle = append(idle, s)
		}
	}
	sort.Slice(idle, func(i, j int) bool { return li.images[idle[i]].used.Before(li.images[idle[j]].used) })
	fits := func() bool {
		var fs unix.Statfs_t
		if unix.Statfs(li.dir, &fs) != nil {
			return false
		}
		free, all := int64(fs.Bavail)*fs.Bsize, int64(fs.Blocks)*fs.Bsize
		return total+size <= li.limit && free-size >= all/10
	}
	for len(idle) > 0 && !fits() {
		total -= li.images[idle[0]].bytes
		li.removeLocked(idle[0])
		idle = idle[1:]
	}
	return fits()
}

// removeLocked forgets the local image of s and removes its files. li.mu is held.
func (li *localImages) removeLocked(s digest.Digest) {
	delete(li.images, s)
	os.RemoveAll(li.path(s))
}

// LocalImageStats count the node's local images.
type LocalImageStats struct {
	Count   int   `json:"count"`   // written
	Bytes   int64 `json:"bytes"`   // of disk they take
	InUse   int   `json:"in_use"`  // read by an image root
	Writing int   `json:"writing"` // being written
	// Pending counts the idle image roots whose local image will be tried when
	// they have been idle localImageSettle.
	Pending int `json:"pending"`
}

func (li *localImages) stats() LocalImageStats {
	var st LocalImageStats
	if li == nil {
		return st
	}
	li.mu.Lock()
	defer li.mu.Unlock()
	st.Writing, st.Pending = len(li.making), int(li.pending.Load())
	for _, im := range li.images {
		st.Count++
		st.Bytes += im.bytes
		if im.users > 0 {
			st.InUse++
		}
	}
	return st
}

// drop removes the local images no image root reads.
func (li *localImages) drop() {
	if li == nil {
		return
	}
	li.mu.Lock()
	defer li.mu.Unlock()
	for s, im := range li.images {
		if im.users == 0 {
			li.removeLocked(s)
		}
	}
}

// close stops the writes under way and removes every local image.
func (li *localImages) close() {
	if li == nil {
		return
	}
	li.cancel()
	li.wg.Wait()
	li.mu.Lock()
	li.images = map[digest.Digest]*localImage{}
	li.mu.Unlock()
	os.RemoveAll(li.dir)
}

// maybeMakeLocalImage starts writing the local image of snapshot in the
// background, unless it exists, is being written, or some of its chunks are not on
// the node. done, if not nil, is called once with whether a local image of
// snapshot was written by this call.
func (n *Node) maybeMakeLocalImage(snapshot digest.Digest, done func(written bool)) {
	if done == nil {
		done = func(bool) {}
	}
	li := n.local
	if li == nil {
		done(false)
		return
	}
	li.mu.Lock()
	if li.making[snapshot] || li.images[snapshot] != nil || n.closing.Load() {
		li.mu.Unlock()
		done(false)
		return
	}
	li.making[snapshot] = true
	li.wg.Add(1)
	li.mu.Unlock()
	go func() {
		defer li.wg.Done()
		err := n.makeLocalImage(li.ctx, snapshot)
		if err != nil && !errors.Is(err, errNotLocal) {
			n.log.Warn("local-image-failed", "snapshot", snapshot, "err", err)
		}
		// Before the write is over for Stats: what done does (the idle root goes)
		// is part of it.
		done(err == nil && li.has(snapshot))
		li.mu.Lock()
		delete(li.making, snapshot)
		li.mu.Unlock()
	}()
}

var errNotLocal = errors.New("not every chunk is on the node")

// makeLocalImage writes snapshot's local image, if every chunk of it is on the
// node (cached, or in a local store): nothing is fetched for it.
func (n *Node) makeLocalImage(ctx context.Context, snapshot digest.Digest) error {
	m, err := n.Map(ctx, snapshot)
	if err != nil {
		return err
	}
	for _, c := range m.Chunks {
		if !n.cache.Local(c) {
			return errNotLocal
		}
	}
	var bytes int64
	for _, e := range m.Extents {
		bytes += e.Length
	}
	li := n.local
	li.writeMu.Lock() // one at a time: each counts what the others wrote
	defer li.writeMu.Unlock()
	li.mu.Lock()
	fits := li.makeRoomLocked(bytes)
	li.mu.Unlock()
	if !fits {
		n.log.Info("local-image-skipped", "snapshot", snapshot, "bytes", bytes, "reason", "no room",
			"limit", li.limit)
		return nil
	}
	start := time.Now()
	tmp := filepath.Join(li.dir, ".tmp-"+snapshot.Encoded())
	defer os.RemoveAll(tmp)
	format := li.format
	if format == LocalTree {
		if err = n.writeTreeImage(ctx, snapshot, tmp); errors.Is(err, errdefs.ErrUnsupported) {
			// What a tree cannot hold as the image has it (a socket, a name that
			// overlayfs would take for a whiteout) is still read by the kernel, in
			// ext4. Any other failure (a chunk that does not verify, a full disk)
			// would fail the ext4 copy too: it is returned.
			n.log.Warn("local-image-tree-failed", "snapshot", snapshot, "err", err,
				"action", "writing it in ext4, read through FUSE passthrough")
			os.RemoveAll(tmp)
			format = LocalExt4
		}
	}
	if format == LocalExt4 {
		err = n.writeExt4Image(ctx, m, tmp)
	}
	if err != nil {
		return err
	}
	size, err := diskBytes(tmp)
	if err != nil {
		return err
	}
	path := li.path(snapshot)
	li.mu.Lock()
	defer li.mu.Unlock()
	if err := os.Rename(tmp, path); err != nil { // local images do not outlive this process: no fsync
		return err
	}
	li.images[snapshot] = &localImage{format: format, bytes: size, used: time.Now()}
	n.log.Info("local-image-written", "snapshot", snapshot, "path", path, "format", format,
		"image_bytes", bytes, "disk_bytes", size, "took", time.Since(start))
	return nil
}

// writeExt4Image writes the bytes of the snapshot m maps into the file path, each
// chunk read through the cache, which verifies it against its digest.
func (n *Node) writeExt4Image(ctx context.Context, m *blockmap.Map, path string) error {
	p, err := atomicfile.Create(path, 0o400)
	if err != nil {
		return err
	}
	defer p.Abort()
	if err := p.Truncate(m.Size); err != nil {
		return err
	}
	var last blockmap.Chunk
	var data []byte
	for _, e := range m.Extents {
		if err := ctx.Err(); err != nil {
			return err
		}
		c := m.Chunks[e.Chunk]
		if c.Digest != last.Digest {
			if data, _, err = n.cache.Get(ctx, c); err != nil { // verified against its digest
				return fmt.Errorf("chunk %s: %w", c.Digest, err)
			}
			last = c
		}
		if _, err := p.WriteAt(data[e.ChunkOffset:e.ChunkOffset+e.Length], e.Offset); err != nil {
			return err
		}
	}
	return p.Commit()
}

// writeTreeImage copies snapshot's tree of files into the new directory dir. The
// snapshot is mounted read-only on a clone of its own, read through this node as
// any image root is (every chunk verified against its digest), and copied from
// there with everything a file carries (archive.CopyTree).
func (n *Node) writeTreeImage(ctx context.Context, snapshot digest.Digest, dir string) error {
	id := localImageVolumeID(snapshot)
	if _, err := n.CreateVolume(ctx, CreateOptions{ID: id, Snapshot: snapshot, Mode: RootBlock,
		Labels: map[string]string{labels.Kind: labels.KindLocalImage}}); err != nil {
		return err
	}
	defer func() {
		if err := n.DeleteVolume(context.WithoutCancel(ctx), id); err != nil {
			n.log.Warn("volume-delete-failed", "volume", id, "err", err)
		}
	}()
	v, err := n.MountVolume(ctx, id, true)
	if err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	_, err = copyTree(ctx, v.Mountpoint, dir)
	return err
}

// copyTree is archive.CopyTree; a test makes it fail.
var copyTree = archive.CopyTree

// diskBytes returns the disk the file or tree at path takes: a file of several
// names (hard links) counts once.
func diskBytes(path string) (int64, error) {
	var total int64
	type inode struct{ dev, ino uint64 }
	linked := map[inode]bool{}
	err := filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		if !d.IsDir() && st.Nlink > 1 {
			id := inode{uint64(st.Dev), st.Ino}
			if linked[id] {
				return nil
			}
			linked[id] = true
		}
		total += st.Blocks * 512
		return nil
	})
	return total, err
}

// localImageVolumeID names the clone a local image of s is copied from.
func localImageVolumeID(s digest.Digest) string { return "local-image-" + s.Encoded() }
