package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/slacker-dev/slacker/internal/fuseholder"
)

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// moduleRoot finds the directory holding go.mod above the working directory.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = parent
	}
}

// Binaries builds slacker and slackerd once per test process and returns their paths.
func Binaries(t testing.TB) (slacker, slackerd string) {
	t.Helper()
	buildOnce.Do(func() {
		root, err := moduleRoot()
		if err != nil {
			buildErr = err
			return
		}
		buildDir, buildErr = os.MkdirTemp("", "slacker-test-bin-")
		if buildErr != nil {
			return
		}
		os.Chmod(buildDir, 0o755) // tests run the CLI as an unprivileged user too
		// SLACKER_TEST_BUILD_FLAGS (e.g. -race) builds the daemon and CLI the tests
		// start with extra flags, to hunt races in the processes themselves.
		args := append([]string{"build", "-o", buildDir}, strings.Fields(os.Getenv("SLACKER_TEST_BUILD_FLAGS"))...)
		cmd := exec.Command("go", append(args, "./cmd/slacker", "./cmd/slackerd")...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(buildDir, "slacker"), filepath.Join(buildDir, "slackerd")
}

var nextOnce sync.Once
var nextBin string
var nextErr error

// NextSlackerd builds slackerd again as a different binary (its build tag
// "next", logged at start), to hand a node over to, as an upgrade would.
func NextSlackerd(t testing.TB) string {
	t.Helper()
	Binaries(t)
	nextOnce.Do(func() {
		root, err := moduleRoot()
		if err != nil {
			nextErr = err
			return
		}
		nextBin = filepath.Join(buildDir, "slackerd-next")
		args := append([]string{"build", "-o", nextBin, "-ldflags", "-X main.buildTag=next"}, strings.Fields(os.Getenv("SLACKER_TEST_BUILD_FLAGS"))...)
		cmd := exec.Command("go", append(args, "./cmd/slackerd")...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			nextErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if nextErr != nil {
		t.Fatal(nextErr)
	}
	return nextBin
}

// StargzBinary returns bin/slacker-stargz, which scripts/setup.sh builds from
// bench/stargz (CI runs it first); outside CI a missing one is built for the test
// process.
func StargzBinary(t testing.TB) string {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(root, "bin", "slacker-stargz")
	if _, err := os.Stat(p); err == nil {
		return p
	}
	if os.Getenv("SLACKER_CI") != "" {
		t.Fatal("bin/slacker-stargz is missing: scripts/setup.sh builds it")
	}
	p = filepath.Join(t.TempDir(), "slacker-stargz")
	cmd := exec.Command("go", "build", "-o", p, ".")
	cmd.Dir = filepath.Join(root, "bench", "stargz")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build slacker-stargz: %v\n%s", err, out)
	}
	return p
}

// Process is a slackerd running as a child process.
type Process struct {
	Root, Socket, Store string
	bin                 string
	cmd                 *exec.Cmd
	log                 *os.File
	done                chan struct{}
	t                   testing.TB
	extra               []string // the flags it was started with
}

// StartProcess starts the slackerd binary with root and store, and waits until it
// answers. The process is stopped in t.Cleanup (and whatever it left is cleaned up).
func StartProcess(t testing.TB, root, store string, extra ...string) *Process {
	t.Helper()
	RequirePrivileged(t)
	_, bin := Binaries(t)
	p := &Process{Root: root, Socket: filepath.Join(root, "slackerd.sock"), Store: store, bin: bin, t: t, extra: extra}
	p.start(extra...)
	t.Cleanup(func() {
		p.Stop()
		stopHolder(t, root)
		CheckNoMounts(t, root)
	})
	return p
}

// stopHolder waits for the FUSE holder of the slackerd at root to exit (it does
// once its slackerd stops), and kills it if it does not in 5s.
func stopHolder(t testing.TB, root string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	c, err := fuseholder.Dial(ctx, filepath.Join(root, "fuse-holder.sock"))
	if err != nil {
		return // none
	}
	pid := c.PID()
	c.Close()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if syscall.Kill(pid, 0) != nil {
			return
		}
	}
	t.Errorf("the FUSE holder (pid %d) outlived its slackerd by 5s: killed", pid)
	syscall.Kill(pid, syscall.SIGKILL)
}

func (p *Process) start(extra ...string) {
	p.t.Helper()
	var err error
	if p.log, err = os.OpenFile(filepath.Join(p.Root, "slackerd.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600); err != nil {
		os.MkdirAll(p.Root, 0o700)
		if p.log, err = os.OpenFile(filepath.Join(p.Root, "slackerd.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600); err != nil {
			p.t.Fatal(err)
		}
	}
	args := append([]string{"--root", p.Root, "--socket", p.Socket, "--store", p.Store, "--cache-size", "2GiB", "--log-level", "debug"}, extra...)
	p.cmd = exec.Command(p.bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { cmd.Wait(); close(done) }(p.cmd, p.done)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := waitSocket(ctx, p.Socket); err != nil {
		// Where it is stuck: Go writes every goroutine's stack on SIGQUIT.
		p.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
		}
		p.t.Fatalf("slackerd did not start: %v\n%s", err, p.Log())
	}
}

// Log returns what the daemon logged.
func (p *Process) Log() string {
	b, _ := os.ReadFile(filepath.Join(p.Root, "slackerd.log"))
	return string(b)
}

// Kill9 kills the daemon with SIGKILL, leaving its mounts behind as a crash would.
func (p *Process) Kill9() {
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	p.log.Close()
}

// Restart starts the daemon again on the same root, with the flags it was first
// started with unless others are given.
func (p *Process) Restart(extra ...string) {
	if len(extra) == 0 {
		extra = p.extra
	}
	p.start(extra...)
}

// Handover has the daemon hand the node over (SIGUSR2) and waits for it to exit.
func (p *Process) Handover() {
	p.t.Helper()
	p.cmd.Process.Signal(syscall.SIGUSR2)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.t.Fatalf("slackerd did not exit within 30s of SIGUSR2\n%s", p.Log())
	}
	p.log.Close()
}

// RestartWith starts the binary bin on the same root (an upgrade), with the flags
// the daemon was first started with unless others are given.
func (p *Process) RestartWith(bin string, extra ...string) {
	p.bin = bin
	p.Restart(extra...)
}

// Stop stops the daemon gracefully (SIGTERM), killing it after 30s.
func (p *Process) Stop() {
	select {
	case <-p.done:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.t.Errorf("slackerd did not stop on SIGTERM within 30s; killing it")
		p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
	}
	p.log.Close()
}

// CLI runs the slacker binary against this daemon and returns stdout, stderr and the
// exit code.
func (p *Process) CLI(t testing.TB, args ...string) (string, string, int) {
	t.Helper()
	return RunCLI(t, p.Socket, args...)
}

// RunCLI runs the slacker binary against the daemon on socket.
func RunCLI(t testing.TB, socket string, args ...string) (string, string, int) {
	t.Helper()
	bin, _ := Binaries(t)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "SLACKER_SOCKET="+socket)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("slacker %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

// Main runs a package's tests and removes the binaries built for them. Packages that
// call Binaries use it as their TestMain: func TestMain(m *testing.M) { testenv.Main(m) }.
func Main(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}
