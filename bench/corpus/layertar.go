package corpus

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/klauspost/compress/gzip"
	"golang.org/x/sys/unix"
)

// OCI whiteout names (image-spec layer.md).
const (
	whiteoutPrefix = ".wh."
	opaqueWhiteout = ".wh..wh..opq"
	// overlayfs marks an opaque directory with this xattr; "y" is opaque.
	overlayOpaque = "trusted.overlay.opaque"
)

// Blob describes a layer blob written to the layout.
type Blob struct {
	// Digest is the sha256 of the gzip bytes (what manifests name).
	Digest string `json:"digest"`
	// DiffID is the sha256 of the uncompressed tar (what configs name).
	DiffID string `json:"diff_id"`
	// Size is the compressed size, USize the uncompressed tar size.
	Size  int64 `json:"size"`
	USize int64 `json:"usize"`
	// Entries counts tar entries, Whiteouts the whiteouts among them.
	Entries   int `json:"entries"`
	Whiteouts int `json:"whiteouts"`
}

type countingHash struct {
	h hash.Hash
	n int64
}

func (c *countingHash) Write(p []byte) (int, error) {
	c.h.Write(p)
	c.n += int64(len(p))
	return len(p), nil
}

func (c *countingHash) digest() string { return "sha256:" + hex.EncodeToString(c.h.Sum(nil)) }

// blobWriter streams a tar through gzip into a temp file in the layout's blob
// directory, hashing both sides, and renames it to its digest on commit.
type blobWriter struct {
	blobs  string
	tmp    *os.File
	gz     *gzip.Writer
	raw    *countingHash // uncompressed
	comp   *countingHash // compressed
	tw     *tar.Writer
	closed bool
}

func newBlobWriter(blobs string) (*blobWriter, error) {
	return newBlobWriterLevel(blobs, gzip.DefaultCompression)
}

func newBlobWriterLevel(blobs string, level int) (*blobWriter, error) {
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		return nil, err
	}
	tmp, err := os.CreateTemp(blobs, ".tmp-layer-*")
	if err != nil {
		return nil, err
	}
	bw := &blobWriter{blobs: blobs, tmp: tmp,
		raw: &countingHash{h: sha256.New()}, comp: &countingHash{h: sha256.New()}}
	gz, err := gzip.NewWriterLevel(io.MultiWriter(tmp, bw.comp), level)
	if err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return nil, err
	}
	bw.gz = gz
	bw.tw = tar.NewWriter(io.MultiWriter(gz, bw.raw))
	return bw, nil
}

// abort removes the temp file; safe after commit.
func (bw *blobWriter) abort() {
	if !bw.closed {
		bw.tmp.Close()
		os.Remove(bw.tmp.Name())
		bw.closed = true
	}
}

func (bw *blobWriter) commit(b *Blob) error {
	if err := bw.tw.Close(); err != nil {
		return err
	}
	if err := bw.gz.Close(); err != nil {
		return err
	}
	if err := bw.tmp.Sync(); err != nil {
		return err
	}
	if err := bw.tmp.Close(); err != nil {
		return err
	}
	bw.closed = true
	b.Digest, b.Size = bw.comp.digest(), bw.comp.n
	b.DiffID, b.USize = bw.raw.digest(), bw.raw.n
	final := filepath.Join(bw.blobs, strings.TrimPrefix(b.Digest, "sha256:"))
	if err := os.Rename(bw.tmp.Name(), final); err != nil {
		os.Remove(bw.tmp.Name())
		return err
	}
	return nil
}

// WriteLayerFromDir turns a directory into an OCI layer blob in blobs (the
// layout's blobs/sha256 directory). The directory is an overlayfs upper
// directory or a tree made from scratch: a character device 0:0 becomes the
// whiteout ".wh.NAME", a directory whose trusted.overlay.opaque xattr is "y"
// gets ".wh..wh..opq", overlayfs' own trusted.* xattrs are dropped, security.*
// and user.* xattrs are kept, and hard links inside the directory stay hard
// links. Entries are written in lexical order with mtimes in whole seconds, so
// the same tree gives the same blob.
func WriteLayerFromDir(ctx context.Context, dir, blobs string) (Blob, error) {
	return writeLayerFromDir(ctx, dir, blobs, time.Time{})
}

// WriteLayerFromDirAt is WriteLayerFromDir with every entry's mtime written as
// mtime: the same files give the same blob whenever they were written.
func WriteLayerFromDirAt(ctx context.Context, dir, blobs string, mtime time.Time) (Blob, error) {
	return writeLayerFromDir(ctx, dir, blobs, mtime)
}

// appTime is the mtime of every entry of an app layer, whose content is fully
// determined by its definition: the date of the paper's HelloBench snapshot.
var appTime = time.Date(2015, 6, 1, 0, 0, 0, 0, time.UTC)

// writeLayerFromDir is WriteLayerFromDir with every mtime set to clamp unless
// clamp is zero.
func writeLayerFromDir(ctx context.Context, dir, blobs string, clamp time.Time) (Blob, error) {
	var b Blob
	bw, err := newBlobWriter(blobs)
	if err != nil {
		return b, fmt.Errorf("layer of %s: %w", dir, err)
	}
	defer bw.abort()
	inodes := map[uint64]string{}
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		mode := fi.Mode()
		// overlayfs whiteout: a character device with device number 0.
		if mode&fs.ModeCharDevice != 0 && st.Rdev == 0 {
			b.Whiteouts++
			b.Entries++
			return bw.tw.WriteHeader(&tar.Header{
				Typeflag: tar.TypeReg, Name: filepath.Join(filepath.Dir(rel), whiteoutPrefix+filepath.Base(rel)),
				Mode: 0o644, ModTime: time.Unix(0, 0), Format: tar.FormatPAX,
			})
		}
		hdr, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		hdr.Name = rel
		hdr.Uname, hdr.Gname = "", ""
		hdr.ModTime = fi.ModTime().Truncate(time.Second)
		if !clamp.IsZero() {
			hdr.ModTime = clamp
		}
		hdr.AccessTime, hdr.ChangeTime = time.Time{}, time.Time{}
		hdr.Format = tar.FormatPAX
		switch {
		case mode.IsDir():
			hdr.Name += "/"
		case mode&fs.ModeSymlink != 0:
			if hdr.Linkname, err = os.Readlink(p); err != nil {
				return err
			}
		case mode.IsRegular() && st.Nlink > 1:
			if first, ok := inodes[st.Ino]; ok {
				hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeLink, first, 0
			} else {
				inodes[st.Ino] = rel
			}
		case mode&fs.ModeSocket != 0:
			return nil // sockets are not image content
		}
		xattrs, opaque, err := readXattrs(p)
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		for k, v := range xattrs {
			if hdr.PAXRecords == nil {
				hdr.PAXRecords = map[string]string{}
			}
			hdr.PAXRecords["SCHILY.xattr."+k] = v
		}
		if err := bw.tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		b.Entries++
		if hdr.Typeflag == tar.TypeReg && hdr.Size > 0 {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			n, err := io.Copy(bw.tw, io.LimitReader(f, hdr.Size))
			f.Close()
			if err != nil {
				return fmt.Errorf("%s: %w", rel, err)
			}
			if n != hdr.Size {
				return fmt.Errorf("%s: changed size while archived (%d of %d bytes)", rel, n, hdr.Size)
			}
		}
		if opaque {
			b.Whiteouts++
			b.Entries++
			if err := bw.tw.WriteHeader(&tar.Header{
				Typeflag: tar.TypeReg, Name: filepath.Join(rel, opaqueWhiteout),
				Mode: 0o644, ModTime: time.Unix(0, 0), Format: tar.FormatPAX,
			}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return b, fmt.Errorf("layer of %s: %w", dir, err)
	}
	if err := bw.commit(&b); err != nil {
		return b, fmt.Errorf("layer of %s: %w", dir, err)
	}
	return b, nil
}

// readXattrs returns the xattrs kept in layers and whether an overlayfs opaque
// marker is set.
func readXattrs(p string) (map[string]string, bool, error) {
	buf := make([]byte, 4096)
	n, err := unix.Llistxattr(p, buf)
	if errors.Is(err, unix.ERANGE) {
		sz, err2 := unix.Llistxattr(p, nil)
		if err2 != nil {
			return nil, false, err2
		}
		buf = make([]byte, sz)
		n, err = unix.Llistxattr(p, buf)
	}
	if errors.Is(err, unix.ENOTSUP) || n <= 0 {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	var out map[string]string
	opaque := false
	for _, name := range strings.Split(strings.TrimRight(string(buf[:n]), "\x00"), "\x00") {
		keep := strings.HasPrefix(name, "security.") || strings.HasPrefix(name, "user.")
		if !keep && name != overlayOpaque {
			continue
		}
		val, err := lgetxattr(p, name)
		if err != nil {
			return nil, false, fmt.Errorf("xattr %s: %w", name, err)
		}
		if name == overlayOpaque {
			opaque = val == "y"
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[name] = val
	}
	return out, opaque, nil
}

func lgetxattr(p, name string) (string, error) {
	sz, err := unix.Lgetxattr(p, name, nil)
	if err != nil {
		return "", err
	}
	buf := make([]byte, sz)
	n, err := unix.Lgetxattr(p, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// ExtractLayerToDir unpacks a gzip layer blob into an empty directory in the
// form overlayfs reads as a lower layer: ".wh.NAME" becomes a character device
// 0:0 and ".wh..wh..opq" the trusted.overlay.opaque xattr on its directory.
// Layers stay separate directories, so nothing is merged here. Entries whose
// names are absolute, contain "..", or pass through a symlink are refused.
func ExtractLayerToDir(ctx context.Context, blob, dir string) error {
	f, err := os.Open(blob)
	if err != nil {
		return err
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return fmt.Errorf("extract %s: %w", blob, err)
	}
	defer gz.Close()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tr := tar.NewReader(gz)
	type dirTime struct {
		path string
		t    time.Time
	}
	var dirTimes []dirTime
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("extract %s: %w", blob, err)
		}
		name := filepath.Clean(hdr.Name)
		if filepath.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") {
			return fmt.Errorf("extract %s: unsafe entry name %q", blob, hdr.Name)
		}
		if name == "." {
			continue
		}
		target := filepath.Join(dir, name)
		if err := checkParents(dir, name); err != nil {
			return fmt.Errorf("extract %s: %w", blob, err)
		}
		base := filepath.Base(name)
		if base == opaqueWhiteout {
			if err := unix.Lsetxattr(filepath.Dir(target), overlayOpaque, []byte("y"), 0); err != nil {
				return fmt.Errorf("extract %s: opaque %s: %w", blob, name, err)
			}
			continue
		}
		if strings.HasPrefix(base, whiteoutPrefix) {
			wt := filepath.Join(filepath.Dir(target), strings.TrimPrefix(base, whiteoutPrefix))
			if err := unix.Mknod(wt, unix.S_IFCHR, 0); err != nil {
				return fmt.Errorf("extract %s: whiteout %s: %w", blob, name, err)
			}
			continue
		}
		mode := os.FileMode(hdr.Mode).Perm()
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.Mkdir(target, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
				return err
			}
			dirTimes = append(dirTimes, dirTime{target, hdr.ModTime})
		case tar.TypeReg:
			out, err := os.OpenFile(target, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(out, tr)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("extract %s: %s: %w", blob, name, err)
			}
		case tar.TypeSymlink:
			if err := os.Symlink(hdr.Linkname, target); err != nil {
				return err
			}
		case tar.TypeLink:
			ln := filepath.Clean(hdr.Linkname)
			if filepath.IsAbs(ln) || strings.HasPrefix(ln, "../") || ln == ".." {
				return fmt.Errorf("extract %s: unsafe hard link %q", blob, hdr.Linkname)
			}
			if err := os.Link(filepath.Join(dir, ln), target); err != nil {
				return err
			}
			continue // shares the first name's metadata
		case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
			m := uint32(unix.S_IFIFO)
			if hdr.Typeflag == tar.TypeChar {
				m = unix.S_IFCHR
			} else if hdr.Typeflag == tar.TypeBlock {
				m = unix.S_IFBLK
			}
			if err := unix.Mknod(target, m|uint32(mode), int(unix.Mkdev(uint32(hdr.Devmajor), uint32(hdr.Devminor)))); err != nil {
				return err
			}
		default:
			return fmt.Errorf("extract %s: %s: unsupported entry type %q", blob, name, hdr.Typeflag)
		}
		if err := os.Lchown(target, hdr.Uid, hdr.Gid); err != nil {
			return err
		}
		for k, v := range hdr.PAXRecords {
			if x, ok := strings.CutPrefix(k, "SCHILY.xattr."); ok {
				if err := unix.Lsetxattr(target, x, []byte(v), 0); err != nil {
					return fmt.Errorf("extract %s: %s: xattr %s: %w", blob, name, x, err)
				}
			}
		}
		if hdr.Typeflag != tar.TypeSymlink {
			// After chown, which clears setuid bits.
			if err := os.Chmod(target, mode|setBits(hdr.Mode)); err != nil {
				return err
			}
			if hdr.Typeflag != tar.TypeDir {
				if err := os.Chtimes(target, hdr.ModTime, hdr.ModTime); err != nil {
					return err
				}
			}
		} else {
			ts := []unix.Timespec{unix.NsecToTimespec(hdr.ModTime.UnixNano()), unix.NsecToTimespec(hdr.ModTime.UnixNano())}
			unix.UtimesNanoAt(unix.AT_FDCWD, target, ts, unix.AT_SYMLINK_NOFOLLOW)
		}
	}
	sort.Slice(dirTimes, func(i, j int) bool { return len(dirTimes[i].path) > len(dirTimes[j].path) })
	for _, d := range dirTimes {
		os.Chtimes(d.path, d.t, d.t)
	}
	return nil
}

func setBits(m int64) os.FileMode {
	var out os.FileMode
	if m&0o4000 != 0 {
		out |= os.ModeSetuid
	}
	if m&0o2000 != 0 {
		out |= os.ModeSetgid
	}
	if m&0o1000 != 0 {
		out |= os.ModeSticky
	}
	return out
}

// checkParents refuses a name whose parent directories inside dir are not all
// real directories (a symlink there could lead the write outside dir).
func checkParents(dir, name string) error {
	cur := dir
	parts := strings.Split(filepath.Dir(name), string(filepath.Separator))
	for _, p := range parts {
		if p == "." {
			break
		}
		cur = filepath.Join(cur, p)
		fi, err := os.Lstat(cur)
		if errors.Is(err, os.ErrNotExist) {
			// Layers may omit parents; create them like image tools do.
			if err := os.Mkdir(cur, 0o755); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			return fmt.Errorf("entry %q passes through non-directory %s", name, cur)
		}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
