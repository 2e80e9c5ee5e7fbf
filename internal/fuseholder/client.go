package fuseholder

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Client is a connection to a holder. Its methods are safe for concurrent use;
// requests go one at a time.
//
// The connection is how the holder knows its owner lives: the owner (the client
// that last did Hold or Take) keeps its Client open for as long as it serves the
// connection. Closing it, or the process dying, counts as the owner gone.
type Client struct {
	path string
	conn *net.UnixConn
	rcv  *receiver
	pid  int

	mu     sync.Mutex
	broken error // set when a request failed midway: replies may be out of step
}

// Dial connects to the holder listening on socketPath and checks that it speaks
// this protocol.
func Dial(ctx context.Context, socketPath string) (*Client, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unixpacket", socketPath)
	if err != nil {
		return nil, fmt.Errorf("connect to the fuse holder: %w", err)
	}
	conn, ok := nc.(*net.UnixConn)
	if !ok {
		nc.Close()
		return nil, fmt.Errorf("connect to the fuse holder at %s: a %T, not a unix connection", socketPath, nc)
	}
	c := &Client{path: socketPath, conn: conn, rcv: newReceiver(conn)}
	rep, _, err := c.roundTrip(ctx, request{Op: opHello}, nil)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("fuse holder at %s: hello: %w", socketPath, err)
	}
	c.pid = rep.PID
	return c, nil
}

// PID is the holder's process ID, as it said when the client connected.
func (c *Client) PID() int { return c.pid }

// Hold hands s to the holder, which keeps a duplicate of s.FD, s.Init and
// s.Mountpoint; s.FD stays the caller's. It replaces a session held before (the
// holder closes that one's descriptor). This client becomes the owner.
func (c *Client) Hold(ctx context.Context, s Session) error {
	if s.FD == nil {
		return errors.New("fuse holder: hold: a session without its descriptor")
	}
	if err := checkSession(s.Init, s.Mountpoint); err != nil {
		return fmt.Errorf("fuse holder: hold: %w", err)
	}
	_, _, err := c.roundTrip(ctx, request{Op: opHold, Init: s.Init, Mountpoint: s.Mountpoint}, s.FD)
	if err != nil {
		return fmt.Errorf("fuse holder: hold: %w", err)
	}
	return nil
}

// Take returns the held session, its FD a new duplicate the caller owns, or nil
// and no error if the holder holds none. The holder keeps its own duplicate; this
// client becomes the owner (which stops the wait for one, if the previous owner
// went away).
func (c *Client) Take(ctx context.Context) (*Session, error) {
	rep, f, err := c.roundTrip(ctx, request{Op: opTake}, nil)
	if err != nil {
		return nil, fmt.Errorf("fuse holder: take: %w", err)
	}
	if !rep.Held {
		return nil, nil
	}
	return &Session{FD: f, Init: rep.Init, Mountpoint: rep.Mountpoint}, nil
}

// Release is the owner's normal stop: the holder closes its descriptor, forgets
// the session, and exits (Serve returns). It fails if this client is not the
// owner. With nothing held, the holder exits too.
func (c *Client) Release(ctx context.Context) error {
	if _, _, err := c.roundTrip(ctx, request{Op: opRelease}, nil); err != nil {
		return fmt.Errorf("fuse holder: release: %w", err)
	}
	return nil
}

// Close disconnects. If this client is the owner, the holder takes it as the
// owner gone: it keeps the session for its timeout, waiting for a Take.
func (c *Client) Close() error {
	return c.conn.Close()
}

// longAgo is a deadline in the past: it interrupts I/O in progress.
var longAgo = time.Unix(1, 0)

// roundTrip sends one request (with f's descriptor if f is not nil) and reads its
// reply. An error reply becomes an error. A take reply's descriptor is returned.
func (c *Client) roundTrip(ctx context.Context, req request, f *os.File) (reply, *os.File, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.broken != nil {
		return reply{}, nil, fmt.Errorf("connection unusable after an earlier failure (%v): dial again", c.broken)
	}
	req.Version = ProtocolVersion
	b, err := encode(req)
	if err != nil {
		return reply{}, nil, err
	}
	if err := ctx.Err(); err != nil {
		return reply{}, nil, err
	}
	deadline, _ := ctx.Deadline()
	c.conn.SetDeadline(deadline)
	interrupted := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		c.conn.SetDeadline(longAgo)
		close(interrupted)
	})
	defer func() {
		if !stop() {
			<-interrupted // the deadline is set before the next request sets its own
		}
	}()
	ioFailed := func(err error) (reply, *os.File, error) {
		c.broken = err
		if cerr := ctx.Err(); cerr != nil {
			err = fmt.Errorf("%w (%v)", cerr, err)
		} else if _, ok := ctx.Deadline(); ok && errors.Is(err, os.ErrDeadlineExceeded) {
			// The socket's deadline (ctx's) passed before ctx's own timer fired.
			err = fmt.Errorf("%w (%v)", context.DeadlineExceeded, err)
		}
		return reply{}, nil, err
	}
	if err := send(c.conn, b, f); err != nil {
		return ioFailed(err)
	}
	msg, files, err := c.rcv.recv()
	if err != nil {
		return ioFailed(err)
	}
	rep, err := decodeReply(msg)
	if err != nil {
		closeAll(files)
		return ioFailed(err)
	}
	if rep.Error != "" {
		closeAll(files)
		return reply{}, nil, errors.New(rep.Error)
	}
	want := 0
	if rep.Held {
		want = 1
	}
	if req.Op != opTake && rep.Held {
		closeAll(files)
		return ioFailed(fmt.Errorf("%w: a session in the reply to %q", errMalformed, req.Op))
	}
	if len(files) != want {
		closeAll(files)
		return ioFailed(fmt.Errorf("%w: %d descriptors with the reply, want %d", errMalformed, len(files), want))
	}
	if want == 1 {
		return rep, files[0], nil
	}
	return rep, nil, nil
}

// startWait bounds how long Start waits for the holder it started to answer.
const startWait = 5 * time.Second

// Start returns a client of the holder at socketPath, starting cmd first if none
// answers there. cmd (which runs Serve on socketPath, typically `slackerd
// fuse-holder --socket PATH --timeout DUR`) is started in a session of its own,
// in "/", with stdin /dev/null, stdout and stderr appended to the file logPath,
// and no other descriptor: Start marks every descriptor of this process
// close-on-exec first, because one the holder inherited by mistake would stay
// open as long as it runs (one on the FUSE mount would hang it). Start sets
// cmd's Dir, Stdin, Stdout, Stderr and SysProcAttr.Setsid; cmd must have no
// ExtraFiles and no Pdeathsig (the holder outlives its starter).
//
// Start waits for the new holder to answer, at most 5 s (or until ctx's
// deadline), and fails naming logPath if it exits or does not answer in time; it
// kills and reaps a holder that did not answer. Once Start returned a client,
// cmd is the caller's: the holder runs on, and the caller may Wait for it (or
// leave it: it outlives the caller by design). cmd.Process is nil if a holder
// already answered. socketPath must be absolute (the holder runs in "/").
func Start(ctx context.Context, socketPath string, cmd *exec.Cmd, logPath string) (*Client, error) {
	if !filepath.IsAbs(socketPath) {
		// The holder runs in "/": a relative path would name another file there.
		return nil, fmt.Errorf("start the fuse holder: socket path %q is not absolute", socketPath)
	}
	c, err := Dial(ctx, socketPath)
	if err == nil {
		return c, nil
	}
	if !nothingAnswers(err) {
		return nil, err
	}
	if cmd.Process != nil {
		return nil, errors.New("start the fuse holder: the command was started already")
	}
	if len(cmd.ExtraFiles) > 0 {
		return nil, errors.New("start the fuse holder: the command has ExtraFiles; the holder must inherit no descriptor")
	}
	attr := &syscall.SysProcAttr{}
	if cmd.SysProcAttr != nil {
		cp := *cmd.SysProcAttr
		attr = &cp
	}
	if attr.Pdeathsig != 0 {
		return nil, errors.New("start the fuse holder: the command has a parent-death signal; the holder must outlive its starter")
	}
	attr.Setsid, attr.Setpgid, attr.Setctty, attr.Foreground = true, false, false, false
	logFile, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("start the fuse holder: its log: %w", err)
	}
	defer logFile.Close() // the child has its own
	cmd.SysProcAttr = attr
	cmd.Dir = "/"
	cmd.Stdin = nil // os/exec opens /dev/null
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cloexecAll(); err != nil {
		return nil, fmt.Errorf("start the fuse holder: %w", err)
	}
	started := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the fuse holder %s: %w (its log: %s)", cmd.Path, err, logPath)
	}
	pid := cmd.Process.Pid
	deadline := started.Add(startWait)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	kill := func() {
		cmd.Process.Kill()
		cmd.Wait()
	}
	for {
		actx, cancel := context.WithDeadline(ctx, deadline)
		c, err := Dial(actx, socketPath)
		cancel()
		if err == nil {
			return c, nil
		}
		if exited(pid) {
			cmd.Wait()
			return nil, fmt.Errorf("the fuse holder %s (pid %d) exited (%v) before answering on %s; see its log %s",
				cmd.Path, pid, cmd.ProcessState, socketPath, logPath)
		}
		if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			kill()
			return nil, fmt.Errorf("start the fuse holder: %w (killed pid %d; its log: %s)", ctx.Err(), pid, logPath)
		}
		if !time.Now().Before(deadline) {
			kill()
			return nil, fmt.Errorf("the fuse holder %s (pid %d) did not answer on %s within %v; killed it; see its log %s",
				cmd.Path, pid, socketPath, deadline.Sub(started).Round(time.Millisecond), logPath)
		}
		if !nothingAnswers(err) {
			kill()
			return nil, fmt.Errorf("start the fuse holder: %w (killed pid %d; its log: %s)", err, pid, logPath)
		}
		time.Sleep(min(20*time.Millisecond, time.Until(deadline)))
	}
}

// nothingAnswers reports whether a Dial failed because no holder listens.
func nothingAnswers(err error) bool {
	return errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED)
}

// exited reports whether the child pid has exited, without reaping it (WNOWAIT):
// its Wait stays the caller's.
func exited(pid int) bool {
	var info unix.Siginfo
	err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	return err == nil && info.Signo == int32(unix.SIGCHLD)
}

// cloexecAll marks every descriptor of this process from 3 on close-on-exec.
// Go opens its own so; this catches those inherited or opened by C code.
func cloexecAll() error {
	err := unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC)
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("mark descriptors close-on-exec: %w", err)
	}
	// Before Linux 5.11: one at a time.
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return fmt.Errorf("mark descriptors close-on-exec: %w", err)
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("mark descriptors close-on-exec: %w", err)
	}
	for _, n := range names {
		if fd, err := strconv.Atoi(n); err == nil && fd >= 3 {
			unix.CloseOnExec(fd)
		}
	}
	return nil
}
