package fetch

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/blockmap"
	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/store"
)

// FetchMany fetches whole chunks, each verified against its digest and size, and
// calls fn once for each distinct chunk (in any order, never concurrently). Where
// the store reads several objects per request (store.BatchGetter: the registry
// backend reads neighbours of one pack with one ranged request) the chunks go in
// one batch, within one attempt deadline and one slot of the parallelism bound;
// every chunk the batch did not deliver is then fetched alone, with Fetch's
// retries and bounds. Without that ability the chunks are fetched in parallel.
func (f *Fetcher) FetchMany(ctx context.Context, cs []blockmap.Chunk, fn func(c blockmap.Chunk, data []byte, err error)) {
	var mu sync.Mutex
	report := func(c blockmap.Chunk, data []byte, err error) {
		mu.Lock()
		defer mu.Unlock()
		fn(c, data, err)
	}
	byDigest := map[digest.Digest]blockmap.Chunk{}
	var ds []digest.Digest
	for _, c := range cs {
		if _, dup := byDigest[c.Digest]; !dup {
			byDigest[c.Digest] = c
			ds = append(ds, c.Digest)
		}
	}
	rest := ds
	if bg, ok := f.st.(store.BatchGetter); ok && len(ds) > 1 {
		rest = f.batch(ctx, bg, ds, byDigest, report)
	}
	var wg sync.WaitGroup
	for _, d := range rest {
		c := byDigest[d]
		wg.Add(1)
		go func() {
			defer wg.Done()
			data, err := f.Fetch(ctx, c)
			report(c, data, err)
		}()
	}
	wg.Wait()
}

// batch makes one GetBatch attempt and returns the digests it did not deliver.
func (f *Fetcher) batch(ctx context.Context, bg store.BatchGetter, ds []digest.Digest, byDigest map[digest.Digest]blockmap.Chunk,
	report func(blockmap.Chunk, []byte, error)) []digest.Digest {
	select {
	case f.sem <- struct{}{}:
	case <-ctx.Done():
		return ds
	}
	defer func() { <-f.sem }()
	actx, cancel := context.WithTimeout(ctx, f.opts.Attempt)
	defer cancel()
	f.requests.Add(1)
	f.batches.Add(1)
	done := map[digest.Digest]bool{}
	start := time.Now()
	var delivered int64
	var failed error
	defer func() {
		if len(done) > 0 {
			failed = nil // the request answered; what it left is fetched again alone
		}
		f.observe("get-batch", start, delivered, failed)
		if f.log.Enabled(ctx, slog.LevelDebug) {
			f.log.Debug("store-read-batch", "objects", len(ds), "delivered", len(done), "bytes", delivered, "took", time.Since(start), "err", failed)
		}
	}()
	bg.GetBatch(actx, ds, func(d digest.Digest, data []byte, err error) {
		c, ok := byDigest[d]
		if err != nil && failed == nil {
			failed = err
		}
		if !ok || done[d] || err != nil {
			return // fetched again alone, with retries (or not ours)
		}
		if c.Size >= 0 && int64(len(data)) != c.Size {
			f.log.Warn("chunk-fetch-retry", "chunk", d, "attempt", 1,
				"err", fmt.Errorf("chunk %s has %d bytes, the map says %d: object %w", d, len(data), c.Size, errdefs.ErrCorrupt))
			return
		}
		done[d] = true
		delivered += int64(len(data))
		f.fetched.Add(int64(len(data)))
		report(c, data, nil)
	})
	var rest []digest.Digest
	for _, d := range ds {
		if !done[d] {
			rest = append(rest, d)
		}
	}
	return rest
}

// Batches is how many batch reads FetchMany made (each also counts as a request).
func (f *Fetcher) Batches() int64 { return f.batches.Load() }

// BatchReads reports whether the store reads several objects per request, so that
// FetchMany saves requests over one Fetch per chunk.
func (f *Fetcher) BatchReads() bool {
	_, ok := f.st.(store.BatchGetter)
	return ok
}
