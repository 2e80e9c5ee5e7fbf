package services

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slacker-dev/slacker/internal/testutil"
)

func TestContainerdStartStop(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "containerd", "ctr")
	dir, err := os.MkdirTemp("", "ctrd-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	c, err := StartContainerd(context.Background(), ContainerdOptions{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.Ctr(context.Background(), "plugins", "ls")
	if err != nil || !strings.Contains(out, "overlayfs") {
		t.Fatalf("plugins: %v\n%s", err, out)
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if c.proc.exited() == nil {
		t.Fatal("containerd still runs after Stop")
	}
}

// TestKillShims: the shims of a containerd, found by the socket they serve, are
// killed with what they run; a shim of another containerd is left alone.
func TestKillShims(t *testing.T) {
	dir := t.TempDir()
	mine, other := filepath.Join(dir, "mine.sock"), filepath.Join(dir, "other.sock")
	// A stand-in for a shim: named containerd-shim-runc-v2, given -address, with a
	// child for its container.
	shim := func(socket string) *exec.Cmd {
		cmd := &exec.Cmd{Path: "/bin/bash", Args: []string{"containerd-shim-runc-v2", "-c", "sleep 1000 & wait", "-address", socket}}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			for _, c := range childrenOf(cmd.Process.Pid) {
				syscall.Kill(c, syscall.SIGKILL)
			}
			cmd.Process.Kill()
			cmd.Wait()
		})
		return cmd
	}
	a, b := shim(mine), shim(other)
	var child int
	for deadline := time.Now().Add(5 * time.Second); child == 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cs := childrenOf(a.Process.Pid); len(cs) == 1 {
			child = cs[0]
		}
	}
	if got := shimsOf(mine); len(got) != 1 || got[0] != a.Process.Pid || child == 0 {
		t.Fatalf("shims of %s: %v (want %d), its container %d", mine, got, a.Process.Pid, child)
	}
	killContainers(mine)
	go a.Wait() // reaps the shim once it is killed, as init would
	killShims(mine)
	gone := func(pid int) bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		return err != nil || isZombie(b)
	}
	for deadline := time.Now().Add(5 * time.Second); !gone(child) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if !gone(child) {
		t.Fatalf("the container %d of the killed shim still runs", child)
	}
	if len(shimsOf(mine)) != 0 {
		t.Fatal("the shim still runs")
	}
	if got := shimsOf(other); len(got) != 1 || got[0] != b.Process.Pid {
		t.Fatalf("the other containerd's shim: %v, want %d", got, b.Process.Pid)
	}
}
