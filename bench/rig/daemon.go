package rig

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// daemon is a long-running program the rig starts (slackerd, the stargz
// snapshotter): its output appended to a log file, in a process group of its own,
// sent SIGTERM with the rig's parent.
type daemon struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{}
}

// startDaemon starts bin and waits up to 30 s until ready says it serves; a
// daemon that exits first is reported with the tail of its log.
func startDaemon(ctx context.Context, name, bin string, args []string, logPath string, ready func(context.Context) bool) (*daemon, error) {
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	d := &daemon{name: name, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); log.Close(); close(d.done) }()
	deadline := time.Now().Add(30 * time.Second)
	for !ready(ctx) {
		select {
		case <-d.done:
			b, _ := os.ReadFile(logPath)
			return nil, fmt.Errorf("%s exited at start: %s", name, tail(string(b)))
		case <-ctx.Done():
			d.stop()
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			d.stop()
			return nil, fmt.Errorf("%s did not answer within 30s", name)
		}
	}
	return d, nil
}

// stop sends SIGTERM and waits up to a minute, then kills the process group.
// A nil daemon is stopped already.
func (d *daemon) stop() {
	if d == nil {
		return
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(60 * time.Second):
		syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
		<-d.done
	}
}
