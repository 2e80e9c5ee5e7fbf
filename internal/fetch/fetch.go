package fetch

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
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
	// Observe, if set, is told of every store request: "get" (one object) or
	// "get-batch" (several, one request), how long it took, the bytes it
	// delivered and its error (slackerd's metrics).
	Observe func(op string, took time.Duration, bytes int64, err error)
}

// Fetcher reads chunks from a store. Safe for concurrent use.
type Fetcher struct {
	st   store.Store
	opts Options
	log  *slog.Logger
	sem  chan struct{}

	rtMu   sync.Mutex
	recent [roundTripReads]time.Duration // the last reads' times to first byte, a ring
	nRead  int                           // reads noted in recent, in all

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

// Fetch returns the whole chunk c, verified against its digest and size, with the
// retries of the one policy (retryable) within MaxWait, slot included.
func (f *Fetcher) Fetch(ctx context.Context, c blockmap.Chunk) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, f.opts.MaxWait)
	defer cancel()
	select {
	case f.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("fetch chunk %s: waiting for a slot: %w", c.Digest, ctx.Err())
	}
	defer func() { <-f.sem }()
	var data []byte
	attempts, err := f.retry(ctx, "chunk-fetch", "fetch chunk", c.Digest, true, func(ctx context.Context) error {
		var err error
		data, err = f.attempt(ctx, c)
		return err
	})
	f.requests.Add(int64(attempts))
	f.retries.Add(int64(attempts - 1))
	if err != nil {
		f.failures.Add(1)
		return nil, err
	}
	f.fetched.Add(int64(len(data)))
	return data, nil
}

// Object returns a whole object of unknown size (a block map), with the same
// retries and bounds as Fetch.
func (f *Fetcher) Object(ctx context.Context, d digest.Digest) ([]byte, error) {
	return f.Fetch(ctx, blockmap.Chunk{Digest: d, Size: -1})
}

// roundTripReads is how many of the last reads RoundTrip looks at.
const roundTripReads = 16

// RoundTrip estimates the store's round trip as this node sees it: the shortest
// time to first byte of its last 16 reads (0 before the first). A read's first
// byte comes a round trip and the store's own time after the request (two round
// trips on a new connection), before the transfer, so that a slow link does not
// pass for a far store.
func (f *Fetcher) RoundTrip() time.Duration {
	f.rtMu.Lock()
	defer f.rtMu.Unlock()
	n := min(f.nRead, roundTripReads)
	if n == 0 {
		return 0
	}
	return slices.Min(f.recent[:n])
}

func (f *Fetcher) noteRead(took time.Duration) {
	f.rtMu.Lock()
	defer f.rtMu.Unlock()
	f.recent[f.nRead%roundTripReads] = took
	f.nRead++
}

// firstByte is a store whose reads note their time to first byte (RoundTrip).
type firstByte struct {
	store.Store
	f     *Fetcher
	start time.Time
}

func (s firstByte) Get(ctx context.Context, d digest.Digest) (io.ReadCloser, error) {
	rc, err := s.Store.Get(ctx, d)
	if err != nil {
		return nil, err
	}
	if m, ok := rc.(*store.InMemory); ok { // read whole already: kept as it is, for ReadAllSized
		s.f.noteRead(time.Since(s.start))
		return m, nil
	}
	return &firstByteReader{ReadCloser: rc, s: s}, nil
}

type firstByteReader struct {
	io.ReadCloser
	s     firstByte
	noted bool
}

func (r *firstByteReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	if n > 0 && !r.noted {
		r.noted = true
		r.s.f.noteRead(time.Since(r.s.start))
	}
	return n, err
}

// observe tells Options.Observe of a request begun at start.
func (f *Fetcher) observe(op string, start time.Time, bytes int64, err error) {
	if f.opts.Observe != nil {
		f.opts.Observe(op, time.Since(start), bytes, err)
	}
}

func (f *Fetcher) attempt(ctx context.Context, c blockmap.Chunk) ([]byte, error) {
	start := time.Now()
	data, err := store.ReadAllSized(ctx, firstByte{Store: f.st, f: f, start: start}, c.Digest, c.Size)
	f.observe("get", start, int64(len(data)), err)
	if f.log.Enabled(ctx, slog.LevelDebug) { // a chunk's every fetch: no arguments built for a line not written
		f.log.Debug("store-read", "object", c.Digest, "bytes", len(data), "took", time.Since(start), "err", err)
	}
	if err != nil {
		return nil, err
	}
	if c.Size >= 0 && int64(len(data)) != c.Size {
		return nil, fmt.Errorf("chunk %s has %d bytes, the map says %d: object %w", c.Digest, len(data), c.Size, errdefs.ErrCorrupt)
	}
	return data, nil
}
