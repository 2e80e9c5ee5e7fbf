package fuseholder

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The test binary doubles as the processes the tests start: a holder (Serve, as
// `slackerd fuse-holder` runs it) or an owner (a client that holds a session and
// then waits to be killed).
const (
	envServe   = "FUSEHOLDER_TEST_SERVE"   // socket path: run Serve on it
	envTimeout = "FUSEHOLDER_TEST_TIMEOUT" // its Options.Timeout
	envOwner   = "FUSEHOLDER_TEST_OWNER"   // socket path: hold descriptor 3 there, print "held", wait
)

func TestMain(m *testing.M) {
	if path := os.Getenv(envServe); path != "" {
		os.Exit(helperServe(path))
	}
	if path := os.Getenv(envOwner); path != "" {
		os.Exit(helperOwner(path))
	}
	os.Exit(m.Run())
}

func helperServe(path string) int {
	timeout, _ := time.ParseDuration(os.Getenv(envTimeout))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if err := Serve(ctx, path, Options{Timeout: timeout, Logger: log}); err != nil {
		log.Error("fuse-holder-failed", "err", err)
		return 1
	}
	return 0
}

func helperOwner(path string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := c.Hold(ctx, Session{FD: os.NewFile(3, "fuse"), Init: testInit, Mountpoint: testMountpoint}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("held")
	time.Sleep(time.Minute) // until killed
	return 1
}

// helperCmd is a command running this test binary as a holder or an owner.
func helperCmd(t *testing.T, env ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	// A race-enabled binary sleeps 1 s at exit unless told not to.
	cmd.Env = append(append(os.Environ(), "GORACE=atexit_sleep_ms=0"), env...)
	return cmd
}

// reap kills and waits for a process the test started, at the end of the test.
func reap(t *testing.T, cmd *exec.Cmd) {
	t.Cleanup(func() {
		if cmd.Process == nil || cmd.ProcessState != nil {
			return
		}
		cmd.Process.Kill()
		cmd.Wait()
	})
}

// waitExit waits, at most 5 s, for a process the test started to exit.
func waitExit(t *testing.T, cmd *exec.Cmd) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(5 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("pid %d did not exit within 5s", cmd.Process.Pid)
		return nil
	}
}

// TestStart starts a holder (this binary) through Start and checks how it runs:
// its own session, in "/", stdin /dev/null, output to the log, no descriptor
// inherited (not even one the starter left without close-on-exec). A second Start
// finds it and starts nothing; Release makes it exit 0.
func TestStart(t *testing.T) {
	ctx := testCtx(t)
	dir := shortDir(t)
	sock, logPath := filepath.Join(dir, "holder.sock"), filepath.Join(dir, "holder.log")
	if err := os.WriteFile(logPath, []byte("an earlier holder's line\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A descriptor without close-on-exec, as C code or a careless parent leaves them.
	leakR, _ := pipe(t)
	withFD(t, leakR, func(fd int) error { _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, 0); return err })
	leakLink, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", leakR.Fd()))
	if err != nil {
		t.Fatal(err)
	}

	cmd := helperCmd(t, envServe+"="+sock, envTimeout+"=1m")
	c, err := Start(ctx, sock, cmd, logPath)
	reap(t, cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	pid := cmd.Process.Pid
	if c.PID() != pid {
		t.Fatalf("client of pid %d, started %d", c.PID(), pid)
	}
	if sid, err := unix.Getsid(pid); err != nil || sid != pid {
		t.Errorf("holder's session %d (%v), want its own (%d)", sid, err, pid)
	}
	if cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid)); err != nil || cwd != "/" {
		t.Errorf("holder's cwd %q (%v), want /", cwd, err)
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range fds {
		link, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, e.Name()))
		want := map[string]string{"0": "/dev/null", "1": logPath, "2": logPath}[e.Name()]
		switch {
		case want != "" && link != want:
			t.Errorf("holder's descriptor %s is %q, want %q", e.Name(), link, want)
		case link == leakLink:
			t.Errorf("holder inherited descriptor %s (%s)", e.Name(), link)
		}
		t.Logf("holder descriptor %s: %s", e.Name(), link)
	}
	if !isCloexec(t, leakR) {
		t.Error("Start did not mark the leaky descriptor close-on-exec")
	}

	// Someone answers now: Start starts nothing.
	cmd2 := helperCmd(t, envServe+"="+sock)
	c2, err := Start(ctx, sock, cmd2, logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if cmd2.Process != nil || c2.PID() != pid {
		t.Errorf("second Start: started %v, client of pid %d; want the running holder %d", cmd2.Process, c2.PID(), pid)
	}

	if err := c.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := waitExit(t, cmd); err != nil {
		t.Errorf("holder exit: %v", err)
	}
	log, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"an earlier holder's line\n", "msg=fuse-holder-started", "msg=fuse-session-released"} {
		if !strings.Contains(string(log), want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	if !isGone(sock) {
		t.Error("socket file left behind")
	}
}

// TestStartCommandExits: a command that exits without opening the socket fails
// Start at once, naming the log.
func TestStartCommandExits(t *testing.T) {
	truePath, err := exec.LookPath("true")
	if err != nil {
		t.Skip("no true(1)")
	}
	dir := shortDir(t)
	sock, logPath := filepath.Join(dir, "holder.sock"), filepath.Join(dir, "holder.log")
	cmd := exec.Command(truePath)
	reap(t, cmd)
	start := time.Now()
	_, err = Start(testCtx(t), sock, cmd, logPath)
	if err == nil || !strings.Contains(err.Error(), "exited") || !strings.Contains(err.Error(), logPath) {
		t.Fatalf("Start: %v, want an error saying it exited and naming %s", err, logPath)
	}
	t.Log(err)
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Start took %v to see the command exit", d)
	}
	if cmd.ProcessState == nil {
		t.Error("Start did not reap the command")
	}
}

// TestStartNoAnswer: a command that runs without ever opening the socket fails
// Start at the bound (here ctx's deadline, shorter than 5 s), naming the log; the
// command is killed and reaped.
func TestStartNoAnswer(t *testing.T) {
	sleepPath, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep(1)")
	}
	dir := shortDir(t)
	sock, logPath := filepath.Join(dir, "holder.sock"), filepath.Join(dir, "holder.log")
	cmd := exec.Command(sleepPath, "60")
	reap(t, cmd)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = Start(ctx, sock, cmd, logPath)
	if err == nil || !strings.Contains(err.Error(), "did not answer") || !strings.Contains(err.Error(), logPath) {
		t.Fatalf("Start: %v, want an error saying it did not answer and naming %s", err, logPath)
	}
	t.Log(err)
	if d := time.Since(start); d < 250*time.Millisecond || d > 3*time.Second {
		t.Errorf("Start gave up after %v, want about 300ms", d)
	}
	if cmd.ProcessState == nil || cmd.ProcessState.Success() {
		t.Errorf("the command was not killed and reaped: %v", cmd.ProcessState)
	}
}

// TestStartRefusesInheritance: Start refuses a command that would hand the holder
// descriptors or kill it with its starter, and a relative socket path.
func TestStartRefusesInheritance(t *testing.T) {
	sock := filepath.Join(shortDir(t), "holder.sock")
	_, w := pipe(t)
	cmd := exec.Command("/nonexistent")
	cmd.ExtraFiles = []*os.File{w}
	if _, err := Start(testCtx(t), sock, cmd, os.DevNull); err == nil || cmd.Process != nil {
		t.Errorf("Start with ExtraFiles: %v", err)
	}
	cmd = exec.Command("/nonexistent")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if _, err := Start(testCtx(t), sock, cmd, os.DevNull); err == nil || cmd.Process != nil {
		t.Errorf("Start with Pdeathsig: %v", err)
	}
	cmd = exec.Command("/nonexistent")
	if _, err := Start(testCtx(t), "holder.sock", cmd, os.DevNull); err == nil || cmd.Process != nil {
		t.Errorf("Start with a relative socket path: %v", err)
	}
}

// TestOwnerKilled: the owner is another process, killed with SIGKILL after its
// Hold; the holder sees it go, and a Take within the timeout gets the session.
func TestOwnerKilled(t *testing.T) {
	ctx := testCtx(t)
	h := startHolder(t, Options{Timeout: time.Minute})
	r, w := pipe(t)
	owner := helperCmd(t, envOwner+"="+h.path)
	owner.ExtraFiles = []*os.File{w} // descriptor 3
	owner.Stderr = os.Stderr
	out, err := owner.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := owner.Start(); err != nil {
		t.Fatal(err)
	}
	reap(t, owner)
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "held\n" {
		t.Fatalf("owner said %q, %v", line, err)
	}
	w.Close()
	if err := owner.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	owner.Wait()
	gone := h.log.wait(t, "fuse-owner-gone", 1)
	if gone.attrs["owner_pid"] != strconv.Itoa(owner.Process.Pid) {
		t.Errorf("owner-gone log: %v, want owner_pid %d", gone.attrs, owner.Process.Pid)
	}
	noEOF(t, r) // the holder keeps the connection
	s, err := dial(t, h.path).Take(ctx)
	if err != nil || s == nil {
		t.Fatalf("take: %v, %v", s, err)
	}
	defer s.FD.Close()
	writeThrough(t, s.FD, r, "after the owner's death")
	if l := h.log.wait(t, "fuse-session-taken", 1); l.attrs["previous_owner"] != "gone" {
		t.Errorf("taken log: %v", l.attrs)
	}
}
