package registry

import (
	"context"
	"encoding/json"
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
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/image"
	"github.com/slacker-dev/slacker/internal/labels"
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

	// Two images: one whose layer the manifest embeds, one pushed with NoEmbed:
	// its blob is read apart.
	host := strings.TrimPrefix(front.URL, "http://")
	ref, bigRef := host+"/slacker/rt:v1", host+"/slacker/rt:big"
	d := &image.Descriptor{Snapshot: digest.FromString("snap"), Size: 1 << 30, DataSize: 1 << 20}
	if reqs, pings, _ := counted(func() error { _, err := Push(ctx, ref, d, Options{}); return err }); pings != 1 {
		t.Fatalf("a push pinged the registry %d times, want 1: %q", pings, reqs)
	}
	big := &image.Descriptor{Snapshot: digest.FromString("apart"), Size: 1 << 30, DataSize: 1 << 20}
	if _, err := Push(ctx, bigRef, big, Options{NoEmbed: true}); err != nil {
		t.Fatal(err)
	}
	pull := func(insecure bool, ref string, d *image.Descriptor, embedded bool) func() error {
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
			manifest := "GET /v2/slacker/rt/manifests/" + ref[strings.LastIndex(ref, ":")+1:]
			switch {
			case err != nil:
			case embedded && named != "":
				err = fmt.Errorf("SnapshotNamed told %s for a pull that had the layer with the manifest", named)
			case !embedded && (named != d.Snapshot || requests[requestsWhenNamed-1] != manifest):
				err = fmt.Errorf("SnapshotNamed told %q after %q, want %s right after the manifest", named, requests[:requestsWhenNamed], d.Snapshot)
			}
			return err
		}
	}
	reqs, pings, _ := counted(pull(false, ref, d, true))
	if pings != 1 || len(reqs) != 2 {
		t.Fatalf("a pull made %d requests (%d pings), want 2 (one ping, the manifest with the layer): %q", len(reqs), pings, reqs)
	}
	reqs, pings, n := counted(pull(true, ref, d, true))
	if pings != 0 || len(reqs) != 1 || n != 1 {
		t.Fatalf("a plain-HTTP pull made %d requests (%d pings) on %d connections, want 1 (the manifest with the layer): %q", len(reqs), pings, n, reqs)
	}
	reqs, pings, n = counted(pull(true, bigRef, big, false))
	if pings != 0 || len(reqs) != 2 || n != 1 {
		t.Fatalf("a plain-HTTP pull of a layer not embedded made %d requests (%d pings) on %d connections, want 2 (the manifest, the blob) on 1: %q", len(reqs), pings, n, reqs)
	}
	mu.Lock()
	wantToken = true
	mu.Unlock()
	reqs, pings, _ = counted(pull(true, ref, d, true))
	if pings != 1 || !slices.Contains(reqs, "GET /token") {
		t.Fatalf("a plain-HTTP registry that wants a token: %q, want the refused manifest, then the ping, the token and the manifest", reqs)
	}
}

// TestCarriedMap pushes the block map in the layer and pulls it back, with the
// store the manifest names; the layer travels in the manifest while it is small.
func TestCarriedMap(t *testing.T) {
	ctx := context.Background()
	reg := startRegistry(t)
	for _, tc := range []struct {
		name    string
		size    int
		carried bool
	}{{"small map, in the manifest", 40 << 10, true}, {"large map, not carried", MaxInlineLayer + 1, false}} {
		t.Run(tc.name, func(t *testing.T) {
			m := make([]byte, tc.size)
			copy(m, tc.name)
			d := &image.Descriptor{Snapshot: digest.FromBytes(m), Size: 1 << 30, DataSize: 1 << 20, Created: time.Now().UTC().Truncate(time.Second)}
			ref := reg.Addr + "/slacker/carried:" + strings.ReplaceAll(strings.Fields(tc.name)[0], ",", "")
			if _, err := Push(ctx, ref, d, Options{BlockMap: m, Store: "s3://store.example/bucket"}); err != nil {
				t.Fatal(err)
			}
			got, res, err := Pull(ctx, ref, Options{})
			if err != nil {
				t.Fatal(err)
			}
			want := m
			if !tc.carried { // too large to embed with the layer: left to the store's lookup
				want = nil
			}
			if got.Snapshot != d.Snapshot || string(res.BlockMap) != string(want) || res.Store != "s3://store.example/bucket" || !res.Embedded {
				t.Fatalf("pulled snapshot %s, map of %d bytes, store %q, embedded %v", got.Snapshot, len(res.BlockMap), res.Store, res.Embedded)
			}
		})
	}
	// NoEmbed: the layer is a blob apart, without the map.
	m := []byte("a small map, not embedded")
	d0 := &image.Descriptor{Snapshot: digest.FromBytes(m), Size: 1 << 30, Created: time.Now().UTC().Truncate(time.Second)}
	if _, err := Push(ctx, reg.Addr+"/slacker/carried:noembed", d0, Options{BlockMap: m, NoEmbed: true}); err != nil {
		t.Fatal(err)
	}
	if _, res, err := Pull(ctx, reg.Addr+"/slacker/carried:noembed", Options{}); err != nil || res.Embedded || res.BlockMap != nil {
		t.Fatalf("NoEmbed: embedded %v, map %q, %v", res.Embedded, res.BlockMap, err)
	}
	// A map too large to carry is left out; the pull then has none.
	huge := make([]byte, image.MaxCarriedMap+1)
	d := &image.Descriptor{Snapshot: digest.FromBytes(huge), Size: 1 << 30, Created: time.Now().UTC().Truncate(time.Second)}
	if _, err := Push(ctx, reg.Addr+"/slacker/carried:huge", d, Options{BlockMap: huge}); err != nil {
		t.Fatal(err)
	}
	if _, res, err := Pull(ctx, reg.Addr+"/slacker/carried:huge", Options{}); err != nil || res.BlockMap != nil || res.Store != "" {
		t.Fatalf("a map too large to carry: %d bytes pulled, store %q, %v", len(res.BlockMap), res.Store, err)
	}
}

// TestEmbeddedDataChecked: data embedded in the manifest that is not the blob it
// describes is refused as corrupt, never decoded.
func TestEmbeddedDataChecked(t *testing.T) {
	d := &image.Descriptor{Snapshot: digest.FromString("snap"), Size: 1 << 30, Created: time.Now().UTC()}
	layer, err := image.EncodeLayer(d)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"other bytes": append([]byte("x"), layer[1:]...), "shorter": layer[:len(layer)-1]} {
		m := ocispec.Manifest{MediaType: ocispec.MediaTypeImageManifest,
			Config: ocispec.Descriptor{MediaType: ocispec.MediaTypeImageConfig, Digest: digest.FromString("{}"), Size: 2},
			Layers: []ocispec.Descriptor{{MediaType: ocispec.MediaTypeImageLayer, Digest: digest.FromBytes(layer), Size: int64(len(layer)),
				Annotations: map[string]string{labels.LayerSnapshot: d.Snapshot.String()}, Data: data}}}
		m.SchemaVersion = 2
		raw, _ := json.Marshal(m)
		if _, _, err := slackerBlob("ref", raw, types.OCIManifestSchema1); !errors.Is(err, errdefs.ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}
}
