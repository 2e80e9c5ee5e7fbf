package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/store"
)

// testModTime: a modification time, when the backend reports one, is when the
// object was first stored, and a second Put does not make it younger.
func testModTime(t *testing.T, h Harness) {
	s := h.New(t)
	ctx := context.Background()
	before := time.Now().Add(-time.Minute) // clocks of a remote backend may differ a little
	d := put(t, s, randBytes(t, 100))
	after := time.Now().Add(time.Minute)
	info, err := s.Stat(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	if info.ModTime.IsZero() {
		t.Skip("backend does not report modification times")
	}
	if info.ModTime.Before(before) || info.ModTime.After(after) {
		t.Fatalf("stat: modification time %v, want within a minute of now", info.ModTime)
	}
	var listed time.Time
	s.List(ctx, func(i store.Info) error {
		if i.Digest == d {
			listed = i.ModTime
		}
		return nil
	})
	if !listed.Equal(info.ModTime) {
		t.Fatalf("list: modification time %v, stat says %v", listed, info.ModTime)
	}
}

func testRefs(t *testing.T, h Harness) {
	s := h.New(t)
	r, ok := s.(store.Refs)
	if !ok {
		t.Skip("backend keeps no records")
	}
	ctx := context.Background()
	if _, err := r.GetRef(ctx, "leases/a"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("get of a missing record: %v, want ErrNotFound", err)
	}
	if err := r.DeleteRef(ctx, "leases/a"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("delete of a missing record: %v, want ErrNotFound", err)
	}
	for _, name := range []string{"", "/abs", "a//b", "../x", "a/../b", ".hidden", "UPPER", "a b", "a/"} {
		if err := r.PutRef(ctx, name, []byte("x")); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("put record %q: %v, want ErrInvalid", name, err)
		}
		if _, err := r.GetRef(ctx, name); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("get record %q: %v, want ErrInvalid", name, err)
		}
	}
	if err := r.PutRef(ctx, "big", make([]byte, store.MaxRefSize+1)); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("put of a record over the bound: %v, want ErrInvalid", err)
	}
	want := map[string][]byte{"leases/a": []byte("one"), "leases/b": randBytes(t, 300<<10), "gc/state": []byte("{}"), "empty": nil}
	for name, b := range want {
		if err := r.PutRef(ctx, name, b); err != nil {
			t.Fatalf("put record %s: %v", name, err)
		}
	}
	// Replacing is atomic and immediately visible.
	want["leases/a"] = []byte("two")
	if err := r.PutRef(ctx, "leases/a", want["leases/a"]); err != nil {
		t.Fatal(err)
	}
	for name, b := range want {
		got, err := r.GetRef(ctx, name)
		if err != nil || !bytes.Equal(got, b) {
			t.Fatalf("get record %s: %d bytes, %v", name, len(got), err)
		}
	}
	list := func(prefix string) []string {
		var names []string
		if err := r.ListRefs(ctx, prefix, func(n string) error { names = append(names, n); return nil }); err != nil {
			t.Fatal(err)
		}
		sort.Strings(names)
		return names
	}
	if got := fmt.Sprint(list("leases/")); got != "[leases/a leases/b]" {
		t.Fatalf("list leases/: %s", got)
	}
	if got := fmt.Sprint(list("")); got != "[empty gc/state leases/a leases/b]" {
		t.Fatalf("list all: %s", got)
	}
	stop := errors.New("stop")
	if err := r.ListRefs(ctx, "", func(string) error { return stop }); !errors.Is(err, stop) {
		t.Fatalf("list with a failing callback: %v", err)
	}
	// Records are not objects.
	n := 0
	s.List(ctx, func(store.Info) error { n++; return nil })
	if n != 0 {
		t.Fatalf("records listed as %d objects", n)
	}
	// Concurrent replacements leave one whole record.
	var wg sync.WaitGroup
	vals := [][]byte{bytes.Repeat([]byte("a"), 100<<10), bytes.Repeat([]byte("b"), 100<<10)}
	for i := range 8 {
		wg.Add(2)
		go func() { defer wg.Done(); r.PutRef(ctx, "race", vals[i%2]) }()
		go func() {
			defer wg.Done()
			got, err := r.GetRef(ctx, "race")
			if err == nil && !bytes.Equal(got, vals[0]) && !bytes.Equal(got, vals[1]) {
				t.Errorf("a reader saw a mixed record")
			}
		}()
	}
	wg.Wait()
	if got, err := r.GetRef(ctx, "race"); err != nil || (!bytes.Equal(got, vals[0]) && !bytes.Equal(got, vals[1])) {
		t.Fatalf("after concurrent puts: %v", err)
	}
	if err := r.DeleteRef(ctx, "leases/a"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.GetRef(ctx, "leases/a"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
	if got := fmt.Sprint(list("leases/")); got != "[leases/b]" {
		t.Fatalf("list after delete: %s", got)
	}
}
