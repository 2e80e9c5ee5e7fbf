package storetest

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/store"
)

// testBatchGet checks store.BatchGetter, for backends that have it: every
// distinct digest reported once, with its verified bytes or the right sentinel.
func testBatchGet(t *testing.T, h Harness) {
	s := h.New(t)
	bg, ok := s.(store.BatchGetter)
	if !ok {
		t.Skip("backend has no batch reads")
	}
	ctx := context.Background()
	want := map[digest.Digest][]byte{}
	var ds []digest.Digest
	for i := 0; i < 20; i++ {
		b := randBytes(t, 1000*(i+1))
		d := put(t, s, b)
		want[d] = b
		ds = append(ds, d)
	}
	empty := put(t, s, nil)
	want[empty] = []byte{}
	absent := digest.FromString("never stored")
	ds = append(ds, empty, absent, ds[0], "sha256:nope")
	got := map[digest.Digest]error{}
	err := bg.GetBatch(ctx, ds, func(d digest.Digest, b []byte, err error) {
		if _, dup := got[d]; dup {
			t.Errorf("%s reported twice", d)
		}
		got[d] = err
		if err == nil && !bytes.Equal(b, want[d]) {
			t.Errorf("%s: %d bytes differ from the %d put", d, len(b), len(want[d]))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	for d := range want {
		if err, ok := got[d]; !ok || err != nil {
			t.Errorf("%s: reported %v (%v)", d, ok, err)
		}
	}
	if !errors.Is(got[absent], errdefs.ErrNotFound) {
		t.Errorf("absent object: %v, want ErrNotFound", got[absent])
	}
	if !errors.Is(got["sha256:nope"], errdefs.ErrInvalid) {
		t.Errorf("invalid digest: %v, want ErrInvalid", got["sha256:nope"])
	}
	if h.Corrupt == nil {
		return
	}
	h.Corrupt(t, s, ds[5])
	bad := 0
	bg.GetBatch(ctx, ds[:10], func(d digest.Digest, b []byte, err error) {
		switch {
		case d == ds[5] && errors.Is(err, errdefs.ErrCorrupt):
			bad++
		case err != nil:
			t.Errorf("%s: %v", d, err)
		case !bytes.Equal(b, want[d]):
			t.Errorf("%s: wrong bytes served", d)
		}
	})
	if bad != 1 {
		t.Errorf("the corrupted object was not reported as corrupt")
	}
}
