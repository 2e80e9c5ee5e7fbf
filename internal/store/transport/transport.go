package transport

import (
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultReceiveBuffer is each store connection's receive buffer unless
// Options.ReceiveBuffer says: 4 MiB, above the bandwidth-delay product of a
// 1 Gbit/s link with a 20 ms round trip (2.5 MB). A set buffer is also the
// connection's ceiling (autotuning would grow to net.ipv4.tcp_rmem's maximum):
// one connection over a link with a larger bandwidth-delay product moves less
// than it could, which the node's parallel fetches make up for.
const DefaultReceiveBuffer = 4 << 20

// MinReceiveBuffer and MaxReceiveBuffer bound a configured receive buffer.
const (
	MinReceiveBuffer = 64 << 10
	MaxReceiveBuffer = 64 << 20
)

// RmemMaxPath is where the kernel says the largest receive buffer a program may set.
const RmemMaxPath = "/proc/sys/net/core/rmem_max"

// Options configure New.
type Options struct {
	// ReceiveBuffer is each connection's receive buffer (SO_RCVBUF) in bytes:
	// 0 is DefaultReceiveBuffer; negative leaves it to the kernel's autotuning,
	// as does a buffer larger than the kernel allows (ReceiveBufferFor).
	ReceiveBuffer int
	// HTTP2 lets the transport use HTTP/2 where the server offers it (over TLS).
	HTTP2 bool
}

// New returns a pooled transport for a remote store's requests. Responses are
// never decompressed by it: chunks are verified byte for byte.
func New(o Options) *http.Transport {
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	if n, _ := ReceiveBufferFor(o.ReceiveBuffer, RmemMax()); n > 0 {
		d.Control = func(_, _ string, c syscall.RawConn) error {
			// Before connect: the window the handshake offers comes from it. A
			// failure leaves the kernel's default, which works, only slower.
			return c.Control(func(fd uintptr) { _ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, n) })
		}
	}
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           d.DialContext,
		ForceAttemptHTTP2:     o.HTTP2,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   64, // fetch parallelism plus prefetch
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
	}
}

// ReceiveBufferFor returns the receive buffer to set on a store connection when
// asked is configured (0: DefaultReceiveBuffer; negative: none) and the kernel
// allows at most rmemMax (RmemMax; 0: unknown). It returns 0, setting none, when
// none is asked or when the kernel would cut it down: setting a buffer stops the
// kernel's autotuning, and a buffer cut to a default rmem_max (208 KiB) would cap
// the window far below what autotuning reaches. capped says that the kernel's
// limit, or not knowing it, is the reason.
func ReceiveBufferFor(asked int, rmemMax int) (n int, capped bool) {
	switch {
	case asked < 0:
		return 0, false
	case asked == 0:
		asked = DefaultReceiveBuffer
	}
	if rmemMax <= 0 || asked > rmemMax {
		return 0, true
	}
	return asked, false
}

// RmemMax returns the kernel's net.core.rmem_max, or 0 if it cannot be read.
func RmemMax() int {
	b, err := os.ReadFile(RmemMaxPath)
	if err != nil {
		return 0
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 0 {
		return 0
	}
	return n
}
