package snapshotter

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/store"
)

// Snapshots returns a source of garbage-collection roots for the node's lease: the
// Slacker snapshot of every committed containerd snapshot recorded under dir (the
// snapshotter's Dir), plus the blank base, plus whatever other returns. Without it,
// images pulled through containerd (which the local name store never sees) would
// be collectable.
func Snapshots(dir string, other func(context.Context) ([]digest.Digest, error)) func(context.Context) ([]digest.Digest, error) {
	return func(ctx context.Context) ([]digest.Digest, error) {
		var out []digest.Digest
		if other != nil {
			var err error
			if out, err = other(ctx); err != nil {
				return nil, err
			}
		}
		var base struct {
			Snapshot digest.Digest `json:"snapshot"`
		}
		if b, err := os.ReadFile(filepath.Join(dir, "base.json")); err == nil && json.Unmarshal(b, &base) == nil &&
			store.CheckDigest(base.Snapshot) == nil {
			out = append(out, base.Snapshot)
		}
		ents, err := os.ReadDir(filepath.Join(dir, "records"))
		if os.IsNotExist(err) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("containerd snapshot records: %w", err)
		}
		for _, e := range ents {
			if !strings.HasSuffix(e.Name(), ".json") {
				continue
			}
			b, err := os.ReadFile(filepath.Join(dir, "records", e.Name()))
			if os.IsNotExist(err) {
				continue // removed meanwhile
			}
			var r record
			if err == nil {
				err = json.Unmarshal(b, &r)
			}
			if err == nil {
				err = store.CheckDigest(r.Snapshot)
			}
			if err != nil {
				// An unreadable record must not let its snapshot be collected: fail the
				// lease refresh, so the previous lease stays in force.
				return nil, fmt.Errorf("containerd snapshot record %s: %w", e.Name(), err)
			}
			out = append(out, r.Snapshot)
		}
		return out, nil
	}
}
