package archive_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/slacker-dev/slacker/internal/archive"
	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/fstree"
	"github.com/slacker-dev/slacker/internal/testutil"
)

// TestCopyTree: a copy equals its source entry for entry, with every kind of
// metadata (the root's own included); a tree with what a layer cannot carry (a
// socket, a name starting with ".wh.") is refused before anything is copied.
func TestCopyTree(t *testing.T) {
	testutil.RequireRoot(t)
	ctx := context.Background()
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	for _, d := range []string{src, dst} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	paths := testutil.RichTree(t, src)
	// What a layer cannot carry is refused, with nothing copied.
	l, err := net.Listen("unix", filepath.Join(src, "socket"))
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	if err := os.WriteFile(filepath.Join(src, "usr", ".wh.not-a-whiteout"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, refused := range []string{"socket", "usr/.wh.not-a-whiteout"} {
		_, err := archive.CopyTree(ctx, src, dst)
		if !errors.Is(err, errdefs.ErrUnsupported) || !strings.Contains(err.Error(), refused) {
			t.Fatalf("a tree with %s: %v; want it refused, named", refused, err)
		}
		if ents, _ := os.ReadDir(dst); len(ents) != 0 {
			t.Fatalf("a refused copy wrote %d entries", len(ents))
		}
		os.Remove(filepath.Join(src, refused))
	}
	st, err := archive.CopyTree(ctx, src, dst)
	if err != nil {
		t.Fatal(err)
	}
	if st.Hardlinks != 1 || st.Devices != 2 || st.Fifos != 1 {
		t.Errorf("stats %+v: want a hard link, two devices, a fifo", st)
	}
	opts := fstree.Options{Mtimes: true, DirMtimes: true, Xattrs: []string{"user.", "trusted.", "security."},
		LabelA: "source", LabelB: "copy"}
	diffs, err := fstree.Compare(ctx, src, dst, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range diffs {
		t.Error(d)
	}
	tree, err := fstree.Walk(ctx, dst, opts)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(tree.Paths()); got != len(paths)+1 { // and "."
		t.Errorf("the copy holds %d paths, want %d", got, len(paths)+1)
	}
}
