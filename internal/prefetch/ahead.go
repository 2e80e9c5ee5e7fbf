package prefetch

import (
	"context"
	"errors"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/trace"
)

// TraceAheadTTL is how long a start-up trace fetched ahead (FetchTraceAhead)
// stands for the store's: a start later than that asks the store again, and sees
// a trace written since (a first run's).
const TraceAheadTTL = 10 * time.Second

// traceAhead is one start-up trace fetched ahead of the start that looks it up.
type traceAhead struct {
	done    chan struct{} // closed once the fetch ended
	b       []byte
	err     error
	fetched time.Time
}

// FetchTraceAhead starts fetching snapshot's start-up trace for a start expected
// soon (a pull names the snapshot): the start's lookup (BeginStartup) then finds
// it fetched, or waits for the fetch under way, instead of asking the store only
// once the container's root is made. The replay, whose first chunks the root's
// ext4 mount waits for, so begins a round trip earlier: over a link with a 20 ms
// round trip, a mount that took three of them took two. The trace is taken by
// the first lookup of snapshot within TraceAheadTTL, once. It does nothing when
// the engine keeps no traces, is closed, or has a fetch of the trace already.
func (e *Engine) FetchTraceAhead(snapshot digest.Digest) {
	if e.opts.Traces == nil || e.opts.StartupWindow < 0 || snapshot == "" {
		return
	}
	ta := &traceAhead{done: make(chan struct{})}
	e.mu.Lock()
	if e.closed || e.ahead[snapshot] != nil {
		e.mu.Unlock()
		return
	}
	e.ahead[snapshot] = ta
	e.bg.Add(1)
	e.mu.Unlock()
	go func() {
		defer e.bg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ta.b, ta.err = e.opts.Traces.GetRef(ctx, trace.RefName(snapshot))
		ta.fetched = time.Now()
		close(ta.done)
		time.AfterFunc(TraceAheadTTL, func() {
			e.mu.Lock()
			defer e.mu.Unlock()
			if e.ahead[snapshot] == ta {
				delete(e.ahead, snapshot)
			}
		})
	}()
}

// takeTraceAhead returns the record of snapshot's trace fetched ahead (or the
// store's not-found), waiting for a fetch under way; ok is false when there is
// none, it is older than TraceAheadTTL or its fetch failed otherwise: the caller
// asks the store.
func (e *Engine) takeTraceAhead(ctx context.Context, snapshot digest.Digest) (b []byte, err error, ok bool) {
	e.mu.Lock()
	ta := e.ahead[snapshot]
	delete(e.ahead, snapshot)
	e.mu.Unlock()
	if ta == nil {
		return nil, nil, false
	}
	select {
	case <-ta.done:
	case <-ctx.Done():
		return nil, nil, false
	}
	if time.Since(ta.fetched) > TraceAheadTTL || (ta.err != nil && !errors.Is(ta.err, errdefs.ErrNotFound)) {
		return nil, nil, false
	}
	return ta.b, ta.err, true
}
