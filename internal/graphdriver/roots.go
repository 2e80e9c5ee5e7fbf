package graphdriver

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/opencontainers/go-digest"
)

// Snapshots returns a function listing the snapshots of every Docker layer recorded
// under the driver's state directory dir (Options.Root), read from disk on each call,
// so that it works before the driver is open. Those snapshots are in use on the node
// even when no volume clones them (an image layer is only its snapshot): the node's
// lease must name them, or a garbage collection would take them (package gc).
// Snapshots then adds other's (nil: none).
func Snapshots(dir string, other func(context.Context) ([]digest.Digest, error)) func(context.Context) ([]digest.Digest, error) {
	return func(ctx context.Context) ([]digest.Digest, error) {
		var out []digest.Digest
		if other != nil {
			var err error
			if out, err = other(ctx); err != nil {
				return nil, err
			}
		}
		ents, err := os.ReadDir(filepath.Join(dir, "layers"))
		if os.IsNotExist(err) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("docker layers: %w", err)
		}
		for _, e := range ents {
			if !strings.HasSuffix(e.Name(), ".json") {
				continue
			}
			b, err := os.ReadFile(filepath.Join(dir, "layers", e.Name()))
			if os.IsNotExist(err) {
				continue // removed meanwhile
			}
			var rec record
			if err == nil {
				err = json.Unmarshal(b, &rec)
			}
			if err != nil {
				return nil, fmt.Errorf("docker layer %s: %w", e.Name(), err)
			}
			if rec.Snapshot != "" {
				out = append(out, rec.Snapshot)
			}
		}
		return out, nil
	}
}
