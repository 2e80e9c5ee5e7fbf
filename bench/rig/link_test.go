package rig

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
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
	// Half the data crosses shaped, the rest unshaped (SetShaped), on the same
	// connection: nothing lost or reordered at the switch.
	if _, err := c.Write(data[:size/2]); err != nil {
		t.Fatal(err)
	}
	l.SetShaped(false)
	if l.Shaped() {
		t.Error("Shaped after SetShaped(false)")
	}
	if _, err := c.Write(data[size/2:]); err != nil {
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

// TestLinkUnshaped: an unshaped link delivers every packet at once, leaves the
// shaper untouched, and shapes again after SetShaped(true).
func TestLinkUnshaped(t *testing.T) {
	l := &Link{o: LinkOptions{Rate: 8e6, RTT: 4 * time.Millisecond, Queue: 3 * time.Millisecond}}
	sh := newShaper(l.o)
	const us = int64(time.Microsecond)
	l.SetShaped(false)
	for i := range 10 { // 10 ms of data at 8 Mbit/s: shaped, most would be dropped
		if at, ok := l.admit(sh, int64(i)*us, 1000); !ok || at != int64(i)*us {
			t.Fatalf("unshaped packet %d: at %d µs, ok %v; want at once", i, at/us, ok)
		}
	}
	if sh.free != 0 {
		t.Errorf("unshaped packets moved the shaper to %d µs", sh.free/us)
	}
	l.SetShaped(true)
	if at, ok := l.admit(sh, 100*us, 1000); !ok || at != (100+1000+2000)*us {
		t.Errorf("shaped again: at %d µs, ok %v; want 3100 µs", at/us, ok)
	}
}

// TestShaper checks the link's arithmetic against values computed by hand: at
// 8 Mbit/s a byte takes 1 µs, a packet arrives RTT/2 after its last byte left, and
// one that would wait longer than the queue is dropped.
func TestShaper(t *testing.T) {
	const us = int64(time.Microsecond)
	type pkt struct {
		now  int64 // µs
		n    int
		at   int64 // µs; -1 dropped
		free int64 // µs, after
	}
	tests := []struct {
		name string
		o    LinkOptions
		pkts []pkt
	}{
		{"serialization and delay", LinkOptions{Rate: 8e6, RTT: time.Millisecond, Queue: 10 * time.Millisecond}, []pkt{
			{0, 1000, 1500, 1000},    // sent 0..1000 µs, +500 µs
			{0, 1000, 2500, 2000},    // waits for the first
			{100, 500, 3000, 2500},   // still queued behind them
			{5000, 1000, 6500, 6000}, // the link was idle: starts at once
		}},
		{"queue full", LinkOptions{Rate: 8e6, Queue: 3 * time.Millisecond}, []pkt{
			{0, 1000, 1000, 1000},
			{0, 1000, 2000, 2000},
			{0, 1000, 3000, 3000},
			{0, 1000, 4000, 4000}, // waits exactly the queue (3 ms): kept
			{0, 1000, -1, 4000},   // would wait 4 ms: dropped, nothing sent
			{1500, 100, 4100, 4100},
		}},
		{"1 Gbit/s jumbo frames", LinkOptions{Rate: 1e9, RTT: 2 * time.Millisecond, Queue: 10 * time.Millisecond}, []pkt{
			{0, 9000, 72 + 1000, 72},
			{0, 9000, 144 + 1000, 144},
		}},
		{"unlimited: delay only, never dropped", LinkOptions{RTT: 4 * time.Millisecond}, []pkt{
			{0, 9000, 2000, 0},
			{0, 9000, 2000, 0},
			{10, 1 << 20, 2010, 10},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sh := newShaper(tt.o)
			for i, p := range tt.pkts {
				at, ok := sh.admit(p.now*us, p.n)
				if want := p.at >= 0; ok != want || (ok && at != p.at*us) {
					t.Errorf("packet %d (%d B at %d µs): at %d µs, ok %v; want %d µs", i, p.n, p.now, at/us, ok, p.at)
				}
				if sh.free != p.free*us {
					t.Errorf("packet %d: link busy until %d µs, want %d", i, sh.free/us, p.free)
				}
			}
		})
	}
}

// TestCleanStaleLinks: the namespace of a harness that is gone is deleted; that of
// a live process is kept.
func TestCleanStaleLinks(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "ip")
	ctx := context.Background()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	live := exec.Command("sleep", "60")
	if err := live.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { live.Process.Kill(); live.Wait() })
	stale := fmt.Sprintf("%s%d", netnsPrefix, dead.Process.Pid)
	kept := fmt.Sprintf("%s%d", netnsPrefix, live.Process.Pid)
	for _, ns := range []string{stale, kept} {
		if err := ipCmd(ctx, "netns", "add", ns); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ipCmd(ctx, "netns", "del", ns) })
	}
	CleanStaleLinks(ctx)
	if _, err := os.Stat(filepath.Join("/run/netns", stale)); !os.IsNotExist(err) {
		t.Errorf("%s of a dead process kept: %v", stale, err)
	}
	if _, err := os.Stat(filepath.Join("/run/netns", kept)); err != nil {
		t.Errorf("%s of a live process deleted: %v", kept, err)
	}
}
