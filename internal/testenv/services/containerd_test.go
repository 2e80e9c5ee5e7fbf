package services

import (
	"context"
	"os"
	"strings"
	"testing"

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
