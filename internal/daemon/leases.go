package daemon

import (
	"context"
	"path/filepath"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/names"
	"github.com/slacker-dev/slacker/internal/node"
)

// NamedSnapshots lists the snapshots the images named on this node use (each
// image's snapshot and those of its layers, in the name store under
// stateRoot/images), for the node's lease: a store shared by many nodes keeps what
// any of them names.
func NamedSnapshots(stateRoot string) node.RootSource {
	return func(context.Context) ([]digest.Digest, error) {
		ns, err := names.Open(filepath.Join(stateRoot, "images"))
		if err != nil {
			return nil, err
		}
		entries, err := ns.List()
		if err != nil {
			return nil, err
		}
		var out []digest.Digest
		for _, e := range entries {
			out = append(out, e.Descriptor.Snapshot)
			for _, l := range e.Descriptor.Layers {
				out = append(out, l.Snapshot)
			}
		}
		return out, nil
	}
}
