package fetch

import (
	"context"
	"fmt"
	"io"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/store"
)

// Bounded returns the fetcher's store with the fetcher's bounds on every call that
// writes or checks an object (Put, Stat): a deadline per attempt, retries of
// transient failures with backoff, and a bound on the total wait, after which the
// call fails with an error wrapping errdefs.ErrUnavailable. A snapshot uploads
// through it, so that a store that hangs cannot hold a frozen filesystem forever.
// Put is retried only when its reader can seek back to the start. Other calls go
// to the store as they are.
func (f *Fetcher) Bounded() store.Store { return bounded{Store: f.st, f: f} }

type bounded struct {
	store.Store
	f *Fetcher
}

// do runs call with the one retry policy (retryable) within MaxWait.
func (b bounded) do(ctx context.Context, what string, d digest.Digest, call func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, b.f.opts.MaxWait)
	defer cancel()
	_, err := b.f.retry(ctx, "store-call", what, d, false, call)
	return err
}

func (b bounded) Stat(ctx context.Context, d digest.Digest) (store.Info, error) {
	var info store.Info
	err := b.do(ctx, "stat", d, func(ctx context.Context) error {
		var err error
		info, err = b.Store.Stat(ctx, d)
		return err
	})
	return info, err
}

func (b bounded) Put(ctx context.Context, d digest.Digest, size int64, r io.Reader) error {
	seeker, ok := r.(io.Seeker)
	if !ok { // one pass only: one attempt, bounded
		ctx, cancel := context.WithTimeout(ctx, b.f.opts.MaxWait)
		defer cancel()
		return b.Store.Put(ctx, d, size, r)
	}
	first := true
	return b.do(ctx, "put", d, func(ctx context.Context) error {
		if !first {
			if _, err := seeker.Seek(0, io.SeekStart); err != nil {
				return fmt.Errorf("put %s: rewind: %w: %v", d, errdefs.ErrInvalid, err)
			}
		}
		first = false
		return b.Store.Put(ctx, d, size, r)
	})
}
