package snapshotter

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/node"
	"github.com/slacker-dev/slacker/internal/store"
)

// Roots lists, for the node's lease, the Slacker snapshot of every committed
// containerd snapshot recorded under dir (the snapshotter's Dir), plus the blank
// base. Without them, images pulled through containerd (which the local name
// store never sees) would be collectable.
func Roots(dir string) []node.RootSource {
	base := func(context.Context) ([]digest.Digest, error) {
		var b struct {
			Snapshot digest.Digest `json:"snapshot"`
		}
		if raw, err := os.ReadFile(filepath.Join(dir, "base.json")); err == nil && json.Unmarshal(raw, &b) == nil &&
			store.CheckDigest(b.Snapshot) == nil {
			return []digest.Digest{b.Snapshot}, nil
		}
		return nil, nil
	}
	records := node.RecordRoots(filepath.Join(dir, "records"), "containerd snapshot", func(b []byte) (digest.Digest, error) {
		var r record
		if err := json.Unmarshal(b, &r); err != nil {
			return "", err
		}
		// An unreadable record must not let its snapshot be collected: it fails
		// the listing, so the previous lease stays in force.
		return r.Snapshot, store.CheckDigest(r.Snapshot)
	})
	return []node.RootSource{base, records}
}
