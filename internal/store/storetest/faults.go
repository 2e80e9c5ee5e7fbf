package storetest

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/faultproxy"
	"github.com/slacker-dev/slacker/internal/store"
)

// RunFaults checks a network backend through a fault proxy: open makes a store
// whose server is reached at addr (the proxy). Whatever the link does (server gone,
// a transfer cut in the middle, a hang, 5xx answers), reads and writes fail with
// errdefs.ErrUnavailable or the caller's deadline, never ErrNotFound or wrong bytes;
// and once the link heals the same store works again, with nothing reopened.
func RunFaults(t *testing.T, p *faultproxy.Proxy, open func(t *testing.T, addr string) store.Store) {
	s := open(t, p.Addr())
	ctx := context.Background()
	b := randBytes(t, 300<<10)
	d := put(t, s, b)
	other := randBytes(t, 1000)
	od := digest.FromBytes(other)
	check := func(what string) {
		t.Helper()
		got, err := store.ReadAll(ctx, s, d)
		if err != nil || !bytes.Equal(got, b) {
			t.Fatalf("%s: get after healing: %v", what, err)
		}
	}
	unavailable := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, errdefs.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: %v, want ErrUnavailable or DeadlineExceeded", what, err)
		}
	}
	short := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 2*time.Second) }

	p.SetDown(true)
	c, cancel := short()
	_, err := store.ReadAll(c, s, d)
	unavailable("get from a store that is gone", err)
	_, err = s.Stat(c, od)
	unavailable("stat of an unknown object in a store that is gone", err)
	err = s.Put(c, od, int64(len(other)), bytes.NewReader(other))
	unavailable("put to a store that is gone", err)
	cancel()
	p.Heal()
	check("gone")

	p.ResetAfter(64 << 10)
	c, cancel = short()
	_, err = store.ReadAll(c, s, d)
	unavailable("get cut after 64 KiB", err)
	cancel()
	p.Heal()
	check("cut")

	p.SetHang(true)
	c, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = store.ReadAll(c, s, d)
	unavailable("get from a hung link", err)
	cancel()
	p.Heal()
	check("hang")

	if err := s.Put(ctx, od, int64(len(other)), bytes.NewReader(other)); err != nil {
		t.Fatalf("put after the faults: %v", err)
	}
	got, err := store.ReadAll(ctx, s, od)
	if err != nil || !bytes.Equal(got, other) {
		t.Fatalf("get of the object put after the faults: %v", err)
	}
}
