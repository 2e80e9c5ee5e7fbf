package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// Options configure Start.
type Options struct {
	// Target is the server's host:port.
	Target string
	// Listen is the proxy's address (default 127.0.0.1:0, a free port).
	Listen string
	// HTTP puts an HTTP-aware layer between the link and the target, for
	// FailRequests and TokenAuth.
	HTTP   bool
	Logger *slog.Logger
}

// Stats count what went through the proxy.
type Stats struct {
	Conns      int64 // connections accepted
	BytesUp    int64 // client to server
	BytesDown  int64 // server to client
	Resets     int64 // connections reset by a fault
	Statuses   int64 // requests answered with an injected status
	TokenFails int64 // requests refused with 401 for lack of a valid token
	Tokens     int64 // tokens issued
}

// Proxy is a running fault proxy. Its methods are safe for concurrent use.
type Proxy struct {
	addr   string
	target string // where link connections go (the HTTP layer in HTTP mode)
	ln     net.Listener
	log    *slog.Logger
	http   *httpLayer

	mu         sync.Mutex
	oneWay     time.Duration
	hang       bool
	down       bool
	resetAfter int64
	conns      map[*link]struct{}
	changed    chan struct{} // closed and replaced when hang changes
	closed     bool

	up, downRate *rate.Limiter
	wg           sync.WaitGroup

	conns_, bytesUp, bytesDown, resets atomic.Int64
}

// Start listens and forwards to opts.Target until Close.
func Start(opts Options) (*Proxy, error) {
	if opts.Target == "" {
		return nil, errors.New("faultproxy: no target")
	}
	if opts.Listen == "" {
		opts.Listen = "127.0.0.1:0"
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ln, err := net.Listen("tcp", opts.Listen)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: %w", err)
	}
	p := &Proxy{addr: ln.Addr().String(), target: opts.Target, ln: ln, log: log, conns: map[*link]struct{}{},
		changed: make(chan struct{}), up: rate.NewLimiter(rate.Inf, burst), downRate: rate.NewLimiter(rate.Inf, burst)}
	if opts.HTTP {
		if p.http, err = startHTTP(opts.Target, p); err != nil {
			ln.Close()
			return nil, err
		}
		p.target = p.http.addr
	}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the host:port clients dial instead of the target's.
func (p *Proxy) Addr() string { return p.addr }

// URL is http://Addr.
func (p *Proxy) URL() string { return "http://" + p.addr }

// Close stops listening and closes every connection.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.hang = false
	p.signalLocked()
	links := p.linksLocked()
	p.mu.Unlock()
	err := p.ln.Close()
	for _, l := range links {
		l.close(false)
	}
	p.wg.Wait()
	if p.http != nil {
		p.http.close()
	}
	return err
}

// burst is the most bytes moved at once; the limiters' burst.
const burst = 64 << 10

// SetLatency makes the link's round-trip time rtt: every byte reaches the other
// side rtt/2 after it was sent, in both directions.
func (p *Proxy) SetLatency(rtt time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.oneWay = rtt / 2
}

// SetBandwidth caps the link at bytesPerSecond in each direction, shared by all
// connections (0: no cap).
func (p *Proxy) SetBandwidth(bytesPerSecond int64) {
	lim := rate.Inf
	if bytesPerSecond > 0 {
		lim = rate.Limit(bytesPerSecond)
	}
	// The bucket holds 10 ms of traffic: timers oversleep by a fraction of a
	// millisecond, and a smaller bucket would lose that time's tokens.
	b := max(burst, int(bytesPerSecond/100))
	for _, l := range []*rate.Limiter{p.up, p.downRate} {
		l.SetLimit(lim)
		l.SetBurst(b)
	}
}

// SetHang stops (true) or resumes (false) moving bytes. Connections stay open and
// new ones are accepted; what is sent waits.
func (p *Proxy) SetHang(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hang = on
	p.signalLocked()
}

// SetDown takes the server away (true): every open connection is reset and new ones
// are reset as soon as they are accepted. false brings it back.
func (p *Proxy) SetDown(on bool) {
	p.mu.Lock()
	p.down = on
	var links []*link
	if on {
		links = p.linksLocked()
	}
	p.mu.Unlock()
	for _, l := range links {
		l.close(true)
	}
}

// ResetAfter resets every connection once it has carried n bytes from the server
// (a transfer cut in the middle); 0 turns it off. It applies to bytes moved after
// the call.
func (p *Proxy) ResetAfter(n int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.resetAfter = n
	for l := range p.conns {
		l.downSince.Store(0)
	}
}

// ResetAll resets every open connection now.
func (p *Proxy) ResetAll() {
	p.mu.Lock()
	links := p.linksLocked()
	p.mu.Unlock()
	for _, l := range links {
		l.close(true)
	}
}

// Heal turns every fault off: no latency, no cap, no hang, server up, no resets,
// no injected statuses, no token auth.
func (p *Proxy) Heal() {
	p.SetLatency(0)
	p.SetBandwidth(0)
	p.SetHang(false)
	p.SetDown(false)
	p.ResetAfter(0)
	if p.http != nil {
		p.http.heal()
	}
}

// Stats returns the proxy's counters.
func (p *Proxy) Stats() Stats {
	s := Stats{Conns: p.conns_.Load(), BytesUp: p.bytesUp.Load(), BytesDown: p.bytesDown.Load(), Resets: p.resets.Load()}
	if p.http != nil {
		s.Statuses, s.TokenFails, s.Tokens = p.http.statuses.Load(), p.http.tokenFails.Load(), p.http.issued.Load()
	}
	return s
}

func (p *Proxy) signalLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *Proxy) linksLocked() []*link {
	out := make([]*link, 0, len(p.conns))
	for l := range p.conns {
		out = append(out, l)
	}
	return out
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.conns_.Add(1)
		p.mu.Lock()
		down, closed := p.down, p.closed
		p.mu.Unlock()
		if down || closed {
			reset(c)
			p.resets.Add(1)
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// reset closes c with an RST rather than a FIN.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}

// link is one proxied connection.
type link struct {
	p              *Proxy
	client, server net.Conn
	ctx            context.Context
	cancel         context.CancelFunc
	once           sync.Once
	downSince      atomic.Int64 // bytes to the client since ResetAfter was set
	resetByFault   atomic.Bool
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	server, err := net.DialTimeout("tcp", p.target, 10*time.Second)
	if err != nil {
		p.log.Warn("faultproxy-dial-failed", "target", p.target, "err", err)
		reset(client)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &link{p: p, client: client, server: server, ctx: ctx, cancel: cancel}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		l.close(false)
		return
	}
	p.conns[l] = struct{}{}
	p.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); l.pump(client, server, p.up, &p.bytesUp, false) }()
	go func() { defer wg.Done(); l.pump(server, client, p.downRate, &p.bytesDown, true) }()
	wg.Wait()
	l.close(false)
	p.mu.Lock()
	delete(p.conns, l)
	p.mu.Unlock()
}

func (l *link) close(byFault bool) {
	l.once.Do(func() {
		if byFault {
			l.resetByFault.Store(true)
			l.p.resets.Add(1)
			reset(l.client)
			reset(l.server)
		} else {
			l.client.Close()
			l.server.Close()
		}
		l.cancel()
	})
}

type segment struct {
	b   []byte
	buf *[]byte   // from bufs, returned once delivered
	at  time.Time // when it entered the link
}

var bufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// pump moves bytes from src to dst through the link's faults: each segment is
// delivered one way's latency after it was read, paced by the direction's limiter,
// and held while the link hangs.
func (l *link) pump(src, dst net.Conn, lim *rate.Limiter, count *atomic.Int64, toClient bool) {
	q := make(chan segment, 256)
	go func() {
		defer close(q)
		for {
			buf := bufs.Get().(*[]byte)
			n, err := src.Read(*buf)
			if n > 0 {
				select {
				case q <- segment{(*buf)[:n], buf, time.Now()}:
				case <-l.ctx.Done():
					return
				}
			} else {
				bufs.Put(buf)
			}
			if err != nil {
				return
			}
		}
	}()
	for seg := range q {
		ok := l.deliver(seg, dst, lim, count, toClient)
		bufs.Put(seg.buf)
		if !ok {
			l.close(false)
			for range q { // let the reader finish
			}
			return
		}
	}
	// src ended: pass the half-close on.
	if tc, ok := dst.(*net.TCPConn); ok {
		tc.CloseWrite()
	} else {
		dst.Close()
	}
}

func (l *link) deliver(seg segment, dst net.Conn, lim *rate.Limiter, count *atomic.Int64, toClient bool) bool {
	p := l.p
	for {
		p.mu.Lock()
		hang, changed, oneWay, resetAfter := p.hang, p.changed, p.oneWay, p.resetAfter
		p.mu.Unlock()
		if hang {
			select {
			case <-changed:
				continue
			case <-l.ctx.Done():
				return false
			}
		}
		if wait := time.Until(seg.at.Add(oneWay)); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-l.ctx.Done():
				t.Stop()
				return false
			}
		}
		b := seg.b
		for len(b) > 0 {
			n := min(len(b), burst)
			if err := lim.WaitN(l.ctx, n); err != nil {
				return false
			}
			if toClient && resetAfter > 0 {
				if l.downSince.Add(int64(n)) > resetAfter {
					keep := n - int(l.downSince.Load()-resetAfter)
					if keep > 0 {
						dst.Write(b[:keep])
						count.Add(int64(keep))
					}
					l.close(true)
					return false
				}
			}
			k, err := dst.Write(b[:n])
			count.Add(int64(k))
			if err != nil {
				return false
			}
			b = b[n:]
		}
		return true
	}
}

// httpStatusText is used in injected error bodies.
func httpStatusText(code int) string { return http.StatusText(code) }

var _ io.Closer = (*Proxy)(nil)
