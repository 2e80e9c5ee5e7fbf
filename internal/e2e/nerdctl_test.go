package e2e

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/slacker-dev/slacker/internal/api"
	"github.com/slacker-dev/slacker/internal/testenv"
	"github.com/slacker-dev/slacker/internal/testenv/services"
	"github.com/slacker-dev/slacker/internal/testutil"
)

// cniPath is where Debian's containernetworking-plugins puts the CNI plugins.
const cniPath = "/usr/lib/cni"

// server is a TCP server in the Debian image's perl: it answers each connection
// with $GREETING and the first line of /data/file (a bind mount).
const server = `use IO::Socket::INET; $| = 1;
my $s = IO::Socket::INET->new(LocalPort => 8080, Listen => 5, ReuseAddr => 1) or die "listen: $!";
print "listening on 8080\n";
while (my $c = $s->accept) { open(my $f, "<", "/data/file") or die "open: $!"; my $d = <$f>; print $c "$ENV{GREETING} $d"; close $c }`

// TestNerdctl uses the Slacker snapshotter as a Docker user of nerdctl would:
// `nerdctl --snapshotter slacker run -d` of a Slacker image with a published port,
// an environment variable and a bind mount (a server answering on the port with
// both); then logs, exec, stop, commit (the committed image runs), rm. The image
// is pulled lazily (a remote snapshot by label, a few percent of it fetched).
// containerd and the containers' networks live in a network namespace of their
// own, so what CNI sets up (a bridge, iptables rules) goes with it.
func TestNerdctl(t *testing.T) {
	testutil.RequireTool(t, "runc", "docker-registry", "containerd", "ctr", "nerdctl", "iptables", "ip", "nsenter")
	for _, p := range []string{"bridge", "portmap", "host-local", "loopback"} {
		testutil.RequireFile(t, filepath.Join(cniPath, p))
	}
	ctx := context.Background()
	work := t.TempDir()
	store := filepath.Join(work, "store")
	nw := testenv.NewNetwork(t, 1)
	ns := nw.Nodes[0]
	pub := publishDebian(t, work, store, freeAddr(t, nw.HostIP)) // the registry on the network's bridge
	ref := pub.ref

	b := testenv.StartProcessIn(t, ns, filepath.Join(work, "nodeB"), store)
	cdir, err := os.MkdirTemp("", "nerd-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(cdir) })
	c, err := services.StartContainerd(ctx, services.ContainerdOptions{Dir: cdir, NetNS: filepath.Join("/run/netns", ns.Name),
		ProxySnapshotters: map[string]string{"slacker": filepath.Join(b.Root, "snapshotter.sock")}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Stop() })
	nerdctl := func(args ...string) string {
		t.Helper()
		cmd := ns.Command("nerdctl", append([]string{"--address", c.Socket, "--namespace", "slacker-test",
			"--snapshotter", "slacker", "--data-root", filepath.Join(cdir, "nerdctl"), "--cni-path", cniPath,
			"--cni-netconfpath", filepath.Join(cdir, "cni"), "--insecure-registry"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("nerdctl %s: %v\n%s\nslackerd's log ends:\n%s", strings.Join(args, " "), err, out, tailString(b.Log(), 3000))
		}
		return string(out)
	}
	data := filepath.Join(work, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "file"), []byte("from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort(ns.IP, "18080")
	nerdctl("run", "-d", "--name", "web", "-p", addr+":8080", "-e", "GREETING=hello", "-v", data+":/data",
		ref, "perl", "-e", server)
	t.Cleanup(func() { // whatever happened, no container left running
		ns.Command("nerdctl", "--address", c.Socket, "--namespace", "slacker-test", "--data-root",
			filepath.Join(cdir, "nerdctl"), "--cni-path", cniPath, "--cni-netconfpath", filepath.Join(cdir, "cni"),
			"rm", "-f", "web").Run()
	})
	if !strings.Contains(b.Log(), `"msg":"remote-snapshot-prepared"`) || !strings.Contains(b.Log(), `"via":"label"`) {
		t.Fatal("nerdctl's pull was not a remote snapshot by label")
	}
	// The published port answers from outside the node's namespace, with the
	// variable and the bind mount's file.
	var answer string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			conn.SetDeadline(time.Now().Add(5 * time.Second))
			b, _ := io.ReadAll(conn)
			conn.Close()
			if answer = string(b); answer != "" {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing answers on %s (published port 8080)\nlogs: %s", addr, nerdctl("logs", "web"))
		}
	}
	if answer != "hello from the host\n" {
		t.Fatalf("the server answered %q", answer)
	}
	if logs := nerdctl("logs", "web"); !strings.Contains(logs, "listening on 8080") {
		t.Fatalf("nerdctl logs: %q", logs)
	}
	if out := nerdctl("exec", "web", "cat", "/data/file"); out != "from the host\n" {
		t.Fatalf("nerdctl exec cat: %q", out)
	}
	nerdctl("exec", "web", "sh", "-c", "echo committed > /etc/motd")
	st, err := api.NewClient(b.Socket).Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// perl, its modules and the execs read more than an echo: lazily all the same.
	if share := float64(st.Fetch.FetchedBytes) / float64(pub.dataSize); share <= 0 || share > 0.25 {
		t.Fatalf("nerdctl run, logs and exec fetched %.1f%% of the image; want a lazy start (under 25%%)", 100*share)
	} else {
		t.Logf("nerdctl run, logs and exec fetched %.1f%% of the image", 100*share)
	}
	nerdctl("stop", "web")
	nerdctl("commit", "web", "slacker-test/committed:v1")
	if out := nerdctl("run", "--rm", "--net", "none", "slacker-test/committed:v1", "cat", "/etc/motd"); out != "committed\n" {
		t.Fatalf("the committed image's /etc/motd: %q", out)
	}
	nerdctl("rm", "web")
	if out := nerdctl("ps", "-a", "-q"); strings.TrimSpace(out) != "" {
		t.Fatalf("containers left: %q", out)
	}
}
