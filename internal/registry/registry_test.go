package registry

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/image"
	"github.com/slacker-dev/slacker/internal/testenv/services"
	"github.com/slacker-dev/slacker/internal/testutil"
)

// startRegistry starts Debian's docker-registry for the test.
func startRegistry(t *testing.T) *services.Registry {
	t.Helper()
	testutil.RequireTool(t, "docker-registry")
	reg, err := services.StartRegistry(context.Background(), services.RegistryOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Stop() })
	return reg
}

// TestPushPull publishes a descriptor to Debian's docker-registry and resolves it.
func TestPushPull(t *testing.T) {
	ctx := context.Background()
	reg := startRegistry(t)
	d := &image.Descriptor{
		Snapshot: digest.FromString("snap"), Size: 10 << 30, DataSize: 300 << 20,
		Config:  ocispec.ImageConfig{Cmd: []string{"echo", "hello"}, Env: []string{"PATH=/usr/bin:/bin"}},
		Created: time.Now().UTC().Truncate(time.Second),
	}
	ref := reg.Addr + "/slacker/debian:bookworm"
	res, err := Push(ctx, ref, d, Options{})
	if err != nil {
		t.Fatal(err)
	}
	got, pres, err := Pull(ctx, ref, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Snapshot != d.Snapshot || got.Config.Cmd[1] != "hello" || pres.ManifestDigest != res.ManifestDigest {
		t.Fatalf("pulled %+v / %+v", got, pres)
	}
	if pres.BytesMoved > 16<<10 {
		t.Fatalf("pull moved %d bytes for a 300 MB image; want kilobytes", pres.BytesMoved)
	}
	if _, _, err := Pull(ctx, reg.Addr+"/slacker/missing:x", Options{}); !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), "image not found in the registry") {
		t.Fatalf("missing ref: %v", err)
	}
	// An ordinary OCI image is refused with advice, never used as if it were ours.
	plain := reg.Addr + "/plain/image:v1"
	services.PushRandomImage(t, plain)
	if _, _, err := Pull(ctx, plain, Options{}); !errors.Is(err, ErrNotSlacker) || errdefs.KindOf(err) != errdefs.Unsupported || !strings.Contains(err.Error(), "slacker convert") {
		t.Fatalf("ordinary image: %v", err)
	}
	reg.Stop()
	if _, _, err := Pull(ctx, ref, Options{}); !errors.Is(err, ErrUnreachable) || errdefs.KindOf(err) != errdefs.Unavailable {
		t.Fatalf("stopped registry: %v", err)
	}
}

// TestRoundTrips counts what a push and a pull ask of the registry: over a link with
// a 20 ms round trip each request is 20 ms of every deployment. One ping per push or
// pull (one pusher or puller for all its requests); a pull is the ping, the manifest
// and the blob. With Insecure (plain HTTP) and no credentials, a pull is the
// manifest and the blob on one connection: no ping, no HTTPS attempt; the snapshot
// the manifest names is told (SnapshotNamed) before the blob is asked for. A
// plain-HTTP registry that wants a token after all gets the usual handshake.
func TestRoundTrips(t *testing.T) {
	ctx := context.Background()
	reg := startRegistry(t)
	target, err := url.Parse("http://" + reg.Addr)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var requests []string
	conns := 0
	wantToken := false // the front asks for a bearer token, as a registry with auth does
	proxy := httputil.NewSingleHostReverseProxy(target)
	front := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		requests = append(requests, r.Method+" "+r.URL.Path)
		token := wantToken
		mu.Unlock()
		if token && r.URL.Path == "/token" {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"token":"t"}`)
			return
		}
		if token && r.Header.Get("Authorization") != "Bearer t" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="http://`+r.Host+`/token",service="test"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	front.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			mu.Lock()
			conns++
			mu.Unlock()
		}
	}
	front.Start()
	t.Cleanup(front.Close)
	// counted runs f with no idle connection left from before and returns the
	// requests and new connections it made.
	counted := func(f func() error) ([]string, int, int) {
		t.Helper()
		remote.DefaultTransport.(*http.Transport).CloseIdleConnections()
		mu.Lock()
		requests, conns = nil, 0
		mu.Unlock()
		if err := f(); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		pings := 0
		for _, r := range requests {
			if r == "GET /v2/" {
				pings++
			}
		}
		return append([]string(nil), requests...), pings, conns
	}

	ref := strings.TrimPrefix(front.URL, "http://") + "/slacker/rt:v1"
	d := &image.Descriptor{Snapshot: digest.FromString("snap"), Size: 1 << 30, DataSize: 1 << 20}
	if reqs, pings, _ := counted(func() error { _, err := Push(ctx, ref, d, Options{}); return err }); pings != 1 {
		t.Fatalf("a push pinged the registry %d times, want 1: %q", pings, reqs)
	}
	pull := func(insecure bool) func() error {
		return func() error {
			var named digest.Digest
			var requestsWhenNamed int
			got, _, err := Pull(ctx, ref, Options{Insecure: insecure, SnapshotNamed: func(s digest.Digest) {
				mu.Lock()
				named, requestsWhenNamed = s, len(requests)
				mu.Unlock()
			}})
			if err == nil && got.Snapshot != d.Snapshot {
				err = fmt.Errorf("pulled snapshot %s, want %s", got.Snapshot, d.Snapshot)
			}
			if err == nil && (named != d.Snapshot || requests[requestsWhenNamed-1] != "GET /v2/slacker/rt/manifests/v1") {
				err = fmt.Errorf("SnapshotNamed told %q after %q, want %s right after the manifest", named, requests[:requestsWhenNamed], d.Snapshot)
			}
			return err
		}
	}
	reqs, pings, _ := counted(pull(false))
	if pings != 1 || len(reqs) != 3 {
		t.Fatalf("a pull made %d requests (%d pings), want 3 (one ping, the manifest, the blob): %q", len(reqs), pings, reqs)
	}
	reqs, pings, n := counted(pull(true))
	if pings != 0 || len(reqs) != 2 || n != 1 {
		t.Fatalf("a plain-HTTP pull made %d requests (%d pings) on %d connections, want 2 (the manifest, the blob) on 1: %q", len(reqs), pings, n, reqs)
	}
	mu.Lock()
	wantToken = true
	mu.Unlock()
	reqs, pings, _ = counted(pull(true))
	if pings != 1 || !slices.Contains(reqs, "GET /token") {
		t.Fatalf("a plain-HTTP registry that wants a token: %q, want the refused manifest, then the ping, the token, the manifest and the blob", reqs)
	}
}
