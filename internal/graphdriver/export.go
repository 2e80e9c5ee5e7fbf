package graphdriver

import (
	"context"
	"io"

	"github.com/slacker-dev/slacker/internal/archive"
	"github.com/slacker-dev/slacker/internal/fdio"
)

// exportXattrs are the xattrs carried into a layer tar: file capabilities and the
// user namespace (what package archive restores and fstree compares).
var exportXattrs = fdio.Matcher([]string{"security.capability", "user."})

// writeChanges writes the layer tar of cs (sorted by path) to w, reading added and
// changed entries from the tree at root (archive.WriteChanges).
func writeChanges(ctx context.Context, w io.Writer, root string, cs []change) error {
	out := make([]archive.Change, len(cs))
	for i, c := range cs {
		out[i] = archive.Change{Path: c.Path, Delete: c.Kind == ChangeDelete}
	}
	return archive.WriteChanges(ctx, w, root, out, archive.WriteOptions{Xattrs: exportXattrs})
}
