package rig

import (
	"context"
	"path/filepath"

	"github.com/slacker-dev/slacker/internal/api"
)

// What the evaluation (package eval) needs beyond the System interface: several
// operations at once against one daemon (N concurrent pulls or pushes), and the
// daemons themselves (their API, for statistics and process IDs).

// CLI runs the slacker CLI against the running slackerd. Unlike Pull and Run it
// keeps no state, so several calls may run at once.
func (s *Slacker) CLI(ctx context.Context, args ...string) (RunResult, error) {
	return s.cli(ctx, nil, args...)
}

// Client is the API client of the running slackerd (nil before Cold or
// StartPublisher).
func (s *Slacker) Client() *api.Client { return s.client }

// StartPublisher (re)starts slackerd on the publishing node, where Publish converted
// images, so that CLI can push them again (several at once); Cold leaves it.
func (s *Slacker) StartPublisher(ctx context.Context) error {
	return s.start(ctx, filepath.Join(s.o.Dir, "publish"))
}

// Ctr runs ctr (namespace bench) against the running containerd. It keeps no
// state, so several calls may run at once.
func (c *Containerd) Ctr(ctx context.Context, args ...string) (RunResult, error) {
	return c.ctr(ctx, nil, args...)
}

// Socket is the running containerd's socket ("" before Cold).
func (c *Containerd) Socket() string {
	if c.c == nil {
		return ""
	}
	return c.c.Socket
}

// PID is the running containerd's process ID (0 before Cold).
func (c *Containerd) PID() int {
	if c.c == nil {
		return 0
	}
	return c.c.PID()
}
