package faultproxy

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// httpLayer is the HTTP-aware part of a proxy: it answers some requests itself and
// forwards the rest to the target.
type httpLayer struct {
	p    *Proxy
	addr string
	srv  *http.Server
	rp   *httputil.ReverseProxy

	mu       sync.Mutex
	failures []*failure
	auth     *TokenAuth
	tokens   map[string]*grant

	statuses, tokenFails, issued atomic.Int64
}

type failure struct {
	status int
	left   int // < 0: unlimited
	match  func(*http.Request) bool
}

func startHTTP(target string, p *Proxy) (*httpLayer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: %w", err)
	}
	h := &httpLayer{p: p, addr: ln.Addr().String(), tokens: map[string]*grant{}}
	u := &url.URL{Scheme: "http", Host: target}
	h.rp = &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(u)
			r.Out.Host = r.In.Host // the server builds its Location URLs from it: keep them on the proxy
			if h.authOn() {
				r.Out.Header.Del("Authorization") // ours, not the server's
			}
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			p.log.Debug("faultproxy-upstream-error", "method", r.Method, "path", r.URL.Path, "err", err)
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	h.srv = &http.Server{Handler: h, ReadHeaderTimeout: time.Minute}
	go h.srv.Serve(ln)
	return h, nil
}

func (h *httpLayer) close() { h.srv.Close() }

func (h *httpLayer) heal() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.failures, h.auth = nil, nil
	h.tokens = map[string]*grant{}
}

func (h *httpLayer) authOn() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.auth != nil
}

// FailRequests answers the next n requests that match (nil: every request) with
// status instead of forwarding them; n < 0 fails them until Heal. Requests for the
// emulated token service are never failed by it. HTTP mode only.
func (p *Proxy) FailRequests(status, n int, match func(*http.Request) bool) {
	h := p.mustHTTP()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.failures = append(h.failures, &failure{status: status, left: n, match: match})
}

// TokenAuth configures the emulated token service, in the manner of a registry's
// Docker token auth: a request for /v2/... without a valid bearer token is answered
// 401 with a challenge naming the proxy's /token endpoint, which issues tokens
// valid for TTL (to anyone, or only to User:Password when User is set).
type TokenAuth struct {
	TTL            time.Duration
	User, Password string
	// Uses, if positive, expires each token after that many requests (an expiry
	// in the middle of a client's sequence of requests).
	Uses int
}

// RequireTokens turns the emulated token service on (nil: off). HTTP mode only.
func (p *Proxy) RequireTokens(a *TokenAuth) {
	h := p.mustHTTP()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.auth = a
	h.tokens = map[string]*grant{}
}

// ExpireTokens makes every token issued so far invalid: the next request bearing
// one is answered 401, as by a registry whose token expired.
func (p *Proxy) ExpireTokens() {
	h := p.mustHTTP()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.tokens = map[string]*grant{}
}

func (p *Proxy) mustHTTP() *httpLayer {
	if p.http == nil {
		panic("faultproxy: HTTP faults need Options.HTTP")
	}
	return p.http
}

func (h *httpLayer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/token" {
		h.token(w, r)
		return
	}
	if status := h.injected(r); status != 0 {
		h.statuses.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"errors":[{"code":"UNAVAILABLE","message":"injected by faultproxy: %s"}]}`, httpStatusText(status))
		return
	}
	if !h.authorized(r) {
		h.tokenFails.Add(1)
		w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm="http://%s/token",service="faultproxy"`, r.Host))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`)
		return
	}
	h.rp.ServeHTTP(w, r)
}

func (h *httpLayer) injected(r *http.Request) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, f := range h.failures {
		if f.left == 0 || (f.match != nil && !f.match(r)) {
			continue
		}
		if f.left > 0 {
			f.left--
		}
		return f.status
	}
	return 0
}

func (h *httpLayer) authorized(r *http.Request) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.auth == nil || !strings.HasPrefix(r.URL.Path, "/v2") {
		return true
	}
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return false
	}
	g, ok := h.tokens[tok]
	if !ok || !time.Now().Before(g.expires) || (h.auth.Uses > 0 && g.uses >= h.auth.Uses) {
		return false
	}
	g.uses++
	return true
}

// grant is an issued token.
type grant struct {
	expires time.Time
	uses    int
}

func (h *httpLayer) token(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	auth := h.auth
	h.mu.Unlock()
	if auth == nil {
		http.NotFound(w, r)
		return
	}
	if auth.User != "" {
		u, pw, ok := r.BasicAuth()
		if !ok || u != auth.User || pw != auth.Password {
			w.Header().Set("WWW-Authenticate", `Basic realm="faultproxy"`)
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"bad credentials"}]}`, http.StatusUnauthorized)
			return
		}
	}
	b := make([]byte, 16)
	rand.Read(b)
	tok := hex.EncodeToString(b)
	ttl := auth.TTL
	if ttl <= 0 {
		ttl = time.Hour
	}
	h.mu.Lock()
	h.tokens[tok] = &grant{expires: time.Now().Add(ttl)}
	h.mu.Unlock()
	h.issued.Add(1)
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"token": tok, "access_token": tok, "expires_in": int(ttl.Seconds()),
		"issued_at": time.Now().UTC().Format(time.RFC3339)})
}
