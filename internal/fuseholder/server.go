package fuseholder

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Session is what the holder keeps for one FUSE connection.
type Session struct {
	// FD is the connection's /dev/fuse descriptor. Hold sends a duplicate and
	// leaves FD to the caller; Take returns a new duplicate the caller owns.
	FD *os.File
	// Init is the kernel's FUSE INIT request as the first server read it. The
	// kernel sends it once per connection; a new server needs it. Opaque here.
	Init []byte
	// Mountpoint is where the connection is mounted (absolute, valid UTF-8).
	Mountpoint string
}

// Options configure Serve.
type Options struct {
	// Timeout is how long a held connection waits for a new owner after its
	// owner went away; then the holder ends the connection and Serve returns.
	// Timeout <= 0 waits forever.
	Timeout time.Duration
	Logger  *slog.Logger

	// Tests point these elsewhere; "" is the system's.
	mountinfo string // default /proc/self/mountinfo
	fusectl   string // default /sys/fs/fuse/connections
}

// ErrAlreadyRunning is returned by Serve when another holder runs on the socket.
var ErrAlreadyRunning = errors.New("another fuse holder is running")

// replyTimeout bounds the write of one reply: a client that does not read its
// replies is dropped instead of stalling the holder.
const replyTimeout = 5 * time.Second

// Serve runs the holder on the unix socket socketPath until it has nothing to hold
// any more or ctx ends. It returns nil once the session was released (Release) or
// ended (its owner went away and no Take came within opts.Timeout), and ctx's
// error if ctx ended first; on return its descriptors are closed and its socket
// file removed. It fails with ErrAlreadyRunning if another holder runs on
// socketPath; a stale socket file (nothing answers) is replaced.
//
// Serve waits for its first Hold without a bound. It never opens anything on the
// FUSE mount; the process running it should have "/" as its working directory
// (Start does that).
func Serve(ctx context.Context, socketPath string, opts Options) error {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.mountinfo == "" {
		opts.mountinfo = defaultMountinfo
	}
	if opts.fusectl == "" {
		opts.fusectl = defaultFusectl
	}
	unlock, err := lockSocket(socketPath)
	if err != nil {
		return err
	}
	defer unlock()
	ln, bound, err := listen(socketPath)
	if err != nil {
		return err
	}
	defer removeSocket(socketPath, bound)

	h := &holder{
		log:   log,
		opts:  opts,
		peers: map[*peer]struct{}{},
		done:  make(chan struct{}),
	}
	h.wg.Add(1)
	go h.accept(ln)
	timeout := "none"
	if opts.Timeout > 0 {
		timeout = opts.Timeout.String()
	}
	log.Info("fuse-holder-started", "socket", socketPath, "pid", os.Getpid(), "timeout", timeout)

	var ret error
	select {
	case <-h.done:
	case <-ctx.Done():
		ret = ctx.Err()
	}
	h.mu.Lock()
	h.stopping = true
	h.stopTimerLocked()
	peers := make([]*peer, 0, len(h.peers))
	for p := range h.peers {
		peers = append(peers, p)
	}
	sess, ownerConnected := h.sess, h.owner != nil
	h.sess, h.owner = nil, nil
	h.mu.Unlock()

	ln.Close()
	for _, p := range peers {
		p.conn.Close()
	}
	h.wg.Wait()
	if sess != nil {
		// ctx ended with a session held: closing our descriptor ends the
		// connection unless its owner still holds one.
		log.Warn("fuse-holder-stopped", "reason", ctx.Err(), "mountpoint", sess.mountpoint,
			"owner_connected", ownerConnected)
		sess.close()
	} else {
		log.Info("fuse-holder-stopped", "reason", h.reason(ret))
	}
	return ret
}

// holder is Serve's state.
type holder struct {
	log  *slog.Logger
	opts Options
	wg   sync.WaitGroup // the accept loop and one goroutine per peer

	mu          sync.Mutex
	peers       map[*peer]struct{}
	nextID      uint64
	sess        *held
	owner       *peer     // the peer that last did hold or take; nil once gone
	ownerGoneAt time.Time // when owner went away, while sess is held
	timer       *time.Timer
	timerGen    uint64 // invalidates a timer that fires after it was stopped
	stopping    bool
	ended       string // why Serve returns: "released", "ended"

	done     chan struct{}
	doneOnce sync.Once
}

func (h *holder) reason(ret error) string {
	if ret != nil {
		return ret.Error()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ended
}

// finish makes Serve return.
func (h *holder) finish(why string) {
	h.mu.Lock()
	if h.ended == "" {
		h.ended = why
	}
	h.mu.Unlock()
	h.doneOnce.Do(func() { close(h.done) })
}

// held is the session the holder keeps.
type held struct {
	fd         *os.File
	init       []byte
	mountpoint string
	conn       connection
}

func (s *held) close() {
	s.fd.Close()
	s.conn.close()
}

// peer is one client connection.
type peer struct {
	id   uint64
	pid  int // the client's process, from SO_PEERCRED; 0 if unknown
	conn *net.UnixConn
}

func (h *holder) accept(ln *net.UnixListener) {
	defer h.wg.Done()
	for {
		conn, err := ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of descriptors or memory: wait rather than spin.
			h.log.Warn("fuse-holder-accept-failed", "err", err)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		p := &peer{conn: conn, pid: peerPID(conn)}
		h.mu.Lock()
		if h.stopping {
			h.mu.Unlock()
			conn.Close()
			continue
		}
		h.nextID++
		p.id = h.nextID
		h.peers[p] = struct{}{}
		h.wg.Add(1)
		h.mu.Unlock()
		h.log.Debug("fuse-client-connected", "client", p.id, "client_pid", p.pid)
		go h.serve(p)
	}
}

// serve answers one peer's requests, one at a time, until it goes away.
func (h *holder) serve(p *peer) {
	defer h.wg.Done()
	defer p.conn.Close()
	rcv := newReceiver(p.conn)
	for {
		b, files, err := rcv.recv()
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !errors.Is(err, errMalformed) {
				h.log.Warn("fuse-client-read-failed", "client", p.id, "client_pid", p.pid, "err", err)
			}
			if errors.Is(err, errMalformed) {
				// The message was lost whole (too long, too many descriptors): say
				// so, the connection stays usable.
				if h.reply(p, reply{Version: ProtocolVersion, Error: err.Error()}, nil) == nil {
					continue
				}
			}
			h.gone(p)
			return
		}
		rep, out, after := h.handle(p, b, files)
		err = h.reply(p, rep, out)
		if out != nil {
			out.Close()
		}
		if after != nil {
			after()
		}
		if err != nil {
			h.log.Warn("fuse-client-reply-failed", "client", p.id, "client_pid", p.pid, "err", err)
			h.gone(p)
			return
		}
	}
}

func (h *holder) reply(p *peer, rep reply, f *os.File) error {
	b, err := encode(rep)
	if err != nil {
		return err
	}
	p.conn.SetWriteDeadline(time.Now().Add(replyTimeout))
	return send(p.conn, b, f)
}

// handle answers one request. It returns the reply, a descriptor to send with it
// (closed after sending) and what to do once the reply is sent.
func (h *holder) handle(p *peer, b []byte, files []*os.File) (reply, *os.File, func()) {
	fail := func(err error) (reply, *os.File, func()) {
		closeAll(files)
		return reply{Version: ProtocolVersion, Error: err.Error()}, nil, nil
	}
	req, err := decodeRequest(b)
	if err != nil {
		return fail(err)
	}
	want := 0
	if req.Op == opHold {
		want = 1
	}
	if len(files) != want {
		return fail(fmt.Errorf("%w: op %q carries %d descriptors, want %d", errMalformed, req.Op, len(files), want))
	}
	ok := reply{Version: ProtocolVersion}
	switch req.Op {
	case opHello:
		ok.PID = os.Getpid()
		return ok, nil, nil
	case opHold:
		h.hold(p, req, files[0])
		return ok, nil, nil
	case opTake:
		return h.take(p)
	case opRelease:
		if err := h.release(p); err != nil {
			return fail(err)
		}
		return ok, nil, func() { h.finish("released") }
	}
	return fail(fmt.Errorf("%w: unknown op %q", errMalformed, req.Op)) // decodeRequest let it through
}

func (h *holder) hold(p *peer, req request, fd *os.File) {
	// Outside the lock: reads mountinfo, opens a fusectl file; neither can block
	// on the FUSE mount.
	s := &held{fd: fd, init: req.Init, mountpoint: req.Mountpoint,
		conn: findConnection(h.opts.mountinfo, h.opts.fusectl, req.Mountpoint)}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopping {
		s.close()
		return
	}
	old := h.sess
	h.sess, h.owner = s, p
	h.stopTimerLocked()
	if old != nil {
		old.close()
	}
	attrs := []any{"mountpoint", s.mountpoint, "init_bytes", len(s.init), "owner", p.id, "owner_pid", p.pid,
		"replaced", old != nil, "fusectl", s.conn.Name}
	if s.conn.Abort == nil {
		attrs = append(attrs, "fusectl_unavailable", s.conn.Why)
	}
	h.log.Info("fuse-session-held", attrs...)
}

func (h *holder) take(p *peer) (reply, *os.File, func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sess == nil {
		h.log.Info("fuse-session-take-empty", "client", p.id, "client_pid", p.pid)
		return reply{Version: ProtocolVersion}, nil, nil
	}
	if h.owner != nil && h.owner != p {
		// Two servers of one connection would split its requests between two
		// processes that each believe they alone write the volumes.
		err := fmt.Errorf("process %d still serves the FUSE connection of %s: stop it first", h.owner.pid, h.sess.mountpoint)
		h.log.Warn("fuse-session-take-refused", "client", p.id, "client_pid", p.pid, "owner_pid", h.owner.pid)
		return reply{Version: ProtocolVersion, Error: err.Error()}, nil, nil
	}
	dup, err := dupFile(h.sess.fd)
	if err != nil {
		err = fmt.Errorf("duplicate the held descriptor: %w", err)
		h.log.Warn("fuse-session-take-failed", "client", p.id, "client_pid", p.pid, "err", err)
		return reply{Version: ProtocolVersion, Error: err.Error()}, nil, nil
	}
	attrs := []any{"mountpoint", h.sess.mountpoint, "owner", p.id, "owner_pid", p.pid}
	switch {
	case h.owner == nil:
		attrs = append(attrs, "previous_owner", "gone", "waited", time.Since(h.ownerGoneAt).Round(time.Millisecond))
	default:
		attrs = append(attrs, "previous_owner", "self")
	}
	h.owner = p
	h.stopTimerLocked()
	h.log.Info("fuse-session-taken", attrs...)
	return reply{Version: ProtocolVersion, Held: true, Init: h.sess.init, Mountpoint: h.sess.mountpoint}, dup, nil
}

func (h *holder) release(p *peer) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sess == nil {
		h.log.Info("fuse-session-released", "held", false, "client", p.id, "client_pid", p.pid)
		return nil
	}
	if h.owner != p {
		return errors.New("not the owner: only the client that last did hold or take may release the session")
	}
	s := h.sess
	h.sess, h.owner = nil, nil
	h.stopTimerLocked()
	s.close()
	h.log.Info("fuse-session-released", "held", true, "mountpoint", s.mountpoint, "owner_pid", p.pid)
	return nil
}

// gone forgets a peer whose connection closed. If it owned the session, the
// wait for a new owner starts.
func (h *holder) gone(p *peer) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.peers, p)
	h.log.Debug("fuse-client-disconnected", "client", p.id, "client_pid", p.pid)
	if h.stopping || h.owner != p || h.sess == nil {
		return
	}
	h.owner = nil
	h.ownerGoneAt = time.Now()
	if h.opts.Timeout <= 0 {
		h.log.Warn("fuse-owner-gone", "mountpoint", h.sess.mountpoint, "owner_pid", p.pid, "timeout", "none")
		return
	}
	h.timerGen++
	gen := h.timerGen
	h.timer = time.AfterFunc(h.opts.Timeout, func() { h.expire(gen) })
	h.log.Warn("fuse-owner-gone", "mountpoint", h.sess.mountpoint, "owner_pid", p.pid, "timeout", h.opts.Timeout)
}

func (h *holder) stopTimerLocked() {
	if h.timer != nil {
		h.timer.Stop()
		h.timer = nil
	}
	h.timerGen++
}

// expire ends the connection nobody took within the timeout.
func (h *holder) expire(gen uint64) {
	h.mu.Lock()
	if gen != h.timerGen || h.stopping || h.sess == nil || h.owner != nil {
		h.mu.Unlock()
		return
	}
	s := h.sess
	h.sess, h.timer = nil, nil
	// Abort first: it ends the connection even if a descriptor of it leaked
	// elsewhere; closing ours ends it anyway when ours is the last.
	aborted := "no"
	if err := s.conn.abort(); err != nil {
		h.log.Warn("fuse-connection-abort-failed", "mountpoint", s.mountpoint, "fusectl", s.conn.Name, "err", err)
	} else if s.conn.Abort != nil {
		aborted = "yes"
	}
	s.close()
	h.log.Warn("fuse-connection-ended", "reason", "timeout", "mountpoint", s.mountpoint,
		"waited", time.Since(h.ownerGoneAt).Round(time.Millisecond), "fusectl", s.conn.Name, "fusectl_aborted", aborted)
	h.mu.Unlock()
	h.finish("ended")
}

// dupFile returns a close-on-exec duplicate of f's descriptor.
func dupFile(f *os.File) (*os.File, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	var nfd int
	var derr error
	if err := rc.Control(func(fd uintptr) { nfd, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 3) }); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, derr
	}
	return os.NewFile(uintptr(nfd), f.Name()), nil
}

// peerPID is the process at the other end of conn, 0 if unknown.
func peerPID(conn *net.UnixConn) int {
	rc, err := conn.SyscallConn()
	if err != nil {
		return 0
	}
	var pid int
	rc.Control(func(fd uintptr) {
		if cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
			pid = int(cred.Pid)
		}
	})
	return pid
}

// lockSocket takes socketPath+".lock" (flock), so that two holders starting at
// once cannot both replace the socket file; the lock file stays.
func lockSocket(socketPath string) (func(), error) {
	path := socketPath + ".lock"
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("fuse holder lock: %w", err)
	}
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("fuse holder lock: %w", err)
	}
	var lerr error
	rc.Control(func(fd uintptr) { lerr = unix.Flock(int(fd), unix.LOCK_EX|unix.LOCK_NB) })
	if lerr != nil {
		f.Close()
		if errors.Is(lerr, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w on %s (it holds %s)", ErrAlreadyRunning, socketPath, path)
		}
		return nil, fmt.Errorf("fuse holder lock %s: %w", path, lerr)
	}
	return func() { f.Close() }, nil
}

// listen creates the socket file (mode 0600) and listens on it. It is bound,
// made 0600 and only then listened on: nobody can connect before its mode is
// set. It returns the socket file's identity, for removeSocket.
func listen(path string) (*net.UnixListener, os.FileInfo, error) {
	if len(path) >= len(unix.RawSockaddrUnix{}.Path) {
		return nil, nil, fmt.Errorf("fuse holder socket path %s: longer than %d bytes", path, len(unix.RawSockaddrUnix{}.Path)-1)
	}
	if err := clearStale(path); err != nil {
		return nil, nil, err
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("fuse holder socket: %w", err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close() // FileListener keeps a duplicate
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		return nil, nil, fmt.Errorf("bind the fuse holder socket %s: %w", path, err)
	}
	fail := func(err error) (*net.UnixListener, os.FileInfo, error) {
		os.Remove(path)
		return nil, nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		return fail(fmt.Errorf("fuse holder socket: %w", err))
	}
	bound, err := os.Lstat(path)
	if err != nil {
		return fail(fmt.Errorf("fuse holder socket: %w", err))
	}
	if err := unix.Listen(fd, 16); err != nil {
		return fail(fmt.Errorf("listen on the fuse holder socket %s: %w", path, err))
	}
	l, err := net.FileListener(f)
	if err != nil {
		return fail(fmt.Errorf("fuse holder socket %s: %w", path, err))
	}
	ln, ok := l.(*net.UnixListener)
	if !ok {
		l.Close()
		return fail(fmt.Errorf("fuse holder socket %s: a %T, not a unix listener", path, l))
	}
	return ln, bound, nil
}

// clearStale removes a socket file nothing answers on. It fails if another
// holder answers, or if path is something else than a socket.
func clearStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("fuse holder socket: %w", err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("fuse holder socket %s exists and is not a socket (%s); not replacing it", path, fi.Mode().Type())
	}
	c, err := net.DialTimeout("unixpacket", path, time.Second)
	if err == nil {
		c.Close()
		return fmt.Errorf("%w: it answers on %s", ErrAlreadyRunning, path)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("fuse holder socket %s exists and could not be probed (not replacing it): %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove the stale fuse holder socket: %w", err)
	}
	return nil
}

// removeSocket removes the socket file if it is still the one Serve bound.
func removeSocket(path string, bound os.FileInfo) {
	if fi, err := os.Lstat(path); err == nil && os.SameFile(fi, bound) {
		os.Remove(path)
	}
}
