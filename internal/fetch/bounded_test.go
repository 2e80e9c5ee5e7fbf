package fetch

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/store"
	"github.com/slacker-dev/slacker/internal/store/faultstore"
	"github.com/slacker-dev/slacker/internal/store/local"
)

func TestBoundedCalls(t *testing.T) {
	data := bytes.Repeat([]byte("upload"), 1000)
	d := digest.FromBytes(data)
	tests := []struct {
		name     string
		fault    faultstore.Fault
		reader   func() io.Reader
		want     error
		attempts int64 // Put calls that reached the store
	}{
		{name: "no fault", want: nil, attempts: 1},
		{name: "two transient failures", fault: faultstore.Fault{Ops: faultstore.OpPut, Err: errdefs.ErrUnavailable, Times: 2}, attempts: 3},
		{name: "cut twice, then through", fault: faultstore.Fault{Ops: faultstore.OpPut, Cut: true, Times: 2}, attempts: 3},
		{name: "store gone", fault: faultstore.Fault{Ops: faultstore.OpPut, Err: errdefs.ErrUnavailable}, want: errdefs.ErrUnavailable},
		{name: "store hangs", fault: faultstore.Fault{Ops: faultstore.OpPut, Hang: true}, want: errdefs.ErrUnavailable},
		// The one retry policy (retry.go): a transfer damaged on the way is tried
		// again, a few times, then reported as it is.
		{name: "content refused is tried a few times", fault: faultstore.Fault{Ops: faultstore.OpPut, Err: errdefs.ErrCorrupt}, want: errdefs.ErrCorrupt, attempts: maxCorruptAttempts},
		{name: "one-pass reader gets one attempt", fault: faultstore.Fault{Ops: faultstore.OpPut, Err: errdefs.ErrUnavailable, Times: 1},
			reader: func() io.Reader { return io.MultiReader(bytes.NewReader(data)) }, want: errdefs.ErrUnavailable, attempts: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			inner, err := local.Open(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			fs := faultstore.New(inner)
			fs.Inject(tc.fault)
			f := New(fs, Options{Attempt: 50 * time.Millisecond, MaxWait: 300 * time.Millisecond, Backoff: time.Millisecond})
			r := io.Reader(bytes.NewReader(data))
			if tc.reader != nil {
				r = tc.reader()
			}
			err = f.Bounded().Put(context.Background(), d, int64(len(data)), r)
			if !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
				t.Fatalf("put: %v, want %v", err, tc.want)
			}
			if tc.attempts > 0 && fs.Calls(faultstore.OpPut) != tc.attempts {
				t.Fatalf("%d attempts, want %d", fs.Calls(faultstore.OpPut), tc.attempts)
			}
			ok, _ := store.Exists(context.Background(), inner, d)
			if ok != (tc.want == nil) {
				t.Fatalf("stored: %v", ok)
			}
			_, err = f.Bounded().Stat(context.Background(), d)
			if tc.want == nil && err != nil {
				t.Fatalf("stat: %v", err)
			}
		})
	}
}

func TestBoundedStatWaitsOutAnOutage(t *testing.T) {
	inner, err := local.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	d, _ := store.PutBytes(context.Background(), inner, []byte("x"))
	fs := faultstore.New(inner)
	remove := fs.Inject(faultstore.Fault{Ops: faultstore.OpStat, Err: errdefs.ErrUnavailable})
	f := New(fs, Options{Attempt: 50 * time.Millisecond, MaxWait: time.Minute, Backoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond})
	go func() {
		for fs.Calls(faultstore.OpStat) < 5 {
			time.Sleep(time.Millisecond)
		}
		remove()
	}()
	if _, err := f.Bounded().Stat(context.Background(), d); err != nil {
		t.Fatalf("stat across an outage: %v", err)
	}
	if _, err := f.Bounded().Stat(context.Background(), digest.FromString("absent")); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("stat of a missing object: %v", err)
	}
}
