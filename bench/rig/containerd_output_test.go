package rig_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/slacker-dev/slacker/bench/rig"
	"github.com/slacker-dev/slacker/bench/workload"
	"github.com/slacker-dev/slacker/internal/testenv"
	"github.com/slacker-dev/slacker/internal/testutil"
)

// The containerd path gives a container's output, every time, with its standard
// output and error apart: ctr alone now and then dropped a short-lived
// container's output (ctrlog.go).
func TestContainerdOutput(t *testing.T) {
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

	// run starts a container that prints its number on both streams and checks
	// what came out.
	run := func(t *testing.T, name string) {
		t.Helper()
		var stdout, stderr strings.Builder
		ct, err := c.Start(ctx, ref, rig.RunSpec{Name: name,
			Args: []string{"sh", "-c", "echo out " + name + "; echo err " + name + " >&2"}, Stdout: &stdout, Stderr: &stderr})
		if err != nil {
			t.Fatal(err)
		}
		waitEnd(t, ct, name)
		ct.Remove(ctx)
		if ct.ExitCode() != 0 || stdout.String() != "out "+name+"\n" || stderr.String() != "err "+name+"\n" {
			t.Errorf("%s: exit %d, stdout %q, stderr %q, tail %q", name, ct.ExitCode(), stdout.String(), stderr.String(), ct.StderrTail())
		}
	}

	t.Run("short", func(t *testing.T) {
		for i := range 30 {
			run(t, fmt.Sprintf("short-%d", i))
		}
	})

	// A container without input reads end-of-input at once.
	t.Run("no-input", func(t *testing.T) {
		var stdout strings.Builder
		ct, err := c.Start(ctx, ref, rig.RunSpec{Name: "no-input", Args: []string{"sh", "-c", "cat; echo end"}, Stdout: &stdout})
		if err != nil {
			t.Fatal(err)
		}
		waitEnd(t, ct, "the container reading its input")
		ct.Remove(ctx)
		if ct.ExitCode() != 0 || stdout.String() != "end\n" {
			t.Errorf("exit %d, stdout %q, tail %q", ct.ExitCode(), stdout.String(), ct.StderrTail())
		}
	})

	// ctr run --rm (Run), which the core benchmark checks the output of.
	t.Run("run", func(t *testing.T) {
		for i := range 10 {
			r, err := c.Run(ctx, ref, []string{"sh", "-c", fmt.Sprintf("echo out %d; echo err %d >&2", i, i)}, nil)
			if err != nil || r.ExitCode != 0 || r.Stdout != fmt.Sprintf("out %d\n", i) || r.Stderr != fmt.Sprintf("err %d\n", i) {
				t.Errorf("run %d: %v, exit %d, stdout %q, stderr %q", i, err, r.ExitCode, r.Stdout, r.Stderr)
			}
		}
		// With input, the output comes through ctr (ctr never ends the input: the
		// command reads one line).
		if r, err := c.Run(ctx, ref, []string{"sh", "-c", "head -n 1; exit 3"}, strings.NewReader("in\n")); err != nil || r.ExitCode != 3 || r.Stdout != "in\n" {
			t.Errorf("run with input: %v, exit %d, stdout %q, stderr %q", err, r.ExitCode, r.Stdout, r.Stderr)
		}
	})

	// A workload ready at a log line is matched while it runs, as HelloBench
	// matches it.
	t.Run("log", func(t *testing.T) {
		m := workload.NewLineMatcher(&workload.Log{Pattern: regexp.MustCompile(`^listening on \d+$`)})
		o, e := m.Stream(), m.Stream()
		var stdout strings.Builder
		ct, err := c.Start(ctx, ref, rig.RunSpec{Name: "log",
			Args:   []string{"sh", "-c", "echo starting; echo listening on 8080 >&2; exec sleep 600"},
			Stdout: io.MultiWriter(&stdout, o), Stderr: e})
		if err != nil {
			t.Fatal(err)
		}
		defer ct.Remove(ctx)
		select {
		case <-m.Done():
		case <-ct.Done():
			t.Fatalf("exited (%d) before its line was matched; stdout %q, tail %q", ct.ExitCode(), stdout.String(), ct.StderrTail())
		case <-time.After(60 * time.Second):
			t.Fatalf("no line matched; stdout %q, tail %q", stdout.String(), ct.StderrTail())
		}
		select {
		case <-ct.Done():
			t.Fatalf("the container had exited (%d) when its line was matched", ct.ExitCode())
		default:
		}
		ct.Remove(ctx)
		if line, _ := m.Matched(); line != "listening on 8080" || stdout.String() != "starting\n" || !strings.Contains(ct.StderrTail(), "listening on 8080") {
			t.Errorf("matched %q, stdout %q, tail %q", line, stdout.String(), ct.StderrTail())
		}
	})

	// ctr's opens of the stdout and stderr FIFOs returning late, as a starved
	// goroutine's would: a second after the kernel opened them (strace, on the
	// /proc/self/fd paths ctr 1.6.20 opens them by; fd 7 is the stdin FIFO's,
	// and delaying that one too holds ctr up so that nothing is lost). Through
	// ctr's FIFOs, the task was deleted before the opens returned and the
	// standard output was lost every time (5 in 5). Through files, nothing is.
	// Should ctr number its descriptors otherwise, this case no longer
	// reproduces the race, and passes either way.
	t.Run("slow-ctr", func(t *testing.T) {
		ctr, err := exec.LookPath("ctr")
		if err != nil {
			t.Fatal(err)
		}
		testutil.RequireTool(t, "strace")
		if out, err := exec.Command("strace", "-f", "-qq", "-o", "/dev/null", "true").CombinedOutput(); err != nil {
			testutil.Missing(t, fmt.Sprintf("a working strace (%v: %s)", err, out))
		}
		var paths strings.Builder
		for fd := 8; fd <= 64; fd++ {
			fmt.Fprintf(&paths, " -P /proc/self/fd/%d", fd)
		}
		bin := t.TempDir()
		// strace's own notes go nowhere; ctr gets the standard error back.
		wrapper := "#!/bin/sh\nexec 3>&2 2>/dev/null\nexec strace -f -qq -o /dev/null" + paths.String() +
			" -e trace=openat -e inject=openat:delay_exit=1000000 /bin/sh -c 'exec 2>&3 3>&-; exec " + ctr + " \"$@\"' sh \"$@\"\n"
		if err := os.WriteFile(filepath.Join(bin, "ctr"), []byte(wrapper), 0o755); err != nil {
			t.Fatal(err)
		}
		t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
		for i := range 5 {
			run(t, fmt.Sprintf("slow-%d", i))
		}
	})
}
