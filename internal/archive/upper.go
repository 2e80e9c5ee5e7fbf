package archive

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
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
	var out []Change
	err := walkTree(ctx, upper, func(p string, st *unix.Stat_t, dirfd int) (bool, error) {
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFCHR:
			if st.Rdev == 0 {
				out = append(out, Change{Path: p, Delete: true})
				return false, nil
			}
		case unix.S_IFDIR:
			opaque, err := isOpaque(dirfd)
			if err != nil {
				return false, fmt.Errorf("%q: %w", p, err)
			}
			out = append(out, Change{Path: p, Opaque: opaque})
			return true, nil
		}
		out = append(out, Change{Path: p})
		return false, nil
	})
	if err != nil {
		return nil, fmt.Errorf("read upper layer %s: %w", upper, err)
	}
	return out, nil
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
