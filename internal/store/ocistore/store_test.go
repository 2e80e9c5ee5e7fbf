package ocistore

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/faultproxy"
	"github.com/slacker-dev/slacker/internal/store"
	"github.com/slacker-dev/slacker/internal/store/storetest"
	"github.com/slacker-dev/slacker/internal/store/transport"
	"github.com/slacker-dev/slacker/internal/testenv/services"
	"github.com/slacker-dev/slacker/internal/testutil"
)

// One registry for the package's tests; each store gets its own repository.
var (
	reg     *services.Registry
	regErr  error
	regOnce sync.Once
	regDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if reg != nil {
		reg.Stop()
	}
	if regDir != "" {
		os.RemoveAll(regDir)
	}
	os.Exit(code)
}

func registry(t testing.TB) *services.Registry {
	t.Helper()
	testutil.RequireTool(t, "docker-registry")
	regOnce.Do(func() {
		if regDir, regErr = os.MkdirTemp("", "slacker-ocistore-test-"); regErr != nil {
			return
		}
		reg, regErr = services.StartRegistry(context.Background(), services.RegistryOptions{Dir: regDir})
	})
	if regErr != nil {
		t.Fatalf("registry: %v", regErr)
	}
	return reg
}

func repoName(t testing.TB) string {
	b := make([]byte, 6)
	rand.Read(b)
	n := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(n) > 40 {
		n = n[:40]
	}
	return "test/" + strings.Trim(n, "-") + "-" + hex.EncodeToString(b)
}

// newStore opens a store on a fresh repository (modify sets options).
func newStore(t testing.TB, modify func(*Options)) *Store {
	t.Helper()
	o := Options{Repository: registry(t).Addr + "/" + repoName(t)}
	if modify != nil {
		modify(&o)
	}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// registryFile is a path in the test registry's storage (the filesystem
// driver's layout, under data/docker/registry/v2).
func registryFile(parts ...string) string {
	return filepath.Join(append([]string{reg.Dir, "data", "docker", "registry", "v2"}, parts...)...)
}

// reopen opens a second store on the same repository, as another node would.
func reopen(t testing.TB, s *Store, modify func(*Options)) *Store {
	t.Helper()
	o := s.o
	o.Transport, o.Keychain = nil, nil
	if modify != nil {
		modify(&o)
	}
	s2, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return s2
}

// corrupt flips a byte of object d inside its pack blob, in the registry's files.
func corrupt(t *testing.T, s *Store, d digest.Digest) {
	l, ok := s.lookup(d)
	if !ok {
		t.Fatalf("corrupt: %s is not in the index", d)
	}
	p := registryFile("blobs", "sha256", l.blob.Encoded()[:2], l.blob.Encoded(), "data")
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	at := l.off + l.stored/2
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, at); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x40
	if _, err := f.WriteAt(b, at); err != nil {
		t.Fatal(err)
	}
}

func TestSuite(t *testing.T) {
	for _, tc := range []struct {
		name   string
		modify func(*Options)
	}{
		{"default", nil},
		{"compressed", func(o *Options) { o.Compress = true }},
		// Tiny packs and a low solo bound: every path of group commit is taken,
		// with objects kept compressed where that pays.
		{"smallpacks", func(o *Options) { o.PackSize, o.SoloSize, o.Compress = 8<<10, 64<<10, true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			storetest.Run(t, storetest.Harness{
				New:     func(t *testing.T) store.Store { return newStore(t, tc.modify) },
				Corrupt: func(t *testing.T, s store.Store, d digest.Digest) { corrupt(t, s.(*Store), d) },
			})
		})
	}
}

func randBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// putMany puts n random objects of size bytes concurrently and returns them.
func putMany(t *testing.T, s *Store, n, size int) map[digest.Digest][]byte {
	t.Helper()
	objs := map[digest.Digest][]byte{}
	for i := 0; i < n; i++ {
		b := randBytes(size)
		objs[digest.FromBytes(b)] = b
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for d, b := range objs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- s.Put(t.Context(), d, int64(len(b)), bytes.NewReader(b))
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return objs
}

func packTags(t *testing.T, s *Store) []string {
	t.Helper()
	tags, err := s.c.tags(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var packs []string
	for _, tag := range tags {
		if tagRE.MatchString(tag) {
			packs = append(packs, tag)
		}
	}
	return packs
}

// Concurrent Puts of small objects share packs; each object stays readable, from
// this node and from another that only knows the registry.
func TestGroupCommitPacks(t *testing.T) {
	s := newStore(t, nil)
	objs := putMany(t, s, 64, 16<<10)
	packs := packTags(t, s)
	t.Logf("64 objects in %d packs", len(packs))
	if len(packs) == 0 || len(packs) >= 64 {
		t.Fatalf("64 concurrent puts made %d packs; want fewer packs than objects", len(packs))
	}
	other := reopen(t, s, nil)
	for d, b := range objs {
		for _, st := range []*Store{s, other} {
			got, err := store.ReadAll(t.Context(), st, d)
			if err != nil || !bytes.Equal(got, b) {
				t.Fatalf("read %s: %v", d, err)
			}
		}
	}
	n := 0
	if err := other.List(t.Context(), func(store.Info) error { n++; return nil }); err != nil || n != 64 {
		t.Fatalf("list on another node: %d objects (%v), want 64", n, err)
	}
}

// A Put that returned on one node is visible at once on another node whose
// index is older.
func TestVisibleAcrossNodes(t *testing.T) {
	a := newStore(t, nil)
	b := reopen(t, a, nil)
	if err := b.List(t.Context(), func(store.Info) error { return nil }); err != nil {
		t.Fatal(err) // b has an index now, empty
	}
	for i := 0; i < 5; i++ {
		data := randBytes(1000 + i)
		d, err := store.PutBytes(t.Context(), a, data)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Stat(t.Context(), d); err != nil {
			t.Fatalf("stat on node b right after the put on a: %v", err)
		}
		got, err := store.ReadAll(t.Context(), b, d)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("get on node b: %v", err)
		}
	}
}

// Deleting one object of a pack keeps its neighbours, on every node, and the
// node that still holds the old pack in its index finds them in the new one.
func TestDeleteRepacks(t *testing.T) {
	a := newStore(t, func(o *Options) { o.MaxAge = time.Millisecond })
	objs := putMany(t, a, 12, 4<<10)
	b := reopen(t, a, nil)
	var victim digest.Digest
	for d := range objs {
		victim = d
		break
	}
	// Node b learns the packs, then node a deletes: b's index is stale.
	if _, err := store.ReadAll(t.Context(), b, victim); err != nil {
		t.Fatal(err)
	}
	before := len(packTags(t, a))
	if err := a.Delete(t.Context(), victim); err != nil {
		t.Fatal(err)
	}
	for _, st := range []*Store{a, b} {
		if _, err := store.ReadAll(t.Context(), st, victim); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("get of the deleted object: %v, want ErrNotFound", err)
		}
		for d, want := range objs {
			if d == victim {
				continue
			}
			got, err := store.ReadAll(t.Context(), st, d)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("neighbour %s after the delete: %v", d, err)
			}
		}
	}
	if after := len(packTags(t, a)); after != before {
		t.Logf("packs: %d before, %d after", before, after)
	}
	if err := a.Delete(t.Context(), victim); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	// A node with a stale positive answer sees the delete within MaxAge.
	c := reopen(t, a, func(o *Options) { o.MaxAge = time.Millisecond })
	if _, err := c.Stat(t.Context(), victim); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("stat on a third node: %v", err)
	}
}

// countingTransport counts requests by method and path kind.
type countingTransport struct {
	rt     http.RoundTripper
	ranged atomic.Int64
	all    atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.all.Add(1)
	if r.Header.Get("Range") != "" {
		c.ranged.Add(1)
	}
	return c.rt.RoundTrip(r)
}

// GetBatch reads neighbours of one pack with one ranged request.
func TestGetBatchCoalesces(t *testing.T) {
	s := newStore(t, nil)
	// Sequential puts into one pack: a batch of 32 objects put concurrently while
	// an upload is held back.
	objs := putMany(t, s, 32, 8<<10)
	ct := &countingTransport{rt: transport.New(transport.Options{HTTP2: true})}
	r := reopen(t, s, func(o *Options) { o.Transport = ct })
	var ds []digest.Digest
	for d := range objs {
		ds = append(ds, d)
	}
	ds = append(ds, digest.FromString("absent"), ds[0]) // a missing one, a duplicate
	got := map[digest.Digest][]byte{}
	var missing int
	err := r.GetBatch(t.Context(), ds, func(d digest.Digest, b []byte, err error) {
		if _, dup := got[d]; dup {
			t.Errorf("%s reported twice", d)
		}
		if errors.Is(err, errdefs.ErrNotFound) {
			missing++
			got[d] = nil
			return
		}
		if err != nil {
			t.Errorf("%s: %v", d, err)
		}
		got[d] = b
	})
	if err != nil {
		t.Fatal(err)
	}
	for d, b := range objs {
		if !bytes.Equal(got[d], b) {
			t.Fatalf("%s: wrong bytes", d)
		}
	}
	packs := len(packTags(t, s))
	t.Logf("32 objects in %d packs, read with %d ranged requests (%d requests in all)", packs, ct.ranged.Load(), ct.all.Load())
	if missing != 1 || ct.ranged.Load() > int64(packs) {
		t.Fatalf("%d missing, %d ranged requests for %d packs; want 1 missing and at most one request per pack", missing, ct.ranged.Load(), packs)
	}
	// A corrupt object is reported as such; its neighbours are fine.
	victim := ds[3]
	corrupt(t, r, victim)
	bad := 0
	r.GetBatch(t.Context(), ds[:8], func(d digest.Digest, b []byte, err error) {
		if errors.Is(err, errdefs.ErrCorrupt) {
			bad++
			if d != victim {
				t.Errorf("%s reported corrupt", d)
			}
		} else if err != nil {
			t.Errorf("%s: %v", d, err)
		}
	})
	if bad != 1 {
		t.Fatalf("corrupt objects reported: %d, want 1", bad)
	}
}

// A manifest under a pack tag that lies is ignored, never trusted.
func TestHostilePackManifest(t *testing.T) {
	s := newStore(t, nil)
	good, err := store.PutBytes(t.Context(), s, []byte("good object"))
	if err != nil {
		t.Fatal(err)
	}
	blob := randBytes(100)
	bd := digest.FromBytes(blob)
	if err := s.c.uploadBlob(t.Context(), bd, blob); err != nil {
		t.Fatal(err)
	}
	// Objects that claim more bytes than the blob has.
	lie := digest.FromString("lie")
	m, err := encodeManifest(bd, []entry{rawEntry(lie, 0, 100)}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	m = bytes.Replace(m, []byte(lie.Encoded()+":100"), []byte(lie.Encoded()+":5000"), 1)
	if err := s.c.putManifest(t.Context(), packTag(bd), m); err != nil {
		t.Fatal(err)
	}
	other := reopen(t, s, nil)
	if _, err := other.Stat(t.Context(), lie); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("object of a lying manifest: %v, want ErrNotFound", err)
	}
	if _, err := other.Stat(t.Context(), good); err != nil {
		t.Fatalf("good object next to a lying manifest: %v", err)
	}
}

func TestRegistryGone(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	s, err := New(Options{Repository: addr + "/x/y"})
	if err != nil {
		t.Fatal(err)
	}
	d := digest.FromString("x")
	if _, err := s.Get(t.Context(), d); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("get: %v, want ErrUnavailable", err)
	}
	if err := s.Put(t.Context(), d, 1, strings.NewReader("x")); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("put: %v, want ErrUnavailable", err)
	}
}

// Token auth with credentials from the Docker config: the registry sits behind a
// token service (the fault proxy's) that issues tokens only to the configured
// user, and whose tokens expire after a few requests.
func TestTokenAuthDockerConfig(t *testing.T) {
	r := registry(t)
	p, err := faultproxy.Start(faultproxy.Options{Target: r.Addr, HTTP: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	p.RequireTokens(&faultproxy.TokenAuth{TTL: time.Hour, User: "slacker", Password: "s3cret-pass", Uses: 7})
	writeDockerConfig(t, p.Addr(), "slacker", "s3cret-pass")
	repo := p.Addr() + "/" + repoName(t)
	storetest.Run(t, storetest.Harness{New: func(t *testing.T) store.Store {
		s, err := New(Options{Repository: p.Addr() + "/" + repoName(t)})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}})
	if p.Stats().Tokens < 2 {
		t.Fatalf("%d tokens issued; want the expiring tokens to have been renewed", p.Stats().Tokens)
	}
	// Wrong credentials: access denied, said as such.
	writeDockerConfig(t, p.Addr(), "slacker", "wrong")
	s, err := New(Options{Repository: repo})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Stat(t.Context(), digest.FromString("x"))
	if err == nil || errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), "docker login") {
		t.Fatalf("with wrong credentials: %v; want access denied", err)
	}
}

func writeDockerConfig(t *testing.T, host, user, pass string) {
	dir := t.TempDir()
	auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
	cfg := fmt.Sprintf(`{"auths": {%q: {"auth": %q}}}`, host, auth)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DOCKER_CONFIG", dir)
}

func TestParseLocation(t *testing.T) {
	tests := []struct {
		loc, wantErr string
		want         Options
	}{
		{loc: "registry://127.0.0.1:5000/slacker/chunks", want: Options{Repository: "127.0.0.1:5000/slacker/chunks", Compress: true}},
		{loc: "registry://reg.example.com/a/b?insecure=1&timeout=10s&pack=8MiB&solo=2MiB&compress=none",
			want: Options{Repository: "reg.example.com/a/b", Insecure: true, Timeout: 10 * time.Second, PackSize: 8 << 20, SoloSize: 2 << 20}},
		{loc: "registry://host/r?compress=gzip", wantErr: `compress "gzip"`},
		{loc: "registry://host/", wantErr: "want registry://"},
		{loc: "registry://u:p@host/r", wantErr: "docker login"},
		{loc: "registry://host/r?pack=huge", wantErr: "pack"},
		{loc: "registry://host/r?x=1", wantErr: "unknown parameter"},
	}
	for _, tc := range tests {
		got, err := ParseLocation(tc.loc)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: %v, want error %q", tc.loc, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: %+v, %v; want %+v", tc.loc, got, err, tc.want)
		}
	}
	if _, err := New(Options{Repository: "UPPER/case"}); err == nil {
		t.Error("an invalid repository name was accepted")
	}
}

func indexTags(t *testing.T, s *Store) int {
	tags, err := s.c.tags(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, tag := range tags {
		if indexTagRE.MatchString(tag) {
			n++
		}
	}
	return n
}

// A node with a cold index reads checkpoints, not one manifest per pack; many
// checkpoints are merged; a checkpoint never brings back a deleted pack.
func TestCheckpoints(t *testing.T) {
	a := newStore(t, func(o *Options) { o.CheckpointEvery, o.CheckpointQuiet = 4, time.Hour })
	objs := map[digest.Digest][]byte{}
	for i := 0; i < 40; i++ { // one at a time: one pack each
		b := randBytes(2000 + i)
		d, err := store.PutBytes(t.Context(), a, b)
		if err != nil {
			t.Fatal(err)
		}
		objs[d] = b
	}
	a.Wait()
	if n := indexTags(t, a); n != 10 {
		t.Fatalf("%d checkpoints after 40 packs, want 10", n)
	}
	ct := &countingTransport{rt: transport.New(transport.Options{HTTP2: true})}
	b := reopen(t, a, func(o *Options) { o.Transport = ct })
	n := 0
	if err := b.List(t.Context(), func(store.Info) error { n++; return nil }); err != nil || n != 40 {
		t.Fatalf("list on a cold node: %d objects, %v", n, err)
	}
	t.Logf("cold index of 40 packs in 10 checkpoints: %d requests", ct.all.Load())
	if ct.all.Load() > 30 {
		t.Fatalf("a cold index took %d requests; want about 2 per checkpoint, not one per pack", ct.all.Load())
	}
	// Past maxCheckpoints, that refresh merged them into one.
	b.Wait()
	if n := indexTags(t, a); n != 1 {
		t.Fatalf("%d checkpoints after the merge, want 1", n)
	}
	ct.all.Store(0)
	c := reopen(t, a, func(o *Options) { o.Transport = ct })
	if err := c.List(t.Context(), func(store.Info) error { return nil }); err != nil {
		t.Fatal(err)
	}
	t.Logf("cold index of 40 packs in 1 checkpoint: %d requests", ct.all.Load())
	if ct.all.Load() > 6 {
		t.Fatalf("a cold index from one checkpoint took %d requests", ct.all.Load())
	}
	// Delete an object: its pack goes, the checkpoint that lists it stays.
	var victim digest.Digest
	for d := range objs {
		victim = d
		break
	}
	if err := a.Delete(t.Context(), victim); err != nil {
		t.Fatal(err)
	}
	d := reopen(t, a, nil)
	if _, err := d.Stat(t.Context(), victim); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("a deleted object came back from a checkpoint: %v", err)
	}
	for dg, want := range objs {
		if dg == victim {
			continue
		}
		if got, err := store.ReadAll(t.Context(), d, dg); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s: %v", dg, err)
		}
	}
}

// BenchmarkGet reads 256 KiB chunks, each with its own request, and in batches of
// 16 neighbours (the readahead's largest window).
func BenchmarkGet(b *testing.B) {
	s := newStore(b, nil)
	var ds []digest.Digest
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := 0; i < 64; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := store.PutBytes(context.Background(), s, randBytes(256<<10))
			if err != nil {
				b.Error(err)
			}
			mu.Lock()
			ds = append(ds, d)
			mu.Unlock()
		}()
	}
	wg.Wait()
	r := reopen(b, s, nil)
	if err := r.List(context.Background(), func(store.Info) error { return nil }); err != nil {
		b.Fatal(err)
	}
	b.Run("one", func(b *testing.B) {
		b.SetBytes(256 << 10)
		i := 0
		for b.Loop() {
			if _, err := store.ReadAll(context.Background(), r, ds[i%len(ds)]); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("batch16", func(b *testing.B) {
		b.SetBytes(16 * 256 << 10)
		i := 0
		for b.Loop() {
			batch := make([]digest.Digest, 16)
			for j := range batch {
				batch[j] = ds[(i*16+j)%len(ds)]
			}
			r.GetBatch(context.Background(), batch, func(d digest.Digest, _ []byte, err error) {
				if err != nil {
					b.Fatal(err)
				}
			})
			i++
		}
	})
}

// BenchmarkSnapshotUpload uploads chunks the way a snapshot does (four workers,
// each asking Exists and then Put) into a repository that already holds 1000
// packs, so each miss lists a realistic number of tags.
func BenchmarkSnapshotUpload(b *testing.B) {
	s := newStore(b, func(o *Options) { o.SoloSize = 1 })
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i := 0; i < 1000; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if _, err := store.PutBytes(context.Background(), s, randBytes(100)); err != nil {
				b.Error(err)
			}
		}()
	}
	wg.Wait()
	w := reopen(b, s, nil)
	b.SetBytes(64 * (64 << 10))
	for b.Loop() {
		chunks := make(chan []byte, 64)
		for range 64 {
			chunks <- randBytes(64 << 10)
		}
		close(chunks)
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for c := range chunks {
					d := digest.FromBytes(c)
					if ok, err := store.Exists(context.Background(), w, d); err != nil || ok {
						b.Errorf("exists: %v %v", ok, err)
						return
					}
					if err := w.Put(context.Background(), d, int64(len(c)), bytes.NewReader(c)); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
	}
}

// TestFaults: the store through a fault proxy (registry gone, transfer cut, hang).
func TestFaults(t *testing.T) {
	r := registry(t)
	p, err := faultproxy.Start(faultproxy.Options{Target: r.Addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	storetest.RunFaults(t, p, func(t *testing.T, addr string) store.Store {
		s, err := New(Options{Repository: addr + "/" + repoName(t)})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// A compressing node packs text-like chunks as zstd frames, and random ones as
// they are; every node, compressing or not, reads both back, one by one and in
// batches, and the pack blob holds the compressed bytes.
func TestCompressedPacks(t *testing.T) {
	ctx := t.Context()
	s := newStore(t, func(o *Options) { o.Compress = true })
	text := bytes.Repeat([]byte("Package: libc6\nVersion: 2.36-9\n"), 9000)[:256<<10]
	random := randBytes(256 << 10)
	var ds []digest.Digest
	var wg sync.WaitGroup
	for _, b := range [][]byte{text, random} {
		d := digest.FromBytes(b)
		ds = append(ds, d)
		wg.Add(1)
		go func() { // concurrently, so both join one pack
			defer wg.Done()
			if err := s.Put(ctx, d, int64(len(b)), bytes.NewReader(b)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	ti, err := s.Stat(ctx, ds[0])
	if err != nil || ti.Size != int64(len(text)) || ti.Stored <= 0 || ti.Stored > ti.Size/8 {
		t.Fatalf("text chunk: %+v, %v; want it stored in under an eighth of its size", ti, err)
	}
	ri, err := s.Stat(ctx, ds[1])
	if err != nil || ri.StoredBytes() != ri.Size {
		t.Fatalf("random chunk: %+v, %v; want it stored as it is", ri, err)
	}
	var blobBytes int64
	for _, d := range ds {
		l, _ := s.lookup(d)
		fi, err := os.Stat(registryFile("blobs", "sha256", l.blob.Encoded()[:2], l.blob.Encoded(), "data"))
		if err != nil {
			t.Fatal(err)
		}
		blobBytes += fi.Size()
	}
	if want := ti.Stored + ri.Size; blobBytes != want && blobBytes != 2*want {
		t.Errorf("pack blobs hold %d bytes, want %d (one pack or two)", blobBytes, want)
	}
	for _, other := range []*Store{reopen(t, s, nil), reopen(t, s, func(o *Options) { o.Compress = false })} {
		for i, b := range [][]byte{text, random} {
			got, err := store.ReadAll(ctx, other, ds[i])
			if err != nil || !bytes.Equal(got, b) {
				t.Fatalf("another node reads %s: %v", ds[i], err)
			}
		}
		n := 0
		err := other.GetBatch(ctx, ds, func(d digest.Digest, data []byte, err error) {
			n++
			if err != nil || digest.FromBytes(data) != d {
				t.Errorf("batch %s: %v", d, err)
			}
		})
		if err != nil || n != 2 {
			t.Fatalf("batch: %d objects, %v", n, err)
		}
	}
}
