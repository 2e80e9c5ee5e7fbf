package daemon

import (
	"context"
	"log/slog"

	"github.com/slacker-dev/slacker/internal/image"
	"github.com/slacker-dev/slacker/internal/node"
	"github.com/slacker-dev/slacker/internal/registry"
)

// AttachedFinder returns the snapshotter's Options.Attached for node n: the
// Slacker descriptor attached to an ordinary image (registry.Attached), chosen
// as `slacker pull` chooses (registry.ChooseAttached: the newest whose snapshot
// is in n's store). What it passes over is logged, never used.
func AttachedFinder(n *node.Node, o registry.Options, log *slog.Logger) func(ctx context.Context, ref string) (*image.Descriptor, error) {
	return func(ctx context.Context, ref string) (*image.Descriptor, error) {
		found, subject, rejected, err := registry.Attached(ctx, ref, o)
		if err != nil {
			return nil, err
		}
		a, passed := registry.ChooseAttached(found, func(d *image.Descriptor) error {
			_, err := n.Map(ctx, d.Snapshot)
			return err
		})
		for _, r := range append(rejected, passed...) {
			log.Warn("attached-descriptor-rejected", "image", ref, "subject", subject, "artifact", r.Artifact, "err", r.Err)
		}
		if a == nil {
			return nil, nil
		}
		log.Info("attached-descriptor-found", "image", ref, "subject", subject, "artifact", a.Artifact,
			"snapshot", a.Descriptor.Snapshot)
		return a.Descriptor, nil
	}
}
