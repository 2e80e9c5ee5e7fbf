package fetch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/blockmap"
	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/store"
)

// Options tune a Fetcher. Zero values take the defaults shown.
type Options struct {
	Parallel   int           // concurrent store reads (64: a readahead window in flight)
	Attempt    time.Duration // deadline of one attempt (30s)
	MaxWait    time.Duration // total time a chunk may take, retries included (60s)
	Backoff    time.Duration // first retry delay, doubled each time (50ms)
	MaxBackoff time.Duration // (2s)
	Logger     *slog.Logger
}

// Fetcher reads chunks from a store. Safe for concurrent use.
type Fetcher struct {
	st   store.Store
	opts Options
	log  *slog.Logger
	sem  chan struct{}

	fetched  atomic.Int64
	requests atomic.Int64
	batches  atomic.Int64 // batch reads of several chunks (FetchMany)
	retries  atomic.Int64
	failures atomic.Int64
}

// New returns a Fetcher reading from st.
func New(st store.Store, opts Options) *Fetcher {
	if opts.Parallel <= 0 {
		opts.Parallel = 64
	}
	if opts.Attempt <= 0 {
		opts.Attempt = 30 * time.Second
	}
	if opts.MaxWait <= 0 {
		opts.MaxWait = 60 * time.Second
	}
	if opts.Backoff <= 0 {
		opts.Backoff = 50 * time.Millisecond
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = 2 * time.Second
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Fetcher{st: st, opts: opts, log: log, sem: make(chan struct{}, opts.Parallel)}
}

// Stats are a Fetcher's counters.
type Stats struct {
	FetchedBytes int64 `json:"fetched_bytes"`
	Requests     int64 `json:"requests"`
	Retries      int64 `json:"retries"`
	Failures     int64 `json:"failures"`
}

func (f *Fetcher) Stats() Stats {
	return Stats{FetchedBytes: f.fetched.Load(), Requests: f.requests.Load(), Retries: f.retries.Load(), Failures: f.failures.Load()}
}

// permanent reports errors that retrying cannot fix.
func permanent(err error) bool {
	return errors.Is(err, errdefs.ErrNotFound) || errors.Is(err, errdefs.ErrInvalid)
}

// Fetch returns the whole chunk c, verified against its digest and size. It retries
// transient failures (and corrupt transfers) until MaxWait, then fails with an error
// wrapping the last cause.
func (f *Fetcher) Fetch(ctx context.Context, c blockmap.Chunk) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, f.opts.MaxWait)
	defer cancel()
	select {
	case f.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("fetch chunk %s: waiting for a slot: %w", c.Digest, ctx.Err())
	}
	defer func() { <-f.sem }()
	delay := f.opts.Backoff
	start := time.Now()
	for attempt := 1; ; attempt++ {
		f.requests.Add(1)
		data, err := f.attempt(ctx, c)
		if err == nil {
			f.fetched.Add(int64(len(data)))
			if attempt > 1 {
				f.log.Info("chunk-fetch-recovered", "chunk", c.Digest, "attempts", attempt, "waited", time.Since(start))
			}
			return data, nil
		}
		if permanent(err) || ctx.Err() != nil {
			f.failures.Add(1)
			f.log.Error("chunk-fetch-failed", "chunk", c.Digest, "size", c.Size, "attempts", attempt,
				"waited", time.Since(start), "err", err)
			if ctx.Err() != nil && !permanent(err) {
				return nil, fmt.Errorf("fetch chunk %s: gave up after %d attempts in %v: store %w (last error: %v)",
					c.Digest, attempt, time.Since(start).Round(time.Millisecond), errdefs.ErrUnavailable, err)
			}
			return nil, fmt.Errorf("fetch chunk %s: %w", c.Digest, err)
		}
		f.retries.Add(1)
		f.log.Warn("chunk-fetch-retry", "chunk", c.Digest, "attempt", attempt, "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(delay):
		}
		delay = min(2*delay, f.opts.MaxBackoff)
	}
}

// Object returns a whole object of unknown size (a block map), with the same
// retries and bounds as Fetch.
func (f *Fetcher) Object(ctx context.Context, d digest.Digest) ([]byte, error) {
	return f.Fetch(ctx, blockmap.Chunk{Digest: d, Size: -1})
}

func (f *Fetcher) attempt(ctx context.Context, c blockmap.Chunk) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, f.opts.Attempt)
	defer cancel()
	data, err := store.ReadAllSized(ctx, f.st, c.Digest, c.Size)
	if err != nil {
		return nil, err
	}
	if c.Size >= 0 && int64(len(data)) != c.Size {
		return nil, fmt.Errorf("chunk %s has %d bytes, the map says %d: object %w", c.Digest, len(data), c.Size, errdefs.ErrCorrupt)
	}
	return data, nil
}
