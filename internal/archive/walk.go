package archive

import (
	"context"
	"errors"
	"fmt"
	"path"

	"golang.org/x/sys/unix"

	"github.com/slacker-dev/slacker/internal/fdio"
)

// visitFunc is told of one entry of a tree walk: its path relative to the
// walk's root, its stat (not following a symlink), and, for a directory, its
// open fd (else -1), valid during the call. It returns whether the walk goes
// into a directory.
type visitFunc func(p string, st *unix.Stat_t, dirfd int) (descend bool, err error)

// walkTree visits every entry under the directory root (not root itself), names
// sorted and each directory before what it holds, following no symlink. An entry
// removed between its directory's listing and its stat is passed over.
func walkTree(ctx context.Context, root string, visit visitFunc) error {
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return walkDir(ctx, fd, "", visit)
}

func walkDir(ctx context.Context, dfd int, rel string, visit visitFunc) error {
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
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			if _, err := visit(p, &st, -1); err != nil {
				return err
			}
			continue
		}
		cfd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open %q: %w", p, err)
		}
		descend, err := visit(p, &st, cfd)
		if err == nil && descend {
			err = walkDir(ctx, cfd, p, visit)
		}
		unix.Close(cfd)
		if err != nil {
			return err
		}
	}
	return nil
}
