package analysis

import (
	"context"
	"errors"

	"github.com/slacker-dev/slacker/internal/hellobench/workload"
)

// startups runs every workload twice on a cold Slacker node and records what each
// container read (see Start).
func (r *Results) startups(ctx context.Context, o Options, ws []*workload.Workload) error {
	return errors.New("start-up runs are not available yet: run with --static")
}
