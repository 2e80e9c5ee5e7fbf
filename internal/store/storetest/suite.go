package storetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/store"
)

// Harness adapts a backend to the suite.
type Harness struct {
	// New returns a fresh, empty store. Cleanup is the harness's job (t.Cleanup).
	New func(t *testing.T) store.Store
	// Corrupt, if set, flips bytes of the stored object d behind the store's back,
	// keeping its size. The suite then checks that reads report errdefs.ErrCorrupt.
	Corrupt func(t *testing.T, s store.Store, d digest.Digest)
}

// Run runs the whole suite.
func Run(t *testing.T, h Harness) {
	tests := []struct {
		name string
		fn   func(*testing.T, Harness)
	}{
		{"PutGet", testPutGet},
		{"PutIdempotent", testPutIdempotent},
		{"PutWrongContent", testPutWrongContent},
		{"PutWrongSize", testPutWrongSize},
		{"InvalidDigest", testInvalidDigest},
		{"NotFound", testNotFound},
		{"GetRange", testGetRange},
		{"Stat", testStat},
		{"ListDelete", testListDelete},
		{"EmptyObject", testEmptyObject},
		{"ConcurrentPutSame", testConcurrentPutSame},
		{"CancelledContext", testCancelled},
		{"Corruption", testCorruption},
		{"Compressible", testCompressible},
		{"BatchGet", testBatchGet},
		{"ModTime", testModTime},
		{"Refs", testRefs},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, h) })
	}
}

func randBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func put(t *testing.T, s store.Store, b []byte) digest.Digest {
	t.Helper()
	d, err := store.PutBytes(context.Background(), s, b)
	if err != nil {
		t.Fatalf("put %d bytes: %v", len(b), err)
	}
	return d
}

func testPutGet(t *testing.T, h Harness) {
	s := h.New(t)
	ctx := context.Background()
	for _, n := range []int{1, 4096, 1<<20 + 17} {
		b := randBytes(t, n)
		d := put(t, s, b)
		got, err := store.ReadAll(ctx, s, d)
		if err != nil {
			t.Fatalf("get %s: %v", d, err)
		}
		if !bytes.Equal(got, b) {
			t.Fatalf("get %s: %d bytes differ from the %d put", d, len(got), len(b))
		}
	}
}

func testPutIdempotent(t *testing.T, h Harness) {
	s := h.New(t)
	ctx := context.Background()
	b := randBytes(t, 1000)
	d := put(t, s, b)
	// A second Put may skip reading; it must succeed whether or not it reads.
	if err := s.Put(ctx, d, int64(len(b)), bytes.NewReader(b)); err != nil {
		t.Fatalf("second put: %v", err)
	}
	got, err := store.ReadAll(ctx, s, d)
	if err != nil || !bytes.Equal(got, b) {
		t.Fatalf("after second put: %v", err)
	}
	n := 0
	if err := s.List(ctx, func(store.Info) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("list after two puts of one object: %d objects, want 1", n)
	}
}

func testPutWrongContent(t *testing.T, h Harness) {
	s := h.New(t)
	ctx := context.Background()
	b := randBytes(t, 5000)
	d := digest.FromBytes(b)
	other := randBytes(t, 5000)
	err := s.Put(ctx, d, int64(len(other)), bytes.NewReader(other))
	if !errors.Is(err, errdefs.ErrCorrupt) {
		t.Fatalf("put of wrong content: %v, want ErrCorrupt", err)
	}
	if ok, err := store.Exists(ctx, s, d); err != nil || ok {
		t.Fatalf("object exists after rejected put (exists=%v, err=%v)", ok, err)
	}
}

func testPutWrongSize(t *testing.T, h Harness) {
	s := h.New(t)
	ctx := context.Background()
	b := randBytes(t, 5000)
	d := digest.FromBytes(b)
	for _, size := range []int64{4999, 5001} {
		err := s.Put(ctx, d, size, bytes.NewReader(b))
		if !errors.Is(err, errdefs.ErrCorrupt) && !errors.Is(err, errdefs.ErrInvalid) {
			t.Fatalf("put with size %d of a 5000-byte object: %v, want ErrCorrupt", size, err)
		}
		if ok, _ := store.Exists(ctx, s, d); ok {
			t.Fatalf("object exists after put with wrong size %d", size)
		}
	}
}

func testInvalidDigest(t *testing.T, h Harness) {
	s := h.New(t)
	ctx := context.Background()
	for _, d := range []digest.Digest{"", "sha256:abc", "md5:d41d8cd98f00b204e9800998ecf8427e", "sha256:../../../../etc/passwd"} {
		if err := s.Put(ctx, d, 0, bytes.NewReader(nil)); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("put %q: %v, want ErrInvalid", d, err)
		}
		if _, err := s.Get(ctx, d); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("get %q: %v, want ErrInvalid", d, err)
		}
		if _, err := s.Stat(ctx, d); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("stat %q: %v, want ErrInvalid", d, err)
		}
	}
}

func testNotFound(t *testing.T, h Harness) {
	s := h.New(t)
	ctx := context.Background()
	d := digest.FromString("never stored")
	if _, err := s.Get(ctx, d); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("get: %v, want ErrNotFound", err)
	}
	if _, err := s.GetRange(ctx, d, 0, 1); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("get range: %v, want ErrNotFound", err)
	}
	if _, err := s.Stat(ctx, d); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("stat: %v, want ErrNotFound", err)
	}
	if err := s.Delete(ctx, d); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("delete: %v, want ErrNotFound", err)
	}
	if ok, err := store.Exists(ctx, s, d); ok || err != nil {
		t.Errorf("exists: %v, %v; want false, nil", ok, err)
	}
}

func testGetRange(t *testing.T, h Harness) {
	s := h.New(t)
	ctx := context.Background()
	b := randBytes(t, 100000)
	d := put(t, s, b)
	for _, r := range [][2]int64{{0, 1}, {0, 100000}, {99999, 1}, {4096, 8192}, {50000, 0}} {
		got, err := s.GetRange(ctx, d, r[0], r[1])
		if err != nil {
			t.Fatalf("range %v: %v", r, err)
		}
		if !bytes.Equal(got, b[r[0]:r[0]+r[1]]) {
			t.Fatalf("range %v: wrong bytes", r)
		}
	}
	for _, r := range [][2]int64{{-1, 1}, {0, 100001}, {100000, 1}, {5, -1}} {
		if _, err := s.GetRange(ctx, d, r[0], r[1]); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("range %v: %v, want ErrInvalid", r, err)
		}
	}
}

func testStat(t *testing.T, h Harness) {
	s := h.New(t)
	b := randBytes(t, 12345)
	d := put(t, s, b)
	info, err := s.Stat(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	if info.Digest != d || info.Size != 12345 {
		t.Fatalf("stat: %+v, want %s of 12345 bytes", info, d)
	}
}

func testListDelete(t *testing.T, h Harness) {
	s := h.New(t)
	ctx := context.Background()
	want := map[digest.Digest]int64{}
	for i := 0; i < 20; i++ {
		b := randBytes(t, 100+i)
		want[put(t, s, b)] = int64(100 + i)
	}
	got := map[digest.Digest]int64{}
	if err := s.List(ctx, func(i store.Info) error { got[i.Digest] = i.Size; return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("list: %d objects, want %d", len(got), len(want))
	}
	for d, n := range want {
		if got[d] != n {
			t.Fatalf("list: %s has size %d, want %d", d, got[d], n)
		}
	}
	stop := errors.New("stop")
	calls := 0
	if err := s.List(ctx, func(store.Info) error { calls++; return stop }); !errors.Is(err, stop) || calls != 1 {
		t.Fatalf("list with failing callback: err %v after %d calls; want stop after 1", err, calls)
	}
	var victim digest.Digest
	for d := range want {
		victim = d
		break
	}
	if err := s.Delete(ctx, victim); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Stat(ctx, victim); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("stat after delete: %v", err)
	}
	if err := s.Delete(ctx, victim); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("second delete: %v, want ErrNotFound", err)
	}
	n := 0
	s.List(ctx, func(store.Info) error { n++; return nil })
	if n != len(want)-1 {
		t.Fatalf("list after delete: %d, want %d", n, len(want)-1)
	}
}

func testEmptyObject(t *testing.T, h Harness) {
	s := h.New(t)
	d := put(t, s, nil)
	got, err := store.ReadAll(context.Background(), s, d)
	if err != nil || len(got) != 0 {
		t.Fatalf("empty object: %q, %v", got, err)
	}
}

func testConcurrentPutSame(t *testing.T, h Harness) {
	s := h.New(t)
	ctx := context.Background()
	b := randBytes(t, 256<<10)
	d := digest.FromBytes(b)
	var wg sync.WaitGroup
	errs := make(chan error, 16) // 8 puts and up to 8 failed readers
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- s.Put(ctx, d, int64(len(b)), bytes.NewReader(b))
		}()
	}
	// Readers racing the writers see either ErrNotFound or the whole object.
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := store.ReadAll(ctx, s, d)
			if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
				errs <- err
				return
			}
			if err == nil && !bytes.Equal(got, b) {
				errs <- errors.New("reader saw a partial object")
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	got, err := store.ReadAll(ctx, s, d)
	if err != nil || !bytes.Equal(got, b) {
		t.Fatalf("after concurrent puts: %v", err)
	}
}

func testCancelled(t *testing.T, h Harness) {
	s := h.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	b := randBytes(t, 100)
	d := digest.FromBytes(b)
	if err := s.Put(ctx, d, 100, bytes.NewReader(b)); !errors.Is(err, context.Canceled) {
		t.Fatalf("put with cancelled ctx: %v", err)
	}
	if ok, _ := store.Exists(context.Background(), s, d); ok {
		t.Fatal("object stored by a cancelled put")
	}
	d = put(t, s, b)
	rc, err := s.Get(ctx, d)
	if err == nil {
		_, err = io.ReadAll(rc)
		rc.Close()
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("get with cancelled ctx: %v", err)
	}
}

func testCorruption(t *testing.T, h Harness) {
	if h.Corrupt == nil {
		t.Skip("backend cannot corrupt its objects from a test")
	}
	s := h.New(t)
	ctx := context.Background()
	// Random bytes, and bytes a compressing backend keeps compressed.
	for _, b := range [][]byte{randBytes(t, 64<<10), compressible(64 << 10)} {
		d := put(t, s, b)
		h.Corrupt(t, s, d)
		if _, err := store.ReadAll(ctx, s, d); !errors.Is(err, errdefs.ErrCorrupt) {
			t.Fatalf("get of corrupted object of %d bytes: %v, want ErrCorrupt", len(b), err)
		}
		if _, err := s.GetRange(ctx, d, 0, 10); !errors.Is(err, errdefs.ErrCorrupt) {
			t.Fatalf("get range of corrupted object: %v, want ErrCorrupt", err)
		}
	}
}

// compressible is n bytes that compress as file-system data does, different on every
// call (stores of one test server may share content-addressed bytes).
func compressible(n int) []byte {
	var b bytes.Buffer
	seed := make([]byte, 16)
	rand.Read(seed)
	fmt.Fprintf(&b, "%x\n", seed)
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "Package: lib%d\nVersion: 2.36-%d\nDepends: libc6 (>= 2.34)\n\n", i%97, i%13)
	}
	return b.Bytes()[:n]
}

// testCompressible: objects a backend may keep compressed read back, whole and in
// ranges and batches, with their plain sizes in Stat and List, and never claim
// more stored bytes than their size.
func testCompressible(t *testing.T, h Harness) {
	s := h.New(t)
	ctx := context.Background()
	want := map[digest.Digest][]byte{}
	for _, n := range []int{4096, 256 << 10, 1<<20 + 17} {
		b := compressible(n)
		want[put(t, s, b)] = b
	}
	var ds []digest.Digest
	for d, b := range want {
		ds = append(ds, d)
		got, err := store.ReadAll(ctx, s, d)
		if err != nil || !bytes.Equal(got, b) {
			t.Fatalf("get %s: %v", d, err)
		}
		part, err := s.GetRange(ctx, d, 1000, 3000)
		if err != nil || !bytes.Equal(part, b[1000:4000]) {
			t.Fatalf("get range of %s: %v", d, err)
		}
		info, err := s.Stat(ctx, d)
		if err != nil || info.Size != int64(len(b)) || info.StoredBytes() > info.Size || info.StoredBytes() <= 0 {
			t.Fatalf("stat %s: %+v, %v; want size %d", d, info, err, len(b))
		}
	}
	err := s.List(ctx, func(i store.Info) error {
		if b, ok := want[i.Digest]; ok && (i.Size != int64(len(b)) || i.StoredBytes() > i.Size) {
			return fmt.Errorf("list: %+v, want size %d", i, len(b))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if bg, ok := s.(store.BatchGetter); ok {
		n := 0
		err := bg.GetBatch(ctx, ds, func(d digest.Digest, data []byte, err error) {
			if err != nil || !bytes.Equal(data, want[d]) {
				t.Errorf("batch get %s: %v", d, err)
			}
			n++
		})
		if err != nil || n != len(ds) {
			t.Fatalf("batch get: %d of %d objects, %v", n, len(ds), err)
		}
	}
}
