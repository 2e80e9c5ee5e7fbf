package faultproxy

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"
)

// blobServer serves data to every connection that sends one byte, then closes.
func blobServer(t *testing.T, data []byte) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var b [1]byte
				if _, err := io.ReadFull(c, b[:]); err != nil {
					return
				}
				c.Write(data)
			}()
		}
	}()
	return ln.Addr().String()
}

func start(t *testing.T, o Options) *Proxy {
	t.Helper()
	p, err := Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func fetchBlob(addr string, deadline time.Duration) ([]byte, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if deadline > 0 {
		c.SetDeadline(time.Now().Add(deadline))
	}
	if _, err := c.Write([]byte{1}); err != nil {
		return nil, err
	}
	return io.ReadAll(c)
}

func random(t *testing.T, n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

func TestForwardsUnchanged(t *testing.T) {
	data := random(t, 3<<20)
	p := start(t, Options{Target: blobServer(t, data)})
	for range 3 {
		got, err := fetchBlob(p.Addr(), 0)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("got %d bytes, %v", len(got), err)
		}
	}
	if s := p.Stats(); s.Conns != 3 || s.BytesDown != 3*int64(len(data)) || s.BytesUp != 3 {
		t.Fatalf("stats %+v", s)
	}
}

// Latency and the bandwidth cap are checked as lower bounds: a transfer through
// them cannot be faster than the link allows.
func TestLatencyAndBandwidth(t *testing.T) {
	data := random(t, 1<<20)
	p := start(t, Options{Target: blobServer(t, data)})
	p.SetLatency(200 * time.Millisecond)
	start := time.Now()
	got, err := fetchBlob(p.Addr(), 0)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("got %d bytes, %v", len(got), err)
	}
	if took := time.Since(start); took < 200*time.Millisecond {
		t.Fatalf("a request and its answer crossed a 200ms-RTT link in %v", took)
	}
	p.SetLatency(0)
	p.SetBandwidth(2 << 20) // 2 MiB/s: 1 MiB takes at least (1 MiB - burst) / rate
	start = time.Now()
	if got, err = fetchBlob(p.Addr(), 0); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("got %d bytes, %v", len(got), err)
	}
	if took, min := time.Since(start), time.Duration(float64(len(data)-burst)/float64(2<<20)*float64(time.Second)); took < min {
		t.Fatalf("1 MiB crossed a 2 MiB/s link in %v (at least %v)", took, min)
	}
}

func TestResetAfter(t *testing.T) {
	data := random(t, 1<<20)
	p := start(t, Options{Target: blobServer(t, data)})
	p.ResetAfter(100 << 10)
	got, err := fetchBlob(p.Addr(), 10*time.Second)
	if !errors.Is(err, syscall.ECONNRESET) || len(got) > 100<<10 || !bytes.Equal(got, data[:len(got)]) {
		t.Fatalf("cut transfer: %d bytes, %v; want at most 100 KiB of the data and a reset", len(got), err)
	}
	p.ResetAfter(0)
	if got, err := fetchBlob(p.Addr(), 0); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("after ResetAfter(0): %d bytes, %v", len(got), err)
	}
	if p.Stats().Resets != 1 {
		t.Fatalf("resets %d", p.Stats().Resets)
	}
}

func TestHangAndResume(t *testing.T) {
	data := random(t, 256<<10)
	p := start(t, Options{Target: blobServer(t, data)})
	p.SetHang(true)
	got, err := fetchBlob(p.Addr(), 100*time.Millisecond)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || len(got) != 0 {
		t.Fatalf("hung link: %d bytes, %v; want a timeout and nothing", len(got), err)
	}
	done := make(chan error, 1)
	go func() {
		got, err := fetchBlob(p.Addr(), 0)
		if err == nil && !bytes.Equal(got, data) {
			err = errors.New("wrong bytes")
		}
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("transfer through a hung link finished: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	p.SetHang(false)
	if err := <-done; err != nil {
		t.Fatalf("after the hang: %v", err)
	}
}

func TestDownAndBack(t *testing.T) {
	data := random(t, 64<<10)
	p := start(t, Options{Target: blobServer(t, data)})
	p.SetDown(true)
	if got, err := fetchBlob(p.Addr(), 5*time.Second); err == nil || len(got) != 0 {
		t.Fatalf("server down: %d bytes, %v", len(got), err)
	}
	p.SetDown(false)
	if got, err := fetchBlob(p.Addr(), 0); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("server back: %d bytes, %v", len(got), err)
	}
}

func TestHTTPFaults(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			http.Error(w, "the proxy's token reached the server", 500)
			return
		}
		w.Header().Set("Location", "http://"+r.Host+"/v2/next")
		io.WriteString(w, "hello "+r.URL.Path)
	}))
	t.Cleanup(srv.Close)
	p := start(t, Options{Target: strings.TrimPrefix(srv.URL, "http://"), HTTP: true})
	get := func(path, token string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", p.URL()+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res, string(b)
	}
	if res, body := get("/v2/x", ""); res.StatusCode != 200 || body != "hello /v2/x" || res.Header.Get("Location") != p.URL()+"/v2/next" {
		t.Fatalf("plain: %d %q %q", res.StatusCode, body, res.Header.Get("Location"))
	}

	p.FailRequests(503, 2, func(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, "/v2/blobs") })
	for i, want := range []int{200, 503, 503, 200} {
		path := "/v2/blobs/a"
		if i == 0 {
			path = "/v2/manifests/a"
		}
		if res, _ := get(path, ""); res.StatusCode != want {
			t.Fatalf("request %d: %d, want %d", i, res.StatusCode, want)
		}
	}

	p.RequireTokens(&TokenAuth{TTL: time.Hour, User: "u", Password: "pw"})
	res, _ := get("/v2/", "")
	if res.StatusCode != 401 || !strings.Contains(res.Header.Get("WWW-Authenticate"), `realm="`+p.URL()+`/token"`) {
		t.Fatalf("without a token: %d %q", res.StatusCode, res.Header.Get("WWW-Authenticate"))
	}
	token := func(user, pw string) string {
		req, _ := http.NewRequest("GET", p.URL()+"/token?service=faultproxy", nil)
		req.SetBasicAuth(user, pw)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var tok struct{ Token string }
		json.NewDecoder(res.Body).Decode(&tok)
		return tok.Token
	}
	if tok := token("u", "wrong"); tok != "" {
		t.Fatalf("token for bad credentials")
	}
	tok := token("u", "pw")
	if res, body := get("/v2/y", tok); res.StatusCode != 200 || body != "hello /v2/y" {
		t.Fatalf("with a token: %d %q", res.StatusCode, body)
	}
	p.ExpireTokens()
	if res, _ := get("/v2/y", tok); res.StatusCode != 401 {
		t.Fatalf("with an expired token: %d", res.StatusCode)
	}
	if res, _ := get("/v2/y", token("u", "pw")); res.StatusCode != 200 {
		t.Fatalf("with a fresh token: %d", res.StatusCode)
	}
	p.Heal()
	if res, _ := get("/v2/z", ""); res.StatusCode != 200 {
		t.Fatalf("healed: %d", res.StatusCode)
	}
	if s := p.Stats(); s.Statuses != 2 || s.TokenFails != 2 || s.Tokens != 2 {
		t.Fatalf("stats %+v", s)
	}
}
