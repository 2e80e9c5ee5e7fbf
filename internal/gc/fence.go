package gc

import (
	"context"
	"fmt"
	"time"

	"github.com/slacker-dev/slacker/internal/store"
)

// Fence tells an upload whether a collection may have deleted objects since the
// upload began checking which of its chunks the store has. The upload takes a Fence
// after listing its chunks in its lease and before its first existence check, and
// asks Clear after refreshing its lease and before writing its map.
type Fence struct {
	refs       store.Refs
	base       State
	baseActive bool
	now        func() time.Time
	poll       time.Duration
}

// NewFence takes the collector's current state as the baseline.
func NewFence(ctx context.Context, r store.Refs) (*Fence, error) {
	f := &Fence{refs: r, now: time.Now, poll: 200 * time.Millisecond}
	if err := f.rebase(ctx); err != nil {
		return nil, err
	}
	return f, nil
}

func (f *Fence) rebase(ctx context.Context) error {
	s, err := ReadState(ctx, f.refs)
	if err != nil {
		return err
	}
	f.base, f.baseActive = s, s.Active(f.now())
	return nil
}

// Clear reports whether no collection ran at any time since the baseline. If one
// may have, it waits until none is running (bounded by ctx), takes the state then as
// the new baseline and returns false: the caller checks (and uploads) every chunk
// again, then asks Clear again.
func (f *Fence) Clear(ctx context.Context) (bool, error) {
	cur, err := ReadState(ctx, f.refs)
	if err != nil {
		return false, err
	}
	if cur.Epoch == f.base.Epoch && !f.baseActive && !cur.Active(f.now()) {
		return true, nil
	}
	for cur.Active(f.now()) {
		running := func() error {
			return fmt.Errorf("a garbage collection of the store (epoch %d, on %s since %s) is still running: %w",
				cur.Epoch, cur.Host, cur.Started.Format(time.RFC3339), context.Cause(ctx))
		}
		select {
		case <-ctx.Done():
			return false, running()
		case <-time.After(f.poll):
		}
		next, err := ReadState(ctx, f.refs)
		if err != nil {
			if ctx.Err() != nil {
				return false, running()
			}
			return false, err
		}
		cur = next
	}
	f.base, f.baseActive = cur, false
	return false, nil
}

// Epoch is the baseline's epoch.
func (f *Fence) Epoch() int64 { return f.base.Epoch }
