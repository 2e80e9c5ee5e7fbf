package registry

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/faultproxy"
	"github.com/slacker-dev/slacker/internal/image"
)

// TestPullThroughFaults pushes a descriptor to Debian's docker-registry and pulls
// it through a fault proxy: a slow link and transient failures are ridden out, an
// expired token is renewed, and a registry that is gone, hangs, keeps failing or
// cuts every transfer is a clear error, never a wrong descriptor.
func TestPullThroughFaults(t *testing.T) {
	ctx := context.Background()
	reg := startRegistry(t)
	p, err := faultproxy.Start(faultproxy.Options{Target: reg.Addr, HTTP: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	// The layer not embedded in the manifest: the pull reads it as a blob,
	// which the faults below meet.
	d := &image.Descriptor{Snapshot: digest.FromString("snap"), Size: 1 << 30, DataSize: 1 << 20,
		Created: time.Now().UTC().Truncate(time.Second)}
	ref := p.Addr() + "/slacker/faults:v1"
	p.RequireTokens(&faultproxy.TokenAuth{TTL: time.Hour})
	if _, err := Push(ctx, ref, d, Options{NoEmbed: true}); err != nil {
		t.Fatalf("push through the proxy with token auth: %v", err)
	}
	p.Heal()
	blobs := func(r *http.Request) bool { return strings.Contains(r.URL.Path, "/blobs/") }

	tests := []struct {
		name    string
		fault   func()
		timeout time.Duration
		want    error // nil: the pull succeeds
		msg     string
		tokens  int64 // tokens the pull must have needed
	}{
		{name: "healthy"},
		{name: "50ms RTT, 1 Mbit/s", fault: func() { p.SetLatency(50 * time.Millisecond); p.SetBandwidth(125000) }},
		{name: "two 503s", fault: func() { p.FailRequests(503, 2, nil) }},
		{name: "a 502 on the descriptor blob", fault: func() { p.FailRequests(502, 1, blobs) }},
		{name: "token required", fault: func() { p.RequireTokens(&faultproxy.TokenAuth{TTL: time.Hour}) }, tokens: 1},
		// A token good for one request: the manifest is fetched with it, the
		// descriptor blob's request meets it expired.
		{name: "token expired mid-pull", fault: func() { p.RequireTokens(&faultproxy.TokenAuth{TTL: time.Hour, Uses: 1}) }, tokens: 2},
		{name: "registry gone", fault: func() { p.SetDown(true) }, want: ErrUnreachable, msg: "registry unreachable"},
		{name: "registry hangs", fault: func() { p.SetHang(true) }, timeout: 2 * time.Second, want: ErrUnreachable, msg: "registry unreachable"},
		{name: "every transfer cut", fault: func() { p.ResetAfter(100) }, want: ErrUnreachable, msg: "registry unreachable"},
		{name: "503 every time", fault: func() { p.FailRequests(503, -1, nil) }, want: errdefs.ErrUnavailable, msg: "registry unavailable: it answered 503 Service Unavailable; try again later"},
		{name: "token refused", fault: func() { p.RequireTokens(&faultproxy.TokenAuth{User: "someone", Password: "secret"}) },
			msg: "access denied by the registry"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Cleanup(p.Heal)
			if tc.fault != nil {
				tc.fault()
			}
			before := p.Stats().Tokens
			got, _, err := Pull(ctx, ref, Options{Timeout: tc.timeout})
			if issued := p.Stats().Tokens - before; issued < tc.tokens {
				t.Errorf("the pull took %d tokens, want at least %d", issued, tc.tokens)
			}
			if tc.want == nil && tc.msg == "" {
				if err != nil {
					t.Fatalf("pull: %v", err)
				}
				if got.Snapshot != d.Snapshot || got.Size != d.Size {
					t.Fatalf("pulled %+v", got)
				}
				return
			}
			if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("pull: %v; want %v with %q", err, tc.want, tc.msg)
			}
		})
	}

	// A token that expires between two pulls is renewed without the caller noticing.
	p.RequireTokens(&faultproxy.TokenAuth{TTL: time.Hour})
	for i := range 2 {
		if _, _, err := Pull(ctx, ref, Options{}); err != nil {
			t.Fatalf("pull %d: %v", i, err)
		}
		p.ExpireTokens()
	}
	if s := p.Stats(); s.Tokens < 2 {
		t.Fatalf("%d tokens issued for two pulls across an expiry", s.Tokens)
	}
}
