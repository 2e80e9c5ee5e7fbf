package runc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// Runtime invokes runc with its own state directory.
type Runtime struct {
	Binary string // default "runc"
	Root   string // runc --root
}

func (r *Runtime) binary() string {
	if r.Binary != "" {
		return r.Binary
	}
	return "runc"
}

// WriteBundle writes config.json for spec c into dir.
func WriteBundle(dir string, c Config) error {
	s, err := Spec(c)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "config.json"), b, 0o600)
}

// Stdio are the streams a container gets.
type Stdio struct {
	In       io.Reader
	Out, Err io.Writer
}

// ErrNotRunnable: runc could not start the container's command (not found, not
// executable, bad working directory, ...). Exit codes follow Docker: 127 when the
// command was not found, 126 when it could not be invoked.
var ErrNotRunnable = errors.New("cannot start the container's command")

// RunError is a failure of runc itself, with the exit code Docker would use.
type RunError struct {
	Code int
	Msg  string
}

func (e *RunError) Error() string { return e.Msg }
func (e *RunError) Unwrap() error { return ErrNotRunnable }

// Run runs the container in the foreground and returns its exit code. Signals sent to
// this process's group reach runc, which forwards them to the container. A failure of
// runc to start the command is a *RunError, not an exit code.
func (r *Runtime) Run(ctx context.Context, id, bundle string, stdio Stdio) (int, error) {
	if _, err := exec.LookPath(r.binary()); err != nil {
		return -1, fmt.Errorf("runc is not installed: apt-get install runc")
	}
	logPath := filepath.Join(bundle, "runc.log")
	os.Remove(logPath)
	cmd := exec.CommandContext(ctx, r.binary(), "--root", r.Root, "--log", logPath, "--log-format", "json",
		"run", "--bundle", bundle, id)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdio.In, stdio.Out, stdio.Err
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if st, ok := ee.Sys().(syscall.WaitStatus); ok && st.Signaled() {
			return 128 + int(st.Signal()), nil
		}
		if msg := runcError(logPath); msg != "" {
			code := 125
			switch {
			case strings.Contains(msg, "executable file not found"), strings.Contains(msg, "no such file or directory"):
				code = 127
			case strings.Contains(msg, "permission denied"):
				code = 126
			}
			return code, &RunError{Code: code, Msg: msg}
		}
		return ee.ExitCode(), nil
	}
	if err != nil {
		return -1, fmt.Errorf("runc run %s: %w", id, err)
	}
	return 0, nil
}

// runcError returns the last error runc logged, if any.
func runcError(logPath string) string {
	b, err := os.ReadFile(logPath)
	if err != nil {
		return ""
	}
	last := ""
	for _, line := range strings.Split(string(b), "\n") {
		var e struct {
			Level string `json:"level"`
			Msg   string `json:"msg"`
		}
		if json.Unmarshal([]byte(line), &e) == nil && e.Level == "error" {
			last = e.Msg
		}
	}
	return last
}

// State returns runc's status of a container ("running", "stopped", ...), or "" if
// runc does not know it.
func (r *Runtime) State(ctx context.Context, id string) (string, int) {
	out, err := exec.CommandContext(ctx, r.binary(), "--root", r.Root, "state", id).Output()
	if err != nil {
		return "", 0
	}
	var st struct {
		Status string `json:"status"`
		Pid    int    `json:"pid"`
	}
	if json.Unmarshal(out, &st) != nil {
		return "", 0
	}
	return st.Status, st.Pid
}

// Delete removes runc's state of a container, killing it first if force.
func (r *Runtime) Delete(ctx context.Context, id string, force bool) error {
	args := []string{"--root", r.Root, "delete"}
	if force {
		args = append(args, "--force")
	}
	out, err := exec.CommandContext(ctx, r.binary(), append(args, id)...).CombinedOutput()
	if err != nil && !strings.Contains(string(out), "does not exist") {
		return fmt.Errorf("runc delete %s: %w: %s", id, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Pause freezes every process of a running container (runc pause); Resume thaws
// them. A commit of a shared root pauses its container so that it reads one
// moment of the container's changes, as docker commit does.
func (r *Runtime) Pause(ctx context.Context, id string) error { return r.simple(ctx, "pause", id) }

// Resume thaws a container Pause froze.
func (r *Runtime) Resume(ctx context.Context, id string) error { return r.simple(ctx, "resume", id) }

func (r *Runtime) simple(ctx context.Context, verb, id string) error {
	out, err := exec.CommandContext(ctx, r.binary(), "--root", r.Root, verb, id).CombinedOutput()
	if err != nil {
		return fmt.Errorf("runc %s %s: %w: %s", verb, id, err, strings.TrimSpace(string(out)))
	}
	return nil
}
