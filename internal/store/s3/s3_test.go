package s3

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/faultproxy"
	"github.com/slacker-dev/slacker/internal/store"
	"github.com/slacker-dev/slacker/internal/store/storetest"
	"github.com/slacker-dev/slacker/internal/testenv/services"
	"github.com/slacker-dev/slacker/internal/testutil"
)

// One MinIO server for the package's tests; each test gets its own prefix, which is
// an empty store.
var (
	server     *services.MinIO
	serverErr  error
	serverOnce sync.Once
	serverDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if server != nil {
		server.Stop()
	}
	if serverDir != "" {
		os.RemoveAll(serverDir)
	}
	os.Exit(code)
}

func minioServer(t *testing.T) *services.MinIO { return minioServerB(t) }

func minioServerB(t testing.TB) *services.MinIO {
	t.Helper()
	testutil.RequireTool(t, "go") // to build MinIO if it is not cached
	serverOnce.Do(func() {
		if serverDir, serverErr = os.MkdirTemp("", "slacker-s3-test-"); serverErr != nil {
			return
		}
		server, serverErr = services.StartMinIO(context.Background(), services.MinIOOptions{Dir: serverDir})
	})
	if serverErr != nil {
		t.Fatalf("minio: %v", serverErr)
	}
	return server
}

func randomName(t *testing.T) string {
	b := make([]byte, 6)
	rand.Read(b)
	return strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name())) + "-" + hex.EncodeToString(b)
}

// newStore returns an empty store under a fresh prefix of the test bucket.
func newStore(t *testing.T) *Store {
	t.Helper()
	m := minioServer(t)
	s, err := Open(t.Context(), m.Location("slacker-test", randomName(t)))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// raw is a plain client on the same server, to act behind the store's back.
func raw(t *testing.T) *minio.Client {
	t.Helper()
	s := newStore(t)
	return s.client
}

func TestSuite(t *testing.T) {
	for _, compress := range []string{"zstd", "none"} {
		t.Run("compress="+compress, func(t *testing.T) {
			storetest.Run(t, storetest.Harness{
				New: func(t *testing.T) store.Store {
					s := newStore(t)
					s.o.Compress = compress == "zstd"
					return s
				},
				Corrupt: corruptStored,
			})
		})
	}
}

// corruptStored flips a byte of the bytes the server keeps for d (its compressed
// form, for a compressed object), keeping the object's metadata.
func corruptStored(t *testing.T, st store.Store, d digest.Digest) {
	s := st.(*Store)
	ctx := context.Background()
	body, info, _, err := s.core.GetObject(ctx, s.Bucket(), s.Key(d), minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(body)
	body.Close()
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x40
	if _, err := s.client.PutObject(ctx, s.Bucket(), s.Key(d), bytes.NewReader(b), int64(len(b)), minio.PutObjectOptions{UserMetadata: info.UserMetadata}); err != nil {
		t.Fatal(err)
	}
}

// A compressing store keeps text-like chunks compressed on the server, with their
// plain size in the metadata, and reads back the plain bytes; a store with
// compression off reads them too.
func TestCompressedObjects(t *testing.T) {
	ctx := t.Context()
	s := newStore(t)
	plain := bytes.Repeat([]byte("Package: libc6\nVersion: 2.36-9\n"), 9000)[:256<<10]
	d, err := store.PutBytes(ctx, s, plain)
	if err != nil {
		t.Fatal(err)
	}
	oi, err := s.client.StatObject(ctx, s.Bucket(), s.Key(d), minio.StatObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if oi.Size >= int64(len(plain))/4 || oi.UserMetadata[metaEncoding] != store.EncodingZstd || oi.UserMetadata[metaSize] != "262144" {
		t.Fatalf("on the server: %d bytes, metadata %v; want a zstd frame well under %d bytes", oi.Size, oi.UserMetadata, len(plain))
	}
	info, err := s.Stat(ctx, d)
	if err != nil || info.Size != int64(len(plain)) || info.Stored != oi.Size {
		t.Fatalf("stat: %+v, %v", info, err)
	}
	var listed []store.Info
	if err := s.List(ctx, func(i store.Info) error { listed = append(listed, i); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(listed) != 1 || listed[0].Size != int64(len(plain)) || listed[0].StoredBytes() != oi.Size {
		t.Fatalf("list: %+v", listed)
	}
	plainStore := *s
	plainStore.o.Compress = false
	for _, st := range []store.Store{s, &plainStore} {
		got, err := store.ReadAll(ctx, st, d)
		if err != nil || !bytes.Equal(got, plain) {
			t.Fatalf("read back: %v", err)
		}
		part, err := st.GetRange(ctx, d, 4096, 100)
		if err != nil || !bytes.Equal(part, plain[4096:4196]) {
			t.Fatalf("range: %v", err)
		}
	}
	// An object an older version (or compress=none) stored plain reads the same
	// through a compressing store.
	old := bytes.Repeat([]byte("old image\n"), 30000)
	od, err := store.PutBytes(ctx, &plainStore, old)
	if err != nil {
		t.Fatal(err)
	}
	if oi, err := s.client.StatObject(ctx, s.Bucket(), s.Key(od), minio.StatObjectOptions{}); err != nil || oi.Size != int64(len(old)) || len(oi.UserMetadata) != 0 {
		t.Fatalf("plain object on the server: %+v, %v", oi, err)
	}
	if got, err := store.ReadAll(ctx, s, od); err != nil || !bytes.Equal(got, old) {
		t.Fatalf("plain object through a compressing store: %v", err)
	}
	// A plain size the object does not have, or an encoding this version does not
	// know, is never served.
	body, _, _, err := s.core.GetObject(ctx, s.Bucket(), s.Key(d), minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stored, err := io.ReadAll(body)
	body.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, meta := range []map[string]string{
		{metaEncoding: store.EncodingZstd, metaSize: "4096"},
		{metaEncoding: store.EncodingZstd, metaSize: "lots"},
		{metaEncoding: "lz4", metaSize: "262144"},
		nil, // the frame served as if it were the content
	} {
		if _, err := s.client.PutObject(ctx, s.Bucket(), s.Key(d), bytes.NewReader(stored), int64(len(stored)), minio.PutObjectOptions{UserMetadata: meta}); err != nil {
			t.Fatal(err)
		}
		if _, err := store.ReadAll(ctx, s, d); !errors.Is(err, errdefs.ErrCorrupt) && !errors.Is(err, errdefs.ErrUnsupported) {
			t.Errorf("metadata %v: read %v, want corrupt or unsupported", meta, err)
		}
	}
}

// The server itself refuses a body that does not hash to the object's name: the
// signed x-amz-content-sha256 is the digest.
func TestServerRefusesWrongBody(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	good, bad := []byte("the content the name promises"), []byte("something else entirely......")
	d := digest.FromBytes(good)
	_, err := s.core.PutObject(ctx, s.Bucket(), s.Key(d), bytes.NewReader(bad), int64(len(bad)), "", d.Encoded(),
		minio.PutObjectOptions{DisableContentSha256: true, DisableMultipart: true})
	if err == nil {
		t.Fatal("the server stored a body that does not match its signed hash")
	}
	if merr := s.mapErr(ctx, ctx, err); !errors.Is(merr, errdefs.ErrCorrupt) {
		t.Fatalf("server refusal %v maps to %v, want ErrCorrupt", err, merr)
	}
	if ok, err := store.Exists(ctx, s, d); ok || err != nil {
		t.Fatalf("after the refused put: exists=%v err=%v", ok, err)
	}
}

// Objects over BufferLimit are streamed; a stream that does not match is refused
// and nothing is stored.
func TestStreamedPut(t *testing.T) {
	s := newStore(t)
	s.o.BufferLimit = 1024
	ctx := t.Context()
	b := make([]byte, 300<<10)
	rand.Read(b)
	d := digest.FromBytes(b)
	other := append([]byte(nil), b...)
	other[len(other)-1] ^= 1
	if err := s.Put(ctx, d, int64(len(other)), bytes.NewReader(other)); !errors.Is(err, errdefs.ErrCorrupt) {
		t.Fatalf("streamed put of wrong content: %v, want ErrCorrupt", err)
	}
	if ok, err := store.Exists(ctx, s, d); ok || err != nil {
		t.Fatalf("after the refused put: exists=%v err=%v", ok, err)
	}
	if err := s.Put(ctx, d, int64(len(b)), bytes.NewReader(b)); err != nil {
		t.Fatal(err)
	}
	got, err := store.ReadAll(ctx, s, d)
	if err != nil || !bytes.Equal(got, b) {
		t.Fatalf("read back: %v", err)
	}
}

func TestStrayKeysAreNotObjects(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	for _, k := range []string{"sha256/ab/not-a-digest", "sha256/zz", "other/x",
		"sha256/00/" + digest.FromString("x").Encoded()} { // a digest under the wrong directory
		if _, err := s.client.PutObject(ctx, s.Bucket(), s.Prefix()+k, strings.NewReader("x"), 1, minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	d, err := store.PutBytes(ctx, s, []byte("real"))
	if err != nil {
		t.Fatal(err)
	}
	var got []digest.Digest
	if err := s.List(ctx, func(i store.Info) error { got = append(got, i.Digest); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != d {
		t.Fatalf("list: %v, want only %s", got, d)
	}
}

func TestErrors(t *testing.T) {
	m := minioServer(t)
	ctx := t.Context()
	d := digest.FromString("anything")

	// A wrong secret: access denied, said as such, not "not found".
	wrong, err := New(Options{Endpoint: m.Addr, Bucket: "slacker-test", AccessKey: m.AccessKey, SecretKey: "wrong-secret", Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wrong.Stat(ctx, d); err == nil || errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), "credentials") {
		t.Errorf("stat with a wrong secret: %v; want access denied", err)
	}
	// A missing bucket: not found, with what to do.
	nob, err := New(Options{Endpoint: m.Addr, Bucket: "no-such-bucket", AccessKey: m.AccessKey, SecretKey: m.SecretKey, Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nob.Get(ctx, d); !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), "create=1") {
		t.Errorf("get from a missing bucket: %v", err)
	}
	// Nothing listening: unavailable.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	gone, err := New(Options{Endpoint: closed, Bucket: "bucket", AccessKey: "a", SecretKey: "secretsecret", Insecure: true, MaxRetries: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gone.Stat(ctx, d); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("stat of a store that is not listening: %v, want ErrUnavailable", err)
	}
	if err := gone.Put(ctx, d, 8, strings.NewReader("anything")); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("put to a store that is not listening: %v, want ErrUnavailable", err)
	}
}

// A server that accepts connections and never answers: each call ends at the
// store's own bound (ErrUnavailable) or at the caller's deadline (DeadlineExceeded).
func TestDeadlines(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	s, err := New(Options{Endpoint: l.Addr().String(), Bucket: "bucket", AccessKey: "a", SecretKey: "secretsecret",
		Insecure: true, MaxRetries: 1, Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	d := digest.FromString("x")
	if _, err := s.Get(context.Background(), d); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("get from a hung server: %v, want ErrUnavailable", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := s.Stat(ctx, d); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("stat with a caller deadline: %v, want DeadlineExceeded", err)
	}
}

func TestParseLocation(t *testing.T) {
	tests := []struct {
		loc     string
		want    Location
		wantErr string
	}{
		{loc: "s3://AK:SK@127.0.0.1:9000/bucket/some/prefix?insecure=1&create=1",
			want: Location{Options: Options{Endpoint: "127.0.0.1:9000", Bucket: "bucket", Prefix: "some/prefix", AccessKey: "AK", SecretKey: "SK", Insecure: true, Compress: true}, Create: true}},
		{loc: "s3://s3.example.com/b?region=eu-west-1&timeout=30s",
			want: Location{Options: Options{Endpoint: "s3.example.com", Bucket: "b", Region: "eu-west-1", Timeout: 30 * time.Second, Compress: true}}},
		{loc: "s3://s3.example.com/b?compress=none",
			want: Location{Options: Options{Endpoint: "s3.example.com", Bucket: "b"}}},
		{loc: "s3://host/b?compress=lz4", wantErr: `compress "lz4"`},
		{loc: "s3://host/", wantErr: "no bucket"},
		{loc: "s3:///bucket", wantErr: "no host"},
		{loc: "s3://host/b?colour=red", wantErr: "unknown parameter"},
		{loc: "s3://host/b?timeout=soon", wantErr: "timeout"},
		{loc: "s3://AK:TOPSECRET@host/b?bogus=1", wantErr: "unknown parameter"},
		{loc: "s3://AK:TOPSECRET@ho st/b", wantErr: "not a valid"},
	}
	for _, tc := range tests {
		got, err := ParseLocation(tc.loc)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: error %v, want %q", tc.loc, err, tc.wantErr)
			}
			if err != nil && strings.Contains(err.Error(), "TOPSECRET") {
				t.Errorf("%s: the error shows the secret: %v", tc.loc, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.loc, err)
			continue
		}
		if got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.loc, got, tc.want)
		}
	}
	s, err := New(Options{Endpoint: "h:1", Bucket: "bucket", AccessKey: "AK", SecretKey: "TOPSECRET"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(s.String(), "TOPSECRET") {
		t.Errorf("String shows the secret: %s", s)
	}
}

// BenchmarkGet reads 256 KiB chunks, each with its own request.
func BenchmarkGet(b *testing.B) {
	m := minioServerB(b)
	s, err := Open(context.Background(), m.Location("slacker-test", "bench"))
	if err != nil {
		b.Fatal(err)
	}
	var ds []digest.Digest
	for i := 0; i < 64; i++ {
		buf := make([]byte, 256<<10)
		rand.Read(buf)
		d, err := store.PutBytes(context.Background(), s, buf)
		if err != nil {
			b.Fatal(err)
		}
		ds = append(ds, d)
	}
	b.SetBytes(256 << 10)
	i := 0
	for b.Loop() {
		if _, err := store.ReadAll(context.Background(), s, ds[i%len(ds)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// TestFaults: the store through a fault proxy (server gone, transfer cut, hang).
func TestFaults(t *testing.T) {
	m := minioServer(t)
	p, err := faultproxy.Start(faultproxy.Options{Target: m.Addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	storetest.RunFaults(t, p, func(t *testing.T, addr string) store.Store {
		s, err := New(Options{Endpoint: addr, Bucket: "slacker-test", Prefix: randomName(t), AccessKey: m.AccessKey,
			SecretKey: m.SecretKey, Insecure: true, MaxRetries: 1})
		if err == nil {
			err = s.EnsureBucket(t.Context())
		}
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}
