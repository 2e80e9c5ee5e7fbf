package fetch

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/errdefs"
)

// maxCorruptAttempts bounds the attempts at a call whose answers do not match
// their digest: a transfer damaged on the way is worth another try, an object
// damaged in the store stays damaged however often it is read.
const maxCorruptAttempts = 4

// retryable is the one retry policy of every call the node makes to the store
// (chunk and map fetches, uploads, existence checks): what the store cannot have,
// will not take or that the caller stopped (not found, invalid, unsupported, out
// of range, cancelled) is final; an answer that does not match its digest is tried
// again up to maxCorruptAttempts times; everything else (the store unavailable, a
// deadline, an error of no kind) is tried again until MaxWait.
func retryable(err error, corrupt int) bool {
	switch errdefs.KindOf(err) {
	case errdefs.Canceled, errdefs.NotFound, errdefs.Invalid, errdefs.Unsupported, errdefs.OutOfRange, errdefs.Exists:
		return false
	case errdefs.Corrupt:
		return corrupt < maxCorruptAttempts
	}
	return true
}

// retry runs call, with a deadline of Attempt per attempt and backoff between
// attempts, until it succeeds, fails for good (retryable), or ctx ends. ctx
// carries the caller's bound on the whole wait. Log events are event+"-retry",
// "-recovered" and "-failed", with the object and the operation; a final answer
// that is not a failure to the caller (not found, for an existence check) is not
// logged unless logFinal. When ctx ended
// for its deadline, the error wraps errdefs.ErrUnavailable (the store did not
// answer in time); when the caller cancelled it, it wraps context.Canceled. It
// returns how many attempts it made.
func (f *Fetcher) retry(ctx context.Context, event, op string, d digest.Digest, logFinal bool, call func(ctx context.Context) error) (int, error) {
	delay := f.opts.Backoff
	start := time.Now()
	corrupt := 0
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, f.opts.Attempt)
		err := call(actx)
		cancel()
		if err == nil {
			if attempt > 1 {
				f.log.Info(event+"-recovered", "op", op, "object", d, "attempts", attempt, "waited", time.Since(start))
			}
			return attempt, nil
		}
		if errors.Is(err, errdefs.ErrCorrupt) {
			corrupt++
		}
		if !retryable(err, corrupt) || ctx.Err() != nil {
			if logFinal || ctx.Err() != nil || attempt > 1 {
				f.log.Error(event+"-failed", "op", op, "object", d, "attempts", attempt, "waited", time.Since(start), "err", err)
			}
			switch {
			case errors.Is(ctx.Err(), context.Canceled) && !errors.Is(err, context.Canceled):
				return attempt, fmt.Errorf("%s %s: %w (last error: %v)", op, d, ctx.Err(), err)
			case ctx.Err() != nil && retryable(err, corrupt):
				return attempt, fmt.Errorf("%s %s: gave up after %d attempts in %v: store %w (last error: %v)",
					op, d, attempt, time.Since(start).Round(time.Millisecond), errdefs.ErrUnavailable, err)
			}
			return attempt, fmt.Errorf("%s %s: %w", op, d, err)
		}
		f.log.Warn(event+"-retry", "op", op, "object", d, "attempt", attempt, "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(delay):
		}
		delay = min(2*delay, f.opts.MaxBackoff)
	}
}
