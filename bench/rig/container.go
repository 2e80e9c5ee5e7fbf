package rig

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// RunSpec describes a container for Starter.Start.
type RunSpec struct {
	// Name is unique on the node while the container exists.
	Name string
	// Args is the command; it replaces the image's (Docker semantics).
	Args []string
	// Stdin, when not nil, is the container's standard input; nil gives none.
	Stdin io.Reader
	// Stdout and Stderr receive the container's output (nil discards it), and
	// Stderr the run command's own errors. Given the same writer, the two are one
	// stream: in the order the container wrote them where they share one pipe;
	// where they come through two channels (ctr's FIFOs, the containerd path's
	// files), each keeps its order, but a chunk of one may come before an
	// earlier chunk of the other.
	Stdout, Stderr io.Writer
}

// ContainerStats is what a container did to the image, where the system knows it.
type ContainerStats struct {
	// ReadBytes is how much of the image the container read (-1: unknown).
	ReadBytes int64 `json:"read_bytes"`
	// FetchedBytes is what its reads made the node fetch (-1: unknown).
	FetchedBytes int64 `json:"fetched_bytes"`
	// TracesReplayed is how many start-up traces the node replayed since it
	// started (nil: unknown): on a node made for one sample, whether the start
	// was a first run (0) or a traced one.
	TracesReplayed *int64 `json:"traces_replayed,omitempty"`
}

// Starter is a System that can start a container in the background, so a harness
// can watch it become ready (a log line, a port) and stop it.
type Starter interface {
	Start(ctx context.Context, ref string, spec RunSpec) (*Container, error)
}

// Container is a container running in the background: the command that runs it in
// the foreground (`slacker run`, `ctr run`, `runc run`), started by StartContainer,
// and what its system does to it (ContainerOps).
type Container struct {
	Name string
	// Started is when the start began: StartContainer sets it just before the run
	// command starts; a caller that prepared the container itself (made its root,
	// its bundle) may set it earlier, so that the preparation counts.
	Started time.Time

	cmd     *exec.Cmd
	done    chan struct{}
	code    int
	err     error
	stderr  *Tail
	ops     ContainerOps
	removed sync.Once
}

// ContainerOps are what a system does to a container it started.
type ContainerOps struct {
	// PID is the host PID of the container's first process; an error (or 0) while
	// the runtime does not know it yet.
	PID func(ctx context.Context) (int, error)
	// Kill sends the container SIGKILL.
	Kill func(ctx context.Context) error
	// Remove deletes the stopped container and returns its statistics (-1 where
	// unknown).
	Remove func(ctx context.Context) (ContainerStats, error)
	// Output, when set, delivers the container's output, which does not come
	// through the run command's (the run command's own output still goes where
	// the spec says): it is called before the run command starts, with the writers
	// of the container's stdout and stderr, and returns finish, which is called
	// once the run command has exited and returns when all the output has been
	// written. Done is closed after that. Nil: the output is the run command's.
	Output func(stdout, stderr io.Writer) (finish func() error, err error)
}

// StartContainer starts cmd, the command that runs the container in the
// foreground, with spec's standard input and output, in a process group of its own,
// and returns the container watching it.
func StartContainer(cmd *exec.Cmd, spec RunSpec, ops ContainerOps) (*Container, error) {
	c := &Container{Name: spec.Name, cmd: cmd, done: make(chan struct{}), stderr: NewTail(8 << 10), ops: ops}
	cmd.Stdin = spec.Stdin
	// The tail is written first, so a failure report made as soon as a reader of
	// the output saw something includes it.
	if spec.Stdout != nil && sameWriter(spec.Stdout, spec.Stderr) {
		cmd.Stdout = io.MultiWriter(c.stderr, spec.Stdout)
		cmd.Stderr = cmd.Stdout
	} else {
		cmd.Stdout = orDiscard(spec.Stdout)
		cmd.Stderr = io.MultiWriter(c.stderr, orDiscard(spec.Stderr))
	}
	var finishOutput func() error
	if ops.Output != nil {
		// The container's output and the run command's reach the same writers
		// from different goroutines: one at a time.
		mu := &sync.Mutex{}
		cmd.Stdout, cmd.Stderr = &lockedWriter{mu: mu, w: cmd.Stdout}, &lockedWriter{mu: mu, w: cmd.Stderr}
		var err error
		if finishOutput, err = ops.Output(cmd.Stdout, cmd.Stderr); err != nil {
			return nil, fmt.Errorf("output of %s: %w", spec.Name, err)
		}
	}
	// Its own process group: a ^C of the harness reaches the harness, which stops the
	// container itself, rather than killing the CLI in the middle of its clean-up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.Started = time.Now()
	if err := cmd.Start(); err != nil {
		if finishOutput != nil {
			finishOutput()
		}
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	go func() {
		err := cmd.Wait()
		if finishOutput != nil {
			if ferr := finishOutput(); ferr != nil {
				fmt.Fprintf(c.stderr, "\nharness: the output of %s: %v\n", spec.Name, ferr)
				if err == nil {
					err = fmt.Errorf("the output of %s: %w", spec.Name, ferr)
				}
			}
		}
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee):
			c.code = ee.ExitCode()
			if st, ok := ee.Sys().(syscall.WaitStatus); ok && st.Signaled() {
				c.code = 128 + int(st.Signal())
			}
		case err != nil:
			c.code, c.err = -1, err
		}
		close(c.done)
	}()
	return c, nil
}

// sameWriter reports whether a and b are one writer (false for writers that
// cannot be compared).
func sameWriter(a, b io.Writer) (same bool) {
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a == b
}

// lockedWriter is a writer that takes a lock, shared with others, for each write.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// Done is closed when the run command has exited.
func (c *Container) Done() <-chan struct{} { return c.done }

// ExitCode is the run command's exit status (the container's, or the CLI's own
// failure code), valid once Done is closed; 128+N after signal N.
func (c *Container) ExitCode() int { return c.code }

// Err is an error waiting for the run command (not its exit status).
func (c *Container) Err() error { return c.err }

// StderrTail is the end of the run command's standard error (of both streams when
// the RunSpec gave them one writer), for failure reports.
func (c *Container) StderrTail() string { return c.stderr.String() }

// PID returns the host PID of the container's first process, waiting until the
// runtime knows it; an error if the container exits first or ctx ends.
func (c *Container) PID(ctx context.Context) (int, error) {
	for {
		if pid, err := c.ops.PID(ctx); err == nil && pid > 0 {
			return pid, nil
		}
		select {
		case <-c.done:
			return 0, fmt.Errorf("container %s exited (status %d) before its process was known", c.Name, c.code)
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Stop kills the container (SIGKILL) if it still runs and waits for the run
// command to exit (at most 60 s, then the command itself is killed).
func (c *Container) Stop(ctx context.Context) error {
	select {
	case <-c.done:
		return nil
	default:
	}
	kerr := c.ops.Kill(ctx)
	select {
	case <-c.done:
		return nil
	case <-time.After(60 * time.Second):
		c.cmd.Process.Kill()
		<-c.done
		return fmt.Errorf("stop container %s: the run command did not exit after the kill (%v)", c.Name, kerr)
	}
}

// Remove stops the container if needed, deletes it and returns its statistics.
// It is safe to call more than once (later calls do nothing).
func (c *Container) Remove(ctx context.Context) (ContainerStats, error) {
	st := ContainerStats{ReadBytes: -1, FetchedBytes: -1}
	var err error
	c.removed.Do(func() {
		if serr := c.Stop(ctx); serr != nil {
			err = serr
		}
		var rerr error
		st, rerr = c.ops.Remove(ctx)
		err = errors.Join(err, rerr)
	})
	return st, err
}

// Netns is the path of the network namespace of the container's first process,
// waiting until the runtime knows it (see PID).
func (c *Container) Netns(ctx context.Context) (string, error) {
	pid, err := c.PID(ctx)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("/proc/%d/ns/net", pid), nil
}

// Tail keeps the last bytes written to it, for failure reports. It is safe for
// concurrent use.
type Tail struct {
	mu  sync.Mutex
	max int
	b   []byte
}

// NewTail returns a Tail keeping the last max bytes.
func NewTail(max int) *Tail { return &Tail{max: max} }

func (t *Tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append([]byte(nil), t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

// String is what was kept, without leading and trailing white space.
func (t *Tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.b))
}

// LastLines is the last n lines of s on one line, joined by " | ".
func LastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
