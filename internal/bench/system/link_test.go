package system

import (
	"context"
	"crypto/sha256"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"testing"
	"time"

	"github.com/slacker-dev/slacker/internal/testutil"
)

// TestLink sends data both ways through an emulated link to a server in the far
// namespace, checks every byte arrives intact and is counted, and that closing the
// link removes its namespace.
func TestLink(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "ip")
	testutil.RequireFile(t, "/dev/net/tun")
	ctx := context.Background()
	l, err := NewLink(ctx, LinkOptions{Rate: 1e9, RTT: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })

	var ln net.Listener
	if err := InNetns(l.NetnsPath, func() error {
		var err error
		ln, err = net.Listen("tcp", net.JoinHostPort(l.FarIP, "0"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const size = 8 << 20
	data := make([]byte, size)
	rand.NewChaCha8([32]byte{1}).Read(data)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		// Echo back the sha256 of what arrived, then the data itself.
		h := sha256.New()
		io.CopyN(h, c, size)
		c.Write(h.Sum(nil))
		c.Write(data)
	}()
	// From this namespace the far side is reachable only through the link.
	c, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	if _, err := c.Write(data); err != nil {
		t.Fatal(err)
	}
	sum := make([]byte, 32)
	if _, err := io.ReadFull(c, sum); err != nil {
		t.Fatal(err)
	}
	if want := sha256.Sum256(data); string(sum) != string(want[:]) {
		t.Fatal("data arrived corrupted on the far side")
	}
	back := make([]byte, size)
	if _, err := io.ReadFull(c, back); err != nil {
		t.Fatal(err)
	}
	if string(back) != string(data) {
		t.Fatal("data came back corrupted")
	}
	t.Logf("16 MiB through the link in %v (%d dropped)", time.Since(start), l.Dropped())
	toFar, toHost := l.Bytes()
	if toFar < size || toHost < size {
		t.Errorf("link counted %d and %d bytes, want at least %d each way", toFar, toHost, size)
	}
	ln.Close()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(l.NetnsPath); !os.IsNotExist(err) {
		t.Errorf("namespace %s still there after Close: %v", l.NetnsPath, err)
	}
}
