package archive

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/slacker-dev/slacker/internal/fdio"
)

// overlayOpaque marks an opaque directory of an overlayfs upper layer.
const overlayOpaque = "trusted.overlay.opaque"

// OverlayXattrs chooses the xattrs WriteChanges carries from an overlayfs upper
// layer: every one but overlayfs's own (trusted.overlay.*), which describe the
// layer, not the file.
func OverlayXattrs(name string) bool { return !strings.HasPrefix(name, "trusted.overlay.") }

// UpperChanges lists the changes an overlayfs upper directory holds, in the order
// WriteChanges wants them (a directory before what is in it, names sorted): a
// whiteout (a 0/0 character device) is a deletion, a directory marked opaque
// (trusted.overlay.opaque=y) is written with an opaque whiteout, and every other
// entry is an addition or a change, to be written whole from the upper directory.
// The upper directory must come from an overlay mounted without redirect_dir,
// metacopy or index (mount.OverlayOptions), so that it holds every change as plain
// files. It reads names, inodes and one xattr; never a file's content.
func UpperChanges(ctx context.Context, upper string) ([]Change, error) {
	fd, err := unix.Open(upper, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("read upper layer %s: %w", upper, err)
	}
	defer unix.Close(fd)
	var out []Change
	if err := upperDir(ctx, fd, "", &out); err != nil {
		return nil, fmt.Errorf("read upper layer %s: %w", upper, err)
	}
	return out, nil
}

func upperDir(ctx context.Context, dfd int, rel string, out *[]Change) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	names, err := fdio.ReadDirNames(dfd)
	if err != nil {
		return fmt.Errorf("list %q: %w", rel, err)
	}
	for _, name := range names {
		p := path.Join(rel, name)
		var st unix.Stat_t
		if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue // removed meanwhile
			}
			return fmt.Errorf("stat %q: %w", p, err)
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFCHR:
			if st.Rdev == 0 {
				*out = append(*out, Change{Path: p, Delete: true})
				continue
			}
		case unix.S_IFDIR:
			cfd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return fmt.Errorf("open %q: %w", p, err)
			}
			opaque, err := isOpaque(cfd)
			if err == nil {
				*out = append(*out, Change{Path: p, Opaque: opaque})
				err = upperDir(ctx, cfd, p, out)
			}
			unix.Close(cfd)
			if err != nil {
				return err
			}
			continue
		}
		*out = append(*out, Change{Path: p})
	}
	return nil
}

func isOpaque(fd int) (bool, error) {
	b := make([]byte, 8)
	n, err := unix.Fgetxattr(fd, overlayOpaque, b)
	switch {
	case errors.Is(err, unix.ENODATA), errors.Is(err, unix.ENOTSUP):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("get %s: %w", overlayOpaque, err)
	}
	return string(b[:n]) == "y", nil
}
