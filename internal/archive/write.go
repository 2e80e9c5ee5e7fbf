package archive

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/slacker-dev/slacker/internal/fdio"
)

// Change is one entry of a layer to write from a tree.
type Change struct {
	// Path is the entry's slash-separated path under the tree's root ("etc/hosts").
	Path string
	// Delete writes a whiteout: the path was removed.
	Delete bool
	// Opaque, for a directory, writes an opaque whiteout right after it: whatever
	// the directory held below this layer is gone.
	Opaque bool
}

// WriteOptions configure WriteChanges.
type WriteOptions struct {
	// Xattrs says which extended attributes to carry (none if nil).
	Xattrs func(name string) bool
}

// WriteChanges writes the layer tar of cs to w (in the order given: parents before
// their children), reading added and changed entries from the tree at root:
// whiteouts (".wh.NAME") for deletions and an opaque whiteout (".wh..wh..opq") for
// opaque directories, a hard link for a second name of an inode already written,
// numeric owners, PAX records for nanosecond times and xattrs. Sockets are left
// out, as Docker does. Every path is resolved beneath root without following any
// symlink, and a file is read only if it is still the inode that was stat'ed.
func WriteChanges(ctx context.Context, w io.Writer, root string, cs []Change, opts WriteOptions) error {
	rootFd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("write layer from %s: %w", root, err)
	}
	defer unix.Close(rootFd)
	if opts.Xattrs == nil {
		opts.Xattrs = func(string) bool { return false }
	}
	tw := tar.NewWriter(w)
	links := map[uint64]string{}
	buf := make([]byte, 1<<20)
	for _, c := range cs {
		if err := ctx.Err(); err != nil {
			return err
		}
		rel := strings.Trim(c.Path, "/")
		if c.Delete {
			dir, base := path.Split(rel)
			if err := writeMarker(tw, dir+whiteoutPrefix+base); err != nil {
				return fmt.Errorf("write whiteout of %s: %w", c.Path, err)
			}
			continue
		}
		if err := writeEntry(tw, rootFd, rel, links, buf, opts); err != nil {
			return fmt.Errorf("write %s: %w", c.Path, err)
		}
		if c.Opaque {
			if err := writeMarker(tw, path.Join(rel, whiteoutOpaque)); err != nil {
				return fmt.Errorf("write opaque whiteout of %s: %w", c.Path, err)
			}
		}
	}
	return tw.Close()
}

func writeMarker(tw *tar.Writer, name string) error {
	return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, ModTime: time.Unix(0, 0), Format: tar.FormatPAX})
}

func writeEntry(tw *tar.Writer, rootFd int, rel string, links map[uint64]string, buf []byte, opts WriteOptions) error {
	if rel == "" || rel == "." {
		return writeRoot(tw, rootFd, opts)
	}
	dir, base := path.Split(rel)
	dfd := rootFd
	if dir != "" {
		var err error
		dfd, err = unix.Openat2(rootFd, dir, &unix.OpenHow{
			Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
		})
		if err != nil {
			return fmt.Errorf("open its directory: %w", err)
		}
		defer unix.Close(dfd)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	hdr := &tar.Header{
		Name:    rel,
		Mode:    int64(st.Mode & 0o7777),
		Uid:     int(st.Uid),
		Gid:     int(st.Gid),
		ModTime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec),
		Format:  tar.FormatPAX,
	}
	fd, opath := -1, false
	defer func() {
		if fd >= 0 {
			unix.Close(fd)
		}
	}()
	openPath := func() error {
		var err error
		fd, err = unix.Openat(dfd, base, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		opath = true
		return err
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		if first, ok := links[st.Ino]; ok && st.Nlink > 1 {
			hdr.Typeflag, hdr.Linkname = tar.TypeLink, first
			return tw.WriteHeader(hdr)
		}
		var err error
		fd, err = unix.Openat(dfd, base, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NOCTTY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		var fst unix.Stat_t
		if err := unix.Fstat(fd, &fst); err != nil {
			return err
		}
		if fst.Ino != st.Ino || fst.Mode&unix.S_IFMT != unix.S_IFREG {
			return errors.New("changed while writing the layer")
		}
		hdr.Typeflag, hdr.Size = tar.TypeReg, st.Size
		if st.Nlink > 1 {
			links[st.Ino] = rel
		}
	case unix.S_IFDIR:
		hdr.Typeflag, hdr.Name = tar.TypeDir, rel+"/"
		var err error
		if fd, err = unix.Openat(dfd, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err != nil {
			return err
		}
	case unix.S_IFLNK:
		target, err := fdio.Readlinkat(dfd, base)
		if err != nil {
			return err
		}
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
		if err := openPath(); err != nil {
			return err
		}
	case unix.S_IFCHR, unix.S_IFBLK:
		hdr.Typeflag = tar.TypeChar
		if st.Mode&unix.S_IFMT == unix.S_IFBLK {
			hdr.Typeflag = tar.TypeBlock
		}
		hdr.Devmajor, hdr.Devminor = int64(unix.Major(st.Rdev)), int64(unix.Minor(st.Rdev))
		if err := openPath(); err != nil {
			return err
		}
	case unix.S_IFIFO:
		hdr.Typeflag = tar.TypeFifo
		if err := openPath(); err != nil {
			return err
		}
	default:
		return nil // sockets are not carried in layers
	}
	if err := addXattrs(hdr, fd, opath, opts); err != nil {
		return err
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if hdr.Typeflag != tar.TypeReg {
		return nil
	}
	n, err := io.CopyBuffer(tw, io.LimitReader(fdio.Reader(fd), hdr.Size), buf)
	if err != nil {
		return err
	}
	if n != hdr.Size {
		return fmt.Errorf("shrank from %d to %d bytes while writing the layer", hdr.Size, n)
	}
	return nil
}

// writeRoot writes the entry of the tree's root directory itself ("./"): its
// mode, owner, times and xattrs.
func writeRoot(tw *tar.Writer, rootFd int, opts WriteOptions) error {
	var st unix.Stat_t
	if err := unix.Fstat(rootFd, &st); err != nil {
		return err
	}
	hdr := &tar.Header{Typeflag: tar.TypeDir, Name: "./", Mode: int64(st.Mode & 0o7777), Uid: int(st.Uid),
		Gid: int(st.Gid), ModTime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec), Format: tar.FormatPAX}
	if err := addXattrs(hdr, rootFd, false, opts); err != nil {
		return err
	}
	return tw.WriteHeader(hdr)
}

// addXattrs puts the xattrs of the file open as fd that opts carries into hdr's
// PAX records.
func addXattrs(hdr *tar.Header, fd int, opath bool, opts WriteOptions) error {
	xs, err := fdio.Xattrs(fd, opath, opts.Xattrs)
	if err != nil {
		return fmt.Errorf("xattrs: %w", err)
	}
	for k, v := range xs {
		if hdr.PAXRecords == nil {
			hdr.PAXRecords = map[string]string{}
		}
		hdr.PAXRecords[xattrPAXPrefix+k] = string(v)
	}
	return nil
}
