package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slacker-dev/slacker/internal/testutil"
)

// Network is a private IPv4 network of network namespaces: a bridge in the root
// namespace holding HostIP (where services such as the registry and MinIO listen),
// and one namespace per node, joined to the bridge by a veth pair, with its own
// address. Traffic between a node and a service crosses a veth and the bridge,
// never loopback. Everything is removed in t.Cleanup.
type Network struct {
	Bridge string
	HostIP string // the bridge's address, in the root namespace
	Nodes  []*Netns
}

// Netns is one node's network namespace.
type Netns struct {
	Name string // as `ip netns` knows it
	IP   string // its address on the network
}

// NewNetwork makes a network with n node namespaces. It needs root, `ip` and
// `nsenter`.
func NewNetwork(t testing.TB, n int) *Network {
	t.Helper()
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "ip", "nsenter")
	b := make([]byte, 3)
	rand.Read(b)
	id := hex.EncodeToString(b) // interface names stay under 16 bytes: "slk" + 6 + 2
	subnet, err := freeSubnet()
	if err != nil {
		t.Fatal(err)
	}
	nw := &Network{Bridge: "slk" + id + "br", HostIP: subnet + ".1"}
	t.Cleanup(func() { nw.remove(t) })
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	ip("link", "add", nw.Bridge, "type", "bridge")
	ip("addr", "add", nw.HostIP+"/24", "dev", nw.Bridge)
	ip("link", "set", nw.Bridge, "up")
	for i := 0; i < n; i++ {
		ns := &Netns{Name: fmt.Sprintf("slk%sn%d", id, i), IP: fmt.Sprintf("%s.%d", subnet, 10+i)}
		host, peer := fmt.Sprintf("slk%sh%d", id, i), fmt.Sprintf("slk%sv%d", id, i)
		ip("netns", "add", ns.Name)
		nw.Nodes = append(nw.Nodes, ns)
		ip("link", "add", host, "type", "veth", "peer", "name", peer)
		ip("link", "set", host, "master", nw.Bridge)
		ip("link", "set", host, "up")
		ip("link", "set", peer, "netns", ns.Name)
		ip("-n", ns.Name, "addr", "add", ns.IP+"/24", "dev", peer)
		ip("-n", ns.Name, "link", "set", peer, "up")
		ip("-n", ns.Name, "link", "set", "lo", "up")
	}
	return nw
}

// freeSubnet picks 10.X.Y (a /24) that no route of this machine uses.
func freeSubnet() (string, error) {
	out, err := exec.Command("ip", "-4", "route", "show", "table", "all").Output()
	if err != nil {
		return "", fmt.Errorf("ip route: %w", err)
	}
	for range 100 {
		b := make([]byte, 2)
		rand.Read(b)
		s := fmt.Sprintf("10.%d.%d", 200+int(b[0])%50, b[1])
		if !strings.Contains(string(out), s+".") {
			return s, nil
		}
	}
	return "", fmt.Errorf("no free 10.x.y.0/24 subnet")
}

func (nw *Network) remove(t testing.TB) {
	for _, ns := range nw.Nodes {
		// Deleting the namespace deletes its end of the veth, and so the pair.
		if out, err := exec.Command("ip", "netns", "del", ns.Name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", ns.Name, err, out)
		}
	}
	if out, err := exec.Command("ip", "link", "del", nw.Bridge).CombinedOutput(); err != nil {
		t.Errorf("ip link del %s: %v: %s", nw.Bridge, err, out)
	}
}

// Command runs name in the namespace's network (and only there: it shares the
// mount namespace, so mounts made by a daemon in it are seen by everyone).
func (ns *Netns) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"--net=" + filepath.Join("/run/netns", ns.Name), "--", name}, args...)...)
}

// Dial checks that addr answers TCP from inside the namespace.
func (ns *Netns) Dial(t testing.TB, addr string) {
	t.Helper()
	// bash's /dev/tcp is the one dialler every Debian has.
	out, err := ns.Command("bash", "-c", fmt.Sprintf("exec 3<>/dev/tcp/%s/%s", hostOf(addr), portOf(addr))).CombinedOutput()
	if err != nil {
		t.Fatalf("from %s (%s), %s does not answer: %v: %s", ns.Name, ns.IP, addr, err, out)
	}
}

func hostOf(addr string) string { h, _, _ := net.SplitHostPort(addr); return h }
func portOf(addr string) string { _, p, _ := net.SplitHostPort(addr); return p }

// StartProcessIn is StartProcess with the daemon in the namespace ns (its network
// only: it shares the mount namespace). Restart would start it outside ns: start
// another with StartProcessIn instead.
func StartProcessIn(t testing.TB, ns *Netns, root, store string, extra ...string) *Process {
	t.Helper()
	RequirePrivileged(t)
	_, bin := Binaries(t)
	p := &Process{Root: root, Socket: filepath.Join(root, "slackerd.sock"), Store: store, bin: bin, t: t}
	if err := os.MkdirAll(root, 0o700); err != nil {
		t.Fatal(err)
	}
	var err error
	if p.log, err = os.OpenFile(filepath.Join(root, "slackerd.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--root", root, "--socket", p.Socket, "--store", store, "--cache-size", "2GiB", "--log-level", "debug"}, extra...)
	p.cmd = ns.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { cmd.Wait(); close(done) }(p.cmd, p.done)
	t.Cleanup(func() {
		p.Stop()
		CheckNoMounts(t, root)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := waitSocket(ctx, p.Socket); err != nil {
		t.Fatalf("slackerd in %s did not start: %v\n%s", ns.Name, err, p.Log())
	}
	return p
}

// CLI runs the slacker binary in the namespace against the daemon on socket and
// returns stdout, stderr and the exit code.
func (ns *Netns) CLI(t testing.TB, socket string, args ...string) (string, string, int) {
	t.Helper()
	bin, _ := Binaries(t)
	cmd := ns.Command(bin, args...)
	cmd.Env = append(os.Environ(), "SLACKER_SOCKET="+socket)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("slacker %v in %s: %v", args, ns.Name, err)
	}
	return out.String(), errb.String(), code
}
