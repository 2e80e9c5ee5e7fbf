package daemon

import (
	"context"
	"log/slog"
	"path/filepath"

	"github.com/slacker-dev/slacker/internal/labels"
	"github.com/slacker-dev/slacker/internal/node"
	"github.com/slacker-dev/slacker/internal/runc"
)

// ReconcileContainers stops the containers a previous slackerd left running,
// unless this one took the node over from it (node.Resumed: the previous one died
// or handed over, and its FUSE connection was kept by the holder): then each
// running container is kept, with a log line. Otherwise their root filesystems
// were served through the FUSE connection that died with that daemon (or were
// unmounted when it stopped), so every read or write they make fails. Each volume labelled as a
// container's (the container's ID is the volume's) whose runc container is still
// alive is killed and its runc state removed, with a log line; the container's
// record then reads as exited, and its volume, remounted by the node with every
// fsynced write, can be committed or removed. Run it once, after node.Open.
func ReconcileContainers(ctx context.Context, n *node.Node, stateRoot string, log *slog.Logger) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rt := &runc.Runtime{Root: filepath.Join(stateRoot, "runc")}
	for _, v := range n.Volumes() {
		if v.Labels[labels.Kind] != labels.KindContainer {
			continue
		}
		status, pid := rt.State(ctx, v.ID)
		switch status {
		case "running", "paused", "created":
		default:
			continue // exited, or unknown to runc: nothing holds the old mount
		}
		if n.Resumed() {
			log.Info("container-kept", "container", v.Labels[labels.Container], "id", v.ID, "pid", pid, "status", status)
			continue
		}
		if err := rt.Delete(ctx, v.ID, true); err != nil {
			log.Error("reconcile-container-failed", "container", v.Labels[labels.Container], "id", v.ID, "err", err)
			continue
		}
		log.Warn("reconcile-killed-container", "container", v.Labels[labels.Container], "id", v.ID, "pid", pid,
			"status", status, "reason", "its root filesystem was served by the previous slackerd")
	}
}
