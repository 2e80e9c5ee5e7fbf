package graphdriver

import (
	"encoding/json"
	"path/filepath"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/node"
)

// Roots lists the snapshots of every Docker layer recorded under the driver's
// state directory dir (Options.Root), read from disk on each call, so that it
// works before the driver is open. Those snapshots are in use on the node even
// when no volume clones them (an image layer is only its snapshot): the node's
// lease must name them, or a garbage collection would take them (package gc).
func Roots(dir string) node.RootSource {
	return node.RecordRoots(filepath.Join(dir, "layers"), "docker layer", func(b []byte) (digest.Digest, error) {
		var rec record
		err := json.Unmarshal(b, &rec)
		return rec.Snapshot, err
	})
}
