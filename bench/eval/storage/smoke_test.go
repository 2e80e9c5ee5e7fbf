package storage

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/slacker-dev/slacker/bench/rig"
	"github.com/slacker-dev/slacker/internal/testutil"
)

// TestSmoke is the evaluation's one real run in the test suite: fio on the host's
// filesystem and on xfs on a loop device of its own, for a second each, on two
// small files. It checks the outcome (both stacks measured, every test with I/O
// done) and that no mount or loop device is left behind; never a timing.
func TestSmoke(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "fio", "mkfs.xfs", "mkfs.btrfs", "losetup")
	dir := t.TempDir()
	res, err := Run(context.Background(), Options{Dir: filepath.Join(dir, "work"), ImagesDir: filepath.Join(dir, "images"),
		Jobs: 2, Depth: 4, FileSize: 1 << 20, Runtime: 1, SweepRuntime: 1, SweepBS: []int64{65536},
		LoopSize: 512 << 20, Targets: []string{"ext4", "xfs-loop"}, Runs: 1, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Meta.Failed) > 0 {
		t.Fatalf("failed: %v", res.Meta.Failed)
	}
	// Per target: randread cold, warm, one sweep point; randwrite cold, warm.
	if len(res.Samples) != 2*5 {
		t.Fatalf("%d samples: %+v", len(res.Samples), res.Samples)
	}
	for _, s := range res.Samples {
		if s.IOs <= 0 || s.IOPS <= 0 || s.Errors != 0 {
			t.Fatalf("sample without I/O: %+v", s)
		}
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mounts), dir) {
		t.Fatalf("a mount under %s is left", dir)
	}
	if err := rig.WriteJSON(filepath.Join(dir, "storage.json"), res); err != nil {
		t.Fatal(err)
	}
	var back Results
	if err := rig.ReadJSON(filepath.Join(dir, "storage.json"), &back); err != nil || len(back.Section().Tables) != 2 {
		t.Fatalf("round trip: %v", err)
	}
}
