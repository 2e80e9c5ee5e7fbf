package node

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/opencontainers/go-digest"
	"golang.org/x/sys/unix"

	"github.com/slacker-dev/slacker/internal/atomicfile"
	"github.com/slacker-dev/slacker/internal/blockmap"
	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/labels"
	"github.com/slacker-dev/slacker/internal/mount"
)

// Local images. Once every chunk of an image snapshot is on the node, the node
// writes the snapshot into one local file (images/<hex>), each chunk verified
// against its digest on the way, and the image roots it makes of that snapshot
// afterwards are read from that file by the kernel, without a round trip to
// slackerd. The file is, where the kernel and erofs-utils allow, an erofs image of
// the snapshot's tree, which the image root mounts from the file directly (no loop
// device, no FUSE: localErofs); else the snapshot's ext4 bytes, which the image
// root's loop device reads through FUSE passthrough (localExt4). A local image is
// made in the background when an image root is released by its last container,
// and used by the next image root of the snapshot; the roots already mounted keep
// their path. The bytes the kernel reads this way are checked when the file is
// written, not at every read, as any file on the node's disk; a node's local images
// go when it closes or opens (they are made again, verified, when needed), so one
// is only ever read by the slackerd that verified it. docs/design.md, "Local
// images".

// LocalImageFormat is how the node keeps its local images.
type LocalImageFormat string

const (
	// LocalErofs: an erofs image of the snapshot's tree, mounted from the file
	// (Linux 6.12 file-backed erofs, mkfs.erofs from erofs-utils).
	LocalErofs LocalImageFormat = "erofs"
	// LocalExt4: the snapshot's bytes, an ext4 filesystem read by the image
	// root's loop device through FUSE passthrough (Linux 6.9).
	LocalExt4 LocalImageFormat = "ext4"
)

// ParseLocalImageFormat reads a local image format by name; "" is "" (the node
// chooses: erofs where this machine can make and mount it, else ext4).
func ParseLocalImageFormat(s string) (LocalImageFormat, error) {
	switch f := LocalImageFormat(s); f {
	case "", LocalErofs, LocalExt4:
		return f, nil
	}
	return "", fmt.Errorf("unknown local image format %q: use %q or %q: %w", s, LocalErofs, LocalExt4, errdefs.ErrInvalid)
}

// localImages keeps the node's local image files, at most limit bytes of them.
type localImages struct {
	dir    string
	limit  int64
	format LocalImageFormat
	mu     sync.Mutex
	// making holds the snapshots being written; users counts the image roots
	// reading each local image (it is not evicted while one does).
	making  map[digest.Digest]bool
	users   map[digest.Digest]int
	pending atomic.Int64 // idle image roots whose local image is yet to be tried
	wg      sync.WaitGroup
	writeMu sync.Mutex // held while a local image is written
	ctx     context.Context
	cancel  context.CancelFunc
}

// newLocalImages empties dir and keeps local images there in format; with no
// format, in erofs if this machine can make and mount erofs images from files,
// else in ext4. Asked for erofs where it cannot, it fails and says why.
func newLocalImages(ctx context.Context, dir string, limit int64, format LocalImageFormat, log *slog.Logger) (*localImages, error) {
	// Left by a previous slackerd: it verified them, this one has not.
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("local images: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("local images: %w", err)
	}
	if format != LocalExt4 {
		err := mount.ErofsSupported(ctx, dir)
		switch {
		case err != nil && format == LocalErofs:
			return nil, fmt.Errorf("local images in %s: %v: %w", LocalErofs, err, errdefs.ErrUnsupported)
		case err != nil:
			log.Info("local-image-format", "format", LocalExt4, "why", fmt.Sprintf("not %s: %v", LocalErofs, err))
			format = LocalExt4
		default:
			format = LocalErofs
		}
	}
	lctx, cancel := context.WithCancel(context.Background())
	return &localImages{dir: dir, limit: limit, format: format, making: map[digest.Digest]bool{},
		users: map[digest.Digest]int{}, ctx: lctx, cancel: cancel}, nil
}

func (li *localImages) path(s digest.Digest) string { return filepath.Join(li.dir, s.Encoded()) }

// acquire opens the local image of s for an image root about to read it, and
// counts one more image root reading it; nil if there is none. The caller closes
// the file once the image root holds its own descriptor (fusefs.AddBacked, or the
// erofs mount), and pairs each acquire that returned a file with a release.
func (li *localImages) acquire(s digest.Digest) *os.File {
	if li == nil {
		return nil
	}
	li.mu.Lock()
	defer li.mu.Unlock()
	f, err := os.Open(li.path(s))
	if err != nil {
		return nil
	}
	li.users[s]++
	now := time.Now()
	os.Chtimes(li.path(s), now, now) // its place in the eviction order: used now
	return f
}

// release counts one image root less reading the local image of s.
func (li *localImages) release(s digest.Digest) {
	li.mu.Lock()
	defer li.mu.Unlock()
	if li.users[s]--; li.users[s] <= 0 {
		delete(li.users, s)
	}
}

// has reports whether the local image of s is written.
func (li *localImages) has(s digest.Digest) bool {
	_, err := os.Stat(li.path(s))
	return err == nil
}

// makeRoom removes the local images no image root reads, least recently used
// first, until size more bytes fit under the limit and in the filesystem's free
// space (leaving a tenth of it free). It reports whether they fit. li.mu is held.
func (li *localImages) makeRoom(size int64) bool {
	entries, err := os.ReadDir(li.dir)
	if err != nil {
		return false
	}
	type file struct {
		s     digest.Digest
		bytes int64
		used  time.Time
	}
	var files []file
	var total int64
	for _, e := range entries {
		s := digest.NewDigestFromEncoded(digest.SHA256, e.Name())
		fi, err := e.Info()
		if err != nil || s.Validate() != nil {
			continue // a write under way (a temporary file): counted by its maker
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			continue
		}
		f := file{s: s, bytes: st.Blocks * 512, used: fi.ModTime()}
		total += f.bytes
		if li.users[s] == 0 {
			files = append(files, f)
		}
	}
	sort.Slice(files, func(i, j int) bool { return files[i].used.Before(files[j].used) })
	fits := func() bool {
		var fs unix.Statfs_t
		if unix.Statfs(li.dir, &fs) != nil {
			return false
		}
		free, all := int64(fs.Bavail)*fs.Bsize, int64(fs.Blocks)*fs.Bsize
		return total+size <= li.limit && free-size >= all/10
	}
	for len(files) > 0 && !fits() {
		if os.Remove(li.path(files[0].s)) == nil {
			total -= files[0].bytes
		}
		files = files[1:]
	}
	return fits()
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
	st.InUse, st.Writing, st.Pending = len(li.users), len(li.making), int(li.pending.Load())
	entries, _ := os.ReadDir(li.dir)
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil || digest.NewDigestFromEncoded(digest.SHA256, e.Name()).Validate() != nil {
			continue
		}
		st.Count++
		if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
			st.Bytes += sys.Blocks * 512
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
	entries, _ := os.ReadDir(li.dir)
	for _, e := range entries {
		s := digest.NewDigestFromEncoded(digest.SHA256, e.Name())
		if s.Validate() == nil && li.users[s] == 0 {
			os.Remove(li.path(s))
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
	if li.making[snapshot] || li.has(snapshot) || n.closing.Load() {
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
	fits := li.makeRoom(bytes)
	li.mu.Unlock()
	if !fits {
		n.log.Info("local-image-skipped", "snapshot", snapshot, "bytes", bytes, "reason", "no room",
			"limit", li.limit)
		return nil
	}
	start := time.Now()
	path := li.path(snapshot)
	format := li.format
	if format == LocalErofs {
		if err = n.writeErofsImage(ctx, snapshot, path); err != nil && ctx.Err() == nil {
			// An image mkfs.erofs cannot copy (erofs-utils 1.5 refuses names of 255
			// bytes, which ext4 allows) is still read by the kernel, in ext4.
			n.log.Warn("local-image-erofs-failed", "snapshot", snapshot, "err", err,
				"action", "writing it in ext4, read through FUSE passthrough")
			format = LocalExt4
		}
	}
	if format == LocalExt4 {
		err = n.writeExt4Image(ctx, m, path)
	}
	if err != nil {
		return err
	}
	var size int64
	if fi, err := os.Stat(path); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			size = st.Blocks * 512
		}
	}
	n.log.Info("local-image-written", "snapshot", snapshot, "path", path, "format", format,
		"image_bytes", bytes, "file_bytes", size, "took", time.Since(start))
	return nil
}

// writeExt4Image writes the bytes of the snapshot m maps into path, each chunk
// read through the cache, which verifies it against its digest.
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

// writeErofsImage writes an erofs image of snapshot's tree into path. The
// snapshot is mounted read-only on a clone of its own, read through this node
// as any image root is (every chunk verified against its digest), and
// mkfs.erofs copies the tree from there: contents, owners, modes, times,
// xattrs, hard links and devices.
func (n *Node) writeErofsImage(ctx context.Context, snapshot digest.Digest, path string) error {
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
	tmp := filepath.Join(filepath.Dir(path), ".erofs-"+snapshot.Encoded()) // not a name makeRoom counts
	defer os.Remove(tmp)
	if err := mkfsErofs(ctx, tmp, v.Mountpoint); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o400); err != nil {
		return err
	}
	return os.Rename(tmp, path) // local images do not outlive this process: no fsync
}

// mkfsErofs is mount.MkfsErofs; a test makes it fail.
var mkfsErofs = mount.MkfsErofs

// erofsMagic is EROFS_SUPER_MAGIC_V1, at byte 1024 of an erofs image.
const erofsMagic = 0xE0F5E1E2

// formatOf reports the format of the local image open as f: LocalErofs if it
// starts with an erofs superblock, else LocalExt4.
func formatOf(f *os.File) LocalImageFormat {
	var b [4]byte
	if _, err := f.ReadAt(b[:], 1024); err == nil && binary.LittleEndian.Uint32(b[:]) == erofsMagic {
		return LocalErofs
	}
	return LocalExt4
}

// localImageVolumeID names the clone a local image of s is copied from.
func localImageVolumeID(s digest.Digest) string { return "local-image-" + s.Encoded() }
