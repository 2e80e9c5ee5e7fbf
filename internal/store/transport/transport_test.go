package transport

import (
	"context"
	"net"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func TestReceiveBufferFor(t *testing.T) {
	for _, tc := range []struct {
		name           string
		asked, rmemMax int
		want           int
		capped         bool
	}{
		{"off", -1, 8 << 20, 0, false},
		{"default, allowed", 0, 8 << 20, DefaultReceiveBuffer, false},
		{"default, the kernel's default rmem_max", 0, 212992, 0, true},
		{"asked, allowed", 2 << 20, 4 << 20, 2 << 20, false},
		{"asked, exactly the limit", 4 << 20, 4 << 20, 4 << 20, false},
		{"rmem_max unknown", 1 << 20, 0, 0, true},
	} {
		n, capped := ReceiveBufferFor(tc.asked, tc.rmemMax)
		if n != tc.want || capped != tc.capped {
			t.Errorf("%s: ReceiveBufferFor(%d, %d) = %d, %v; want %d, %v", tc.name, tc.asked, tc.rmemMax, n, capped, tc.want, tc.capped)
		}
	}
}

// rcvbuf dials a local listener through New(o)'s dialer and returns the
// connection's SO_RCVBUF as the kernel reports it.
func rcvbuf(t *testing.T, o Options) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	c, err := New(o).DialContext(context.Background(), "tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	var serr error
	if err := raw.Control(func(fd uintptr) { n, serr = unix.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF) }); err != nil {
		t.Fatal(err)
	}
	if serr != nil {
		t.Fatal(serr)
	}
	return n
}

func TestNewSetsReceiveBuffer(t *testing.T) {
	// Below any kernel's rmem_max (its default is 208 KiB), so that the test
	// does not depend on this machine's setting.
	const asked = 96 << 10
	if m := RmemMax(); m < asked {
		t.Fatalf("net.core.rmem_max is %d (read from %s), below this test's %d", m, RmemMaxPath, asked)
	}
	// Linux keeps twice what is asked, for its own bookkeeping.
	if got := rcvbuf(t, Options{ReceiveBuffer: asked}); got != 2*asked {
		t.Errorf("SO_RCVBUF with %d asked = %d, want %d", asked, got, 2*asked)
	}
	if got := rcvbuf(t, Options{ReceiveBuffer: -1}); got == 2*asked {
		t.Errorf("SO_RCVBUF with none asked = %d, the buffer of a connection that asked for one", got)
	}
}
