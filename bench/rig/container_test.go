package rig

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func TestTailAndLastLines(t *testing.T) {
	w := NewTail(64)
	w.Write([]byte("one\ntwo\nthree\n"))
	w.Write([]byte("four\nfive\nsix\nseven"))
	if got := LastLines(w.String(), 5); got != "three | four | five | six | seven" {
		t.Errorf("last lines %q", got)
	}
	w = NewTail(8)
	w.Write([]byte("hello world"))
	if got := w.String(); got != "lo world" {
		t.Errorf("tail %q", got)
	}
	tests := []struct {
		in   string
		n    int
		want string
	}{
		{"a\nb\nc\n", 5, "a | b | c"},
		{"a\nb\nc\nd\n", 2, "c | d"},
		{"\n\nonly\n\n", 3, "only"},
		{"", 3, ""},
	}
	for _, tt := range tests {
		if got := LastLines(tt.in, tt.n); got != tt.want {
			t.Errorf("LastLines(%q, %d) = %q, want %q", tt.in, tt.n, got, tt.want)
		}
	}
}

// fakeOps stand for a system's: the container is the run command itself.
type fakeOps struct {
	cmd            *exec.Cmd
	kills, removes atomic.Int32
}

func (f *fakeOps) ops() ContainerOps {
	return ContainerOps{
		PID: func(context.Context) (int, error) {
			if f.cmd.Process == nil {
				return 0, errors.New("not started")
			}
			return f.cmd.Process.Pid, nil
		},
		Kill: func(context.Context) error {
			f.kills.Add(1)
			return f.cmd.Process.Signal(syscall.SIGKILL)
		},
		Remove: func(context.Context) (ContainerStats, error) {
			f.removes.Add(1)
			return ContainerStats{ReadBytes: 7, FetchedBytes: 3}, nil
		},
	}
}

func wait(t *testing.T, c *Container) {
	t.Helper()
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the run command did not exit")
	}
}

// TestStartContainer: the exit status, output and end of standard error of the
// run command; a container that exited is removed without a kill, once.
func TestStartContainer(t *testing.T) {
	f := &fakeOps{cmd: exec.Command("sh", "-c", "echo out; read line; echo \"got $line\"; echo err1 >&2; echo err2 >&2; exit 3")}
	var stdout strings.Builder
	before := time.Now()
	c, err := StartContainer(f.cmd, RunSpec{Name: "c1", Stdin: strings.NewReader("in\n"), Stdout: &stdout}, f.ops())
	if err != nil {
		t.Fatal(err)
	}
	if c.Name != "c1" || c.Started.Before(before) || c.Started.After(time.Now()) {
		t.Errorf("name %q, started %v (called at %v)", c.Name, c.Started, before)
	}
	wait(t, c)
	if c.ExitCode() != 3 || c.Err() != nil {
		t.Errorf("exit %d, err %v; want 3, nil", c.ExitCode(), c.Err())
	}
	if stdout.String() != "out\ngot in\n" || c.StderrTail() != "err1\nerr2" {
		t.Errorf("stdout %q, stderr tail %q", stdout.String(), c.StderrTail())
	}
	if pid, err := c.PID(context.Background()); err != nil || pid != f.cmd.Process.Pid {
		t.Errorf("PID = %d, %v", pid, err)
	}
	for range 2 {
		if _, err := c.Remove(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if f.kills.Load() != 0 || f.removes.Load() != 1 {
		t.Errorf("%d kills, %d removes; want 0, 1", f.kills.Load(), f.removes.Load())
	}
}

// TestContainerKilled: Remove kills a running container and waits for it; its
// status is 128+9, as a shell reports SIGKILL, and its statistics are the system's.
func TestContainerKilled(t *testing.T) {
	f := &fakeOps{cmd: exec.Command("sleep", "60")}
	c, err := StartContainer(f.cmd, RunSpec{Name: "c2"}, f.ops())
	if err != nil {
		t.Fatal(err)
	}
	ns, err := c.Netns(context.Background())
	if err != nil || ns != fmt.Sprintf("/proc/%d/ns/net", f.cmd.Process.Pid) {
		t.Errorf("Netns = %q, %v", ns, err)
	}
	st, err := c.Remove(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	wait(t, c)
	if c.ExitCode() != 128+9 || st.ReadBytes != 7 || st.FetchedBytes != 3 {
		t.Errorf("exit %d, stats %+v", c.ExitCode(), st)
	}
	if f.kills.Load() != 1 || f.removes.Load() != 1 {
		t.Errorf("%d kills, %d removes; want 1, 1", f.kills.Load(), f.removes.Load())
	}
}

// TestContainerPIDAfterExit: PID gives up once the run command has exited without
// the runtime ever knowing the process.
func TestContainerPIDAfterExit(t *testing.T) {
	cmd := exec.Command("true")
	c, err := StartContainer(cmd, RunSpec{Name: "c3"}, ContainerOps{
		PID: func(context.Context) (int, error) { return 0, errors.New("unknown") },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.PID(ctx); err == nil || !strings.Contains(err.Error(), "exited (status 0)") {
		t.Errorf("PID after exit: %v", err)
	}
	if _, err := StartContainer(exec.Command("/nonexistent/run"), RunSpec{}, ContainerOps{}); err == nil {
		t.Error("a run command that cannot start was accepted")
	}
}

// TestContainerOneStream: given one writer for both, standard output and error are
// one stream in the order written, and the tail holds both.
func TestContainerOneStream(t *testing.T) {
	f := &fakeOps{cmd: exec.Command("sh", "-c", "echo 1; echo 2 >&2; echo 3; echo 4 >&2")}
	var out strings.Builder
	c, err := StartContainer(f.cmd, RunSpec{Name: "c4", Stdout: &out, Stderr: &out}, f.ops())
	if err != nil {
		t.Fatal(err)
	}
	wait(t, c)
	if out.String() != "1\n2\n3\n4\n" || c.StderrTail() != "1\n2\n3\n4" {
		t.Errorf("output %q, tail %q", out.String(), c.StderrTail())
	}
}

// notifyWriter keeps what is written and closes seen once it holds want.
type notifyWriter struct {
	mu   sync.Mutex
	b    strings.Builder
	want string
	seen chan struct{}
}

func (w *notifyWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b.Write(p)
	if w.seen != nil && strings.Contains(w.b.String(), w.want) {
		close(w.seen)
		w.seen = nil
	}
	return len(p), nil
}

func (w *notifyWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// TestContainerOutputFiles: a container whose output comes through files (as on
// the containerd path) has it delivered while it runs, and all of it before Done;
// the run command's own standard error still reaches Stderr and the tail.
func TestContainerOutputFiles(t *testing.T) {
	dir := t.TempDir()
	out, errf := filepath.Join(dir, "stdout"), filepath.Join(dir, "stderr")
	for _, f := range []string{out, errf} {
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gate := filepath.Join(dir, "go")
	f := &fakeOps{cmd: exec.Command("sh", "-c", `echo ready >> "$1"; echo e1 >> "$2"; while [ ! -e "$3" ]; do sleep 0.01; done; echo done >> "$1"; echo e2 >> "$2"; echo own >&2`,
		"sh", out, errf, gate)}
	ops := f.ops()
	ops.Output = func(o, e io.Writer) (func() error, error) {
		return followFiles([]string{out, errf}, []io.Writer{o, e})
	}
	stdout := &notifyWriter{want: "ready\n", seen: make(chan struct{})}
	seen := stdout.seen
	stderr := &notifyWriter{}
	c, err := StartContainer(f.cmd, RunSpec{Name: "c5", Stdout: stdout, Stderr: stderr}, ops)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-seen:
	case <-c.Done():
		t.Fatalf("exited before its first line came; stdout %q", stdout.String())
	case <-time.After(10 * time.Second):
		t.Fatalf("the first line never came; stdout %q", stdout.String())
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	wait(t, c)
	if c.ExitCode() != 0 || c.Err() != nil || stdout.String() != "ready\ndone\n" {
		t.Errorf("exit %d, err %v, stdout %q", c.ExitCode(), c.Err(), stdout.String())
	}
	// The run command's own output and the container's come separately: each in
	// its order.
	if e := stderr.String(); strings.Count(e, "own\n") != 1 || strings.Replace(e, "own\n", "", 1) != "e1\ne2\n" {
		t.Errorf("stderr %q", e)
	}
	if tail := c.StderrTail() + "\n"; strings.Count(tail, "own\n") != 1 || strings.Replace(tail, "own\n", "", 1) != "e1\ne2\n" {
		t.Errorf("tail %q", tail)
	}
}
