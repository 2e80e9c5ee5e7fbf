package archive

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/slacker-dev/slacker/internal/errdefs"
)

// CopyTree copies the tree at src into dst, an empty directory: every entry with
// its content, mode, owner, times, xattrs (all of them), hard links, symlinks,
// fifos and devices, and the root's own metadata. It is WriteChanges of every
// entry of src piped into Apply onto dst, so src is read without following any
// symlink and nothing is written outside dst. src must not change meanwhile.
// What a layer cannot carry is refused before anything is copied, with
// errdefs.ErrUnsupported: a socket, and a name that starts with ".wh." (a
// whiteout in a layer). Holes are kept as Apply keeps them: every 4 KiB block of
// zeros is a hole in the copy.
func CopyTree(ctx context.Context, src, dst string) (Stats, error) {
	cs, err := treeChanges(ctx, src)
	if err != nil {
		return Stats{}, err
	}
	pr, pw := io.Pipe()
	werr := make(chan error, 1)
	go func() {
		err := WriteChanges(ctx, pw, src, cs, WriteOptions{Xattrs: func(string) bool { return true }})
		pw.CloseWithError(err)
		werr <- err
	}()
	st, err := Apply(ctx, dst, pr, Options{AllowDevices: true})
	pr.CloseWithError(errors.New("copy stopped")) // unblocks the writer if Apply stopped early
	if werr := <-werr; werr != nil && err == nil {
		err = werr
	}
	if err != nil {
		return st, fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	return st, nil
}

// treeChanges lists every entry of the tree at root, the root first and each
// directory before what it holds (names sorted), as additions.
func treeChanges(ctx context.Context, root string) ([]Change, error) {
	out := []Change{{Path: "."}}
	err := walkTree(ctx, root, func(p string, st *unix.Stat_t, _ int) (bool, error) {
		switch {
		case strings.HasPrefix(path.Base(p), whiteoutPrefix):
			return false, errdefs.Errorf(errdefs.ErrUnsupported, "%q: a name a layer takes for a whiteout", p)
		case st.Mode&unix.S_IFMT == unix.S_IFSOCK:
			return false, errdefs.Errorf(errdefs.ErrUnsupported, "%q: a socket, which a layer cannot carry", p)
		}
		out = append(out, Change{Path: p})
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("read tree %s: %w", root, err)
	}
	return out, nil
}
