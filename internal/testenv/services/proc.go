package services

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// process is a started daemon.
type process struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	log  string
}

func startProcess(name string, logPath string, args ...string) (*process, error) {
	if _, err := exec.LookPath(name); err != nil {
		return nil, fmt.Errorf("%s is not installed (install it with apt-get, see README): %w", name, err)
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(name, args...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{}), log: logPath}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	return p, nil
}

// stop sends SIGTERM to the process group, then SIGKILL after grace.
func (p *process) stop(grace time.Duration) error {
	if p == nil || p.cmd.Process == nil {
		return nil
	}
	select {
	case <-p.done:
		return nil
	default:
	}
	pgid := p.cmd.Process.Pid
	syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		syscall.Kill(-pgid, syscall.SIGKILL)
		<-p.done
	}
	return nil
}

func (p *process) exited() error {
	select {
	case <-p.done:
		logTail, _ := os.ReadFile(p.log)
		if len(logTail) > 2000 {
			logTail = logTail[len(logTail)-2000:]
		}
		return fmt.Errorf("exited early (%v); log %s:\n%s", p.err, p.log, logTail)
	default:
		return nil
	}
}

// waitFor polls ready until it returns nil, the process dies, or ctx ends.
func waitFor(ctx context.Context, p *process, what string, ready func() error) error {
	var last error
	for {
		if err := p.exited(); err != nil {
			return fmt.Errorf("%s %w", what, err)
		}
		if last = ready(); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s did not become ready: %v: %w", what, last, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// FreeLoopbackAddr returns 127.0.0.1:PORT for a port that was free a moment ago.
func FreeLoopbackAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

var errNotReady = errors.New("not ready")
