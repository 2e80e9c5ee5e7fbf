package faultstore

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/store"
	"github.com/slacker-dev/slacker/internal/store/local"
	"github.com/slacker-dev/slacker/internal/store/storetest"
)

func newLocal(t *testing.T) *local.Store {
	t.Helper()
	s, err := local.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A faultstore without faults is a conforming store.
func TestSuiteWithoutFaults(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) store.Store { return New(newLocal(t)) },
		Corrupt: func(t *testing.T, s store.Store, d digest.Digest) {
			p := s.(*Store).Inner().(*local.Store).Path(d)
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			b[0] ^= 1
			if err := os.WriteFile(p, b, 0o600); err != nil {
				t.Fatal(err)
			}
		},
	})
}

func TestFaults(t *testing.T) {
	ctx := context.Background()
	data := bytes.Repeat([]byte("0123456789abcdef"), 4096)
	other := []byte("another object")
	tests := []struct {
		name  string
		fault Fault
		// what Get of data and of other must fail with (nil: succeed)
		wantData, wantOther error
		wantPut             error // Put of a new object
	}{
		{name: "no fault"},
		{name: "store gone", fault: Fault{Err: errdefs.ErrUnavailable},
			wantData: errdefs.ErrUnavailable, wantOther: errdefs.ErrUnavailable, wantPut: errdefs.ErrUnavailable},
		{name: "one object missing", fault: Fault{Ops: Reads, Match: Only(digest.FromBytes(data)), Err: errdefs.ErrNotFound},
			wantData: errdefs.ErrNotFound},
		{name: "transfer cut", fault: Fault{Ops: OpGet | OpPut, Cut: true},
			wantData: errdefs.ErrUnavailable, wantOther: errdefs.ErrUnavailable, wantPut: errdefs.ErrUnavailable},
		{name: "corrupt reads", fault: Fault{Ops: OpGet, Corrupt: true},
			wantData: errdefs.ErrCorrupt, wantOther: errdefs.ErrCorrupt},
		{name: "writes fail, reads work", fault: Fault{Ops: OpPut, Err: errdefs.ErrUnavailable},
			wantPut: errdefs.ErrUnavailable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			inner := newLocal(t)
			dd, _ := store.PutBytes(ctx, inner, data)
			od, _ := store.PutBytes(ctx, inner, other)
			s := New(inner)
			s.Inject(tc.fault)
			for _, c := range []struct {
				d    digest.Digest
				want error
				b    []byte
			}{{dd, tc.wantData, data}, {od, tc.wantOther, other}} {
				got, err := store.ReadAll(ctx, s, c.d)
				if !errors.Is(err, c.want) || (c.want == nil && !bytes.Equal(got, c.b)) {
					t.Errorf("get %s: %d bytes, %v; want %v", c.d, len(got), err, c.want)
				}
			}
			_, err := store.PutBytes(ctx, s, []byte("new object"))
			if !errors.Is(err, tc.wantPut) {
				t.Errorf("put: %v; want %v", err, tc.wantPut)
			}
			// A fault never changes what the inner store holds.
			if ok, _ := store.Exists(ctx, inner, digest.FromString("new object")); ok != (tc.wantPut == nil) {
				t.Errorf("inner store has the new object: %v", ok)
			}
			for _, c := range []struct {
				d digest.Digest
				b []byte
			}{{dd, data}, {od, other}} {
				if got, err := store.ReadAll(ctx, inner, c.d); err != nil || !bytes.Equal(got, c.b) {
					t.Errorf("inner store lost %s: %v", c.d, err)
				}
			}
		})
	}
}

func TestTimesAndSkip(t *testing.T) {
	ctx := context.Background()
	inner := newLocal(t)
	d, _ := store.PutBytes(ctx, inner, []byte("x"))
	s := New(inner)
	s.Inject(Fault{Ops: OpStat, Skip: 1, Times: 2, Err: errdefs.ErrUnavailable})
	var got []bool
	for range 5 {
		_, err := s.Stat(ctx, d)
		got = append(got, err == nil)
	}
	want := []bool{true, false, false, true, true}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("stat outcomes %v, want %v", got, want)
		}
	}
	if s.Calls(OpStat) != 5 || s.Injected() != 2 {
		t.Fatalf("calls %d injected %d", s.Calls(OpStat), s.Injected())
	}
}

func TestHangUntilContextOrRemoval(t *testing.T) {
	ctx := context.Background()
	inner := newLocal(t)
	d, _ := store.PutBytes(ctx, inner, []byte("x"))
	s := New(inner)
	remove := s.Inject(Fault{Ops: Reads, Hang: true})

	// A hung call ends with its context.
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := s.Stat(cctx, d); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("hung stat: %v", err)
	}
	// A hung call goes ahead when the fault is removed, even if other faults
	// come and go meanwhile.
	done := make(chan error, 1)
	go func() {
		_, err := store.ReadAll(ctx, s, d)
		done <- err
	}()
	for s.Calls(OpGet) == 0 {
		time.Sleep(time.Millisecond)
	}
	s.Inject(Fault{Ops: OpDelete, Err: errdefs.ErrUnavailable})()
	select {
	case err := <-done:
		t.Fatalf("hung get returned early: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	remove()
	if err := <-done; err != nil {
		t.Fatalf("get after the hang was lifted: %v", err)
	}
}

func TestDelay(t *testing.T) {
	ctx := context.Background()
	inner := newLocal(t)
	d, _ := store.PutBytes(ctx, inner, []byte("x"))
	s := New(inner)
	s.Inject(Fault{Ops: OpGet, Delay: time.Hour})
	cctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if _, err := s.Get(cctx, d); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("delayed get: %v", err)
	}
	s.Set(Fault{Ops: OpGet, Delay: time.Millisecond})
	rc, err := s.Get(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(rc); err != nil || string(b) != "x" {
		t.Fatalf("%q %v", b, err)
	}
	rc.Close()
}
