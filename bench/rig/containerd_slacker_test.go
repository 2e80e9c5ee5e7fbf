package rig_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/slacker-dev/slacker/bench/rig"
	"github.com/slacker-dev/slacker/internal/testenv"
	"github.com/slacker-dev/slacker/internal/testutil"
)

// The slacker-containerd system pulls as CRI does (slacker-stargz pull --labels
// cri): slackerd's snapshotter must see the Slacker layer's label and prepare the
// image's snapshot from it, not have containerd download and apply the layer,
// and the container must then run on it.
func TestContainerdSlackerPullIsRemote(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireFile(t, "/dev/fuse")
	testutil.RequireTool(t, "containerd", "ctr", "runc", "docker-registry")
	if _, err := rig.NewContainerdSlacker(rig.SlackerOptions{}, t.TempDir(), ""); err == nil ||
		!strings.Contains(err.Error(), "slacker-stargz") {
		t.Fatalf("no puller: got %v, want an error naming slacker-stargz", err)
	}
	layout := testenv.DebianOCI(t)
	slacker, slackerd := testenv.Binaries(t)
	ctx := context.Background()
	dir := t.TempDir()
	reg := startRegistry(t, dir)
	cs, err := rig.NewContainerdSlacker(rig.SlackerOptions{Dir: filepath.Join(dir, "cs"), Slacker: slacker, Slackerd: slackerd},
		filepath.Join(dir, "c"), testenv.StargzBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	ref, _, err := cs.Publish(ctx, rig.Image{Name: "minbase", Layout: layout, Tag: "bookworm"}, reg.Addr)
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.Cold(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.Pull(ctx, ref); err != nil {
		t.Fatal(err)
	}
	res, err := cs.Run(ctx, ref, []string{"cat", "/etc/debian_version"}, nil)
	if err != nil || res.ExitCode != 0 || !strings.HasPrefix(res.Stdout, "12.") {
		t.Fatalf("run: %v, exit %d, stdout %q, stderr %q", err, res.ExitCode, res.Stdout, res.Stderr)
	}
	log, err := os.ReadFile(filepath.Join(dir, "cs", "node", "slackerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	var remote bool
	for _, line := range strings.Split(string(log), "\n") {
		if strings.Contains(line, `"msg":"snapshot-not-lazy"`) {
			t.Errorf("containerd applied the Slacker layer instead of the snapshotter preparing it: %s", line)
		}
		remote = remote || strings.Contains(line, `"msg":"remote-snapshot-prepared"`) && strings.Contains(line, `"via":"label"`)
	}
	if !remote {
		t.Errorf("slackerd never prepared the image's snapshot from the layer's label; its log:\n%s", log)
	}
}
