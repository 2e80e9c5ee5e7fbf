package services

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/slacker-dev/slacker/internal/mount"
	"github.com/slacker-dev/slacker/internal/testutil"
)

func TestDockerdStartStop(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "dockerd", "docker")
	_, keyErr := os.Stat("/etc/docker/key.json")
	dir, err := os.MkdirTemp("", "dockerd-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	d, err := StartDockerd(ctx, DockerdOptions{Dir: dir, InsecureRegistries: []string{"127.0.0.1:5000"}})
	if err != nil {
		t.Fatal(err)
	}
	out, err := d.Docker(ctx, "info", "--format", "{{.Driver}} {{.DockerRootDir}}")
	if err != nil {
		d.Stop()
		t.Fatal(err)
	}
	if want := "overlay2 " + dir + "/data"; strings.TrimSpace(out) != want {
		t.Errorf("docker info: %q, want %q", out, want)
	}
	if _, err := d.Docker(ctx, "no-such-command"); err == nil || !strings.Contains(err.Error(), "no-such-command") {
		t.Errorf("a failing docker command: %v", err)
	}
	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}
	if d.proc.exited() == nil {
		t.Fatal("dockerd still runs after Stop")
	}
	if ms, _ := mount.Mounts(dir); len(ms) > 0 {
		t.Fatalf("left mounted: %+v", ms)
	}
	if _, err := os.Stat("/etc/docker/key.json"); os.IsNotExist(keyErr) && err == nil {
		t.Fatal("dockerd wrote /etc/docker/key.json")
	}
	d.Stop()
}
