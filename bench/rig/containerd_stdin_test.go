package rig_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/slacker-dev/slacker/bench/rig"
	"github.com/slacker-dev/slacker/internal/testenv"
	"github.com/slacker-dev/slacker/internal/testutil"
)

// A workload with standard input whose command reads to its end (cat) finishes on
// the containerd path as it does under Slacker: ctr alone never gives the task
// end-of-input (issue 11's harness fix).
func TestContainerdStdin(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "containerd", "ctr", "runc", "skopeo", "docker-registry")
	layout := testenv.DebianOCI(t)
	ctx := context.Background()
	dir := t.TempDir()
	reg := startRegistry(t, dir)
	c, err := rig.NewContainerd(rig.ContainerdOptions{Dir: filepath.Join(dir, "c")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ref, _, err := c.Publish(ctx, rig.Image{Name: "minbase", Layout: layout, Tag: "bookworm"}, reg.Addr)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Cold(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Pull(ctx, ref); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	ct, err := c.Start(ctx, ref, rig.RunSpec{Name: "stdin", Args: []string{"sh", "-c", "cat; echo end"},
		Stdin: strings.NewReader("line 1\nline 2\n"), Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ct.Remove(context.Background()) })
	select {
	case <-ct.Done():
	case <-time.After(60 * time.Second):
		t.Fatalf("the container never saw the end of its input; output %q, stderr %q\n%s", out.String(), ct.StderrTail(),
			stuckState(ctx, c.Socket(), ct))
	}
	if ct.ExitCode() != 0 || out.String() != "line 1\nline 2\nend\n" {
		t.Fatalf("exit %d, output %q, stderr %q", ct.ExitCode(), out.String(), ct.StderrTail())
	}
}

// stuckState describes where a container that never finished is: containerd's
// tasks, and its init process's state and wait channel (a rare failure of this
// test gave no output at all; this says next time whether ctr, the task or cat
// was waiting).
func stuckState(ctx context.Context, socket string, ct *rig.Container) string {
	var b strings.Builder
	out, err := exec.CommandContext(ctx, "ctr", "-a", socket, "-n", "bench", "tasks", "ls").CombinedOutput()
	fmt.Fprintf(&b, "ctr tasks ls: %s %v\n", out, err)
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	pid, err := ct.PID(pctx)
	if err != nil {
		fmt.Fprintf(&b, "no pid: %v\n", err)
		return b.String()
	}
	for _, f := range []string{"stat", "wchan", "stack"} {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, f))
		fmt.Fprintf(&b, "/proc/%d/%s: %s %v\n", pid, f, data, err)
	}
	return b.String()
}
