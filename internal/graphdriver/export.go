package graphdriver

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
)

// exportXattrs are the xattrs carried into a layer tar: file capabilities and the
// user namespace (what package archive restores and fstree compares).
var exportXattrs = []string{"security.capability", "user."}

// writeChanges writes the layer tar of cs (sorted by path) to w, reading added and
// changed entries from the tree at root: whiteouts (".wh.NAME") for deletions,
// a hard link for a second name of an inode already written, numeric owners, PAX
// records for nanosecond times and xattrs. Sockets are left out, as Docker does.
// Every path is resolved beneath root without following any symlink, and a file is
// read only if it is still the inode that was compared.
func writeChanges(ctx context.Context, w io.Writer, root string, cs []change) error {
	rootFd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("export %s: %w", root, err)
	}
	defer unix.Close(rootFd)
	tw := tar.NewWriter(w)
	links := map[uint64]string{}
	buf := make([]byte, 1<<20)
	for _, c := range cs {
		if err := ctx.Err(); err != nil {
			return err
		}
		rel := strings.TrimPrefix(c.Path, "/")
		if c.Kind == ChangeDelete {
			dir, base := path.Split(rel)
			hdr := &tar.Header{Typeflag: tar.TypeReg, Name: dir + ".wh." + base, ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
			if err := tw.WriteHeader(hdr); err != nil {
				return fmt.Errorf("export whiteout of %s: %w", c.Path, err)
			}
			continue
		}
		if err := writeEntry(tw, rootFd, rel, links, buf); err != nil {
			return fmt.Errorf("export %s: %w", c.Path, err)
		}
	}
	return tw.Close()
}

func writeEntry(tw *tar.Writer, rootFd int, rel string, links map[uint64]string, buf []byte) error {
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
	var fd = -1
	defer func() {
		if fd >= 0 {
			unix.Close(fd)
		}
	}()
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
			return errors.New("changed while exporting")
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
		target, err := readlinkat(dfd, base)
		if err != nil {
			return err
		}
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
	case unix.S_IFCHR, unix.S_IFBLK:
		hdr.Typeflag = tar.TypeChar
		if st.Mode&unix.S_IFMT == unix.S_IFBLK {
			hdr.Typeflag = tar.TypeBlock
		}
		hdr.Devmajor, hdr.Devminor = int64(unix.Major(st.Rdev)), int64(unix.Minor(st.Rdev))
	case unix.S_IFIFO:
		hdr.Typeflag = tar.TypeFifo
	default:
		return nil // sockets are not carried in layers
	}
	if fd >= 0 {
		xs, err := fdXattrs(fd)
		if err != nil {
			return fmt.Errorf("xattrs: %w", err)
		}
		for k, v := range xs {
			if hdr.PAXRecords == nil {
				hdr.PAXRecords = map[string]string{}
			}
			hdr.PAXRecords["SCHILY.xattr."+k] = v
		}
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if hdr.Typeflag != tar.TypeReg {
		return nil
	}
	n, err := io.CopyBuffer(tw, io.LimitReader(fdReader(fd), hdr.Size), buf)
	if err != nil {
		return err
	}
	if n != hdr.Size {
		return fmt.Errorf("shrank from %d to %d bytes while exporting", hdr.Size, n)
	}
	return nil
}

// fdReader reads a file descriptor it does not own.
type fdReader int

func (r fdReader) Read(b []byte) (int, error) {
	for {
		n, err := unix.Read(int(r), b)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, err
		}
		if n == 0 && len(b) > 0 {
			return 0, io.EOF
		}
		return n, nil
	}
}

func readlinkat(dfd int, name string) (string, error) {
	for size := 256; ; size *= 2 {
		b := make([]byte, size)
		n, err := unix.Readlinkat(dfd, name, b)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(b[:n]), nil
		}
	}
}

// fdXattrs returns the exported xattrs of the file open at fd.
func fdXattrs(fd int) (map[string]string, error) {
	names, err := sizedRead(func(b []byte) (int, error) { return unix.Flistxattr(fd, b) })
	if errors.Is(err, unix.ENOTSUP) || len(names) == 0 {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out map[string]string
	for _, name := range strings.Split(string(names), "\x00") {
		if name == "" || !wantXattr(name) {
			continue
		}
		v, err := sizedRead(func(b []byte) (int, error) { return unix.Fgetxattr(fd, name, b) })
		if errors.Is(err, unix.ENODATA) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("get %s: %w", name, err)
		}
		if out == nil {
			out = map[string]string{}
		}
		out[name] = string(v)
	}
	return out, nil
}

func wantXattr(name string) bool {
	for _, x := range exportXattrs {
		if name == x || (strings.HasSuffix(x, ".") && strings.HasPrefix(name, x)) {
			return true
		}
	}
	return false
}

// sizedRead calls f with no buffer for the size, then with a buffer of that size.
func sizedRead(f func([]byte) (int, error)) ([]byte, error) {
	for {
		n, err := f(nil)
		if err != nil || n == 0 {
			return nil, err
		}
		b := make([]byte, n)
		n, err = f(b)
		if errors.Is(err, unix.ERANGE) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return b[:n], nil
	}
}
