package fuseholder

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// testInit looks like a FUSE INIT request: binary, with zeros, quotes and bytes
// that are not UTF-8, to be returned byte for byte.
var testInit = append([]byte("\x68\x00\x00\x00\x1a\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00\"\\\xff\xfe"), bytes.Repeat([]byte{0}, 84)...)

const testMountpoint = "/run/slacker/fuse mount/été"

// TestHoldTake hands a session in from one client and takes it from another: the
// descriptor taken is a new one of the same open pipe, and the INIT bytes and the
// mountpoint come back byte for byte.
func TestHoldTake(t *testing.T) {
	ctx := testCtx(t)
	h := startHolder(t, Options{Timeout: time.Minute})
	r, w := pipe(t)
	a := dial(t, h.path)
	if a.PID() != os.Getpid() {
		t.Errorf("holder pid %d, want %d (this process)", a.PID(), os.Getpid())
	}
	if err := a.Hold(ctx, Session{FD: w, Init: testInit, Mountpoint: testMountpoint}); err != nil {
		t.Fatal(err)
	}
	held := h.log.wait(t, "fuse-session-held", 1)
	if held.attrs["mountpoint"] != testMountpoint || held.attrs["fusectl_unavailable"] == "" {
		t.Errorf("held log: %v", held.attrs)
	}
	// Hold left the caller's descriptor open and working.
	writeThrough(t, w, r, "still mine")

	// One server at a time: no Take while the owner is connected.
	b := dial(t, h.path)
	if _, err := b.Take(ctx); err == nil || !strings.Contains(err.Error(), "still serves") {
		t.Fatalf("take while the owner is connected: %v", err)
	}
	a.Close()
	h.log.wait(t, "fuse-owner-gone", 1)
	s, err := b.Take(ctx)
	if err != nil || s == nil {
		t.Fatalf("take: %v, %v", s, err)
	}
	t.Cleanup(func() { s.FD.Close() })
	if !bytes.Equal(s.Init, testInit) || s.Mountpoint != testMountpoint {
		t.Errorf("took init %q, mountpoint %q; want %q, %q", s.Init, s.Mountpoint, testInit, testMountpoint)
	}
	if s.FD.Fd() == w.Fd() || !sameFile(t, s.FD, w) {
		t.Errorf("taken descriptor %d is not a new descriptor of the pipe %d", s.FD.Fd(), w.Fd())
	}
	if !isCloexec(t, s.FD) {
		t.Error("taken descriptor is not close-on-exec")
	}
	writeThrough(t, s.FD, r, "through the taken descriptor")
	if l := h.log.wait(t, "fuse-session-taken", 1); l.attrs["previous_owner"] != "gone" {
		t.Errorf("taken log: %v", l.attrs)
	}

	// The holder kept its own: with the test's two closed, the pipe stays open.
	s.FD.Close()
	w.Close()
	noEOF(t, r)
	// And it hands out as many as its owner asks.
	s2, err := b.Take(ctx)
	if err != nil || s2 == nil {
		t.Fatalf("second take: %v, %v", s2, err)
	}
	writeThrough(t, s2.FD, r, "again")
	s2.FD.Close()
	if l := h.log.wait(t, "fuse-session-taken", 2); l.attrs["previous_owner"] != "self" {
		t.Errorf("second taken log: %v", l.attrs)
	}
}

// TestTakeNothingHeld: Take answers nil when nothing is held; Release then stops
// the idle holder.
func TestTakeNothingHeld(t *testing.T) {
	ctx := testCtx(t)
	h := startHolder(t, Options{Timeout: time.Minute})
	c := dial(t, h.path)
	s, err := c.Take(ctx)
	if s != nil || err != nil {
		t.Fatalf("take: %+v, %v; want nil, nil", s, err)
	}
	if err := c.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.wait(t); err != nil {
		t.Fatal(err)
	}
	if !isGone(h.path) {
		t.Error("socket file left behind")
	}
}

// TestOwnerGoneTimeoutEndsConnection: the owner's connection closes without
// Release and nobody takes the session: after the timeout the holder closes its
// descriptor (the pipe reads EOF, as a FUSE connection ends when its last
// descriptor closes) and Serve returns.
func TestOwnerGoneTimeoutEndsConnection(t *testing.T) {
	const timeout = 200 * time.Millisecond
	h := startHolder(t, Options{Timeout: timeout})
	r, w := pipe(t)
	a := dial(t, h.path)
	if err := a.Hold(testCtx(t), Session{FD: w, Init: testInit, Mountpoint: testMountpoint}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	noEOF(t, r)
	gone := time.Now()
	a.Close()
	if l := h.log.wait(t, "fuse-owner-gone", 1); l.attrs["timeout"] != timeout.String() || l.attrs["owner_pid"] == "" {
		t.Errorf("owner-gone log: %v", l.attrs)
	}
	readEOF(t, r)
	if waited := time.Since(gone); waited < timeout {
		t.Errorf("the connection ended %v after its owner went, before the timeout %v", waited, timeout)
	}
	if err := h.wait(t); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	l := h.log.wait(t, "fuse-connection-ended", 1)
	if l.attrs["reason"] != "timeout" || l.attrs["fusectl_aborted"] != "no" {
		t.Errorf("ended log: %v", l.attrs)
	}
	if !isGone(h.path) {
		t.Error("socket file left behind")
	}
}

// TestTakeWithinTimeoutKeepsConnection: a Take after the owner went and before
// the timeout keeps the connection; when that new owner goes too, the wait starts
// again and ends it.
func TestTakeWithinTimeoutKeepsConnection(t *testing.T) {
	const timeout = 300 * time.Millisecond
	ctx := testCtx(t)
	h := startHolder(t, Options{Timeout: timeout})
	r, w := pipe(t)
	a := dial(t, h.path)
	if err := a.Hold(ctx, Session{FD: w, Init: testInit, Mountpoint: testMountpoint}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	a.Close()
	h.log.wait(t, "fuse-owner-gone", 1)
	b := dial(t, h.path)
	s, err := b.Take(ctx)
	if err != nil || s == nil {
		t.Fatalf("take: %v, %v", s, err)
	}
	if l := h.log.wait(t, "fuse-session-taken", 1); l.attrs["previous_owner"] != "gone" || l.attrs["waited"] == "" {
		t.Errorf("taken log: %v", l.attrs)
	}
	writeThrough(t, s.FD, r, "taken over")
	s.FD.Close()
	time.Sleep(2 * timeout)
	if !h.running() {
		t.Fatalf("Serve returned (%v) though the session was taken in time", h.err)
	}
	noEOF(t, r)
	if ls := h.log.find("fuse-connection-ended"); len(ls) != 0 {
		t.Fatalf("connection ended: %v", ls)
	}
	// The new owner goes too: the wait starts again.
	b.Close()
	h.log.wait(t, "fuse-owner-gone", 2)
	readEOF(t, r)
	if err := h.wait(t); err != nil {
		t.Fatal(err)
	}
}

// TestNoTimeoutWaitsForever: with Timeout 0 a session whose owner went stays held.
func TestNoTimeoutWaitsForever(t *testing.T) {
	h := startHolder(t, Options{})
	r, w := pipe(t)
	a := dial(t, h.path)
	if err := a.Hold(testCtx(t), Session{FD: w, Init: testInit, Mountpoint: testMountpoint}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	a.Close()
	if l := h.log.wait(t, "fuse-owner-gone", 1); l.attrs["timeout"] != "none" {
		t.Errorf("owner-gone log: %v", l.attrs)
	}
	time.Sleep(300 * time.Millisecond)
	noEOF(t, r)
	if !h.running() {
		t.Fatal("Serve returned")
	}
}

// TestReleaseEndsServe: the owner's Release closes the held descriptor and Serve
// returns, its socket file removed.
func TestReleaseEndsServe(t *testing.T) {
	ctx := testCtx(t)
	h := startHolder(t, Options{Timeout: time.Minute})
	r, w := pipe(t)
	a := dial(t, h.path)
	if err := a.Hold(ctx, Session{FD: w, Init: testInit, Mountpoint: testMountpoint}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	noEOF(t, r)
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	readEOF(t, r)
	if err := h.wait(t); err != nil {
		t.Fatal(err)
	}
	if l := h.log.wait(t, "fuse-session-released", 1); l.attrs["held"] != "true" {
		t.Errorf("released log: %v", l.attrs)
	}
	if ls := h.log.find("fuse-owner-gone"); len(ls) != 0 {
		t.Errorf("a release logged as the owner gone: %v", ls)
	}
	if !isGone(h.path) {
		t.Error("socket file left behind")
	}
	if _, err := Dial(ctx, h.path); err == nil || !nothingAnswers(err) {
		t.Errorf("dial after release: %v, want nothing answering", err)
	}
}

// TestReleaseOnlyByOwner: only the client that last did Hold or Take may release.
func TestReleaseOnlyByOwner(t *testing.T) {
	ctx := testCtx(t)
	h := startHolder(t, Options{Timeout: time.Minute})
	_, w := pipe(t)
	a, b := dial(t, h.path), dial(t, h.path)
	if err := a.Hold(ctx, Session{FD: w, Init: testInit, Mountpoint: testMountpoint}); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx); err == nil || !strings.Contains(err.Error(), "not the owner") {
		t.Fatalf("release by a non-owner: %v", err)
	}
	if _, err := b.Take(ctx); err == nil || !strings.Contains(err.Error(), "still serves") {
		t.Fatalf("take while the owner is connected: %v", err)
	}
	a.Close()
	h.log.wait(t, "fuse-owner-gone", 1)
	s, err := b.Take(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s.FD.Close()
	if err := dial(t, h.path).Release(ctx); err == nil || !strings.Contains(err.Error(), "not the owner") {
		t.Fatalf("release by another client: %v", err)
	}
	// The refusals left both connections usable.
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.wait(t); err != nil {
		t.Fatal(err)
	}
}

// TestHoldReplaces: a second Hold replaces the session; the holder closes the
// first one's descriptor.
func TestHoldReplaces(t *testing.T) {
	ctx := testCtx(t)
	h := startHolder(t, Options{Timeout: time.Minute})
	r1, w1 := pipe(t)
	r2, w2 := pipe(t)
	a := dial(t, h.path)
	if err := a.Hold(ctx, Session{FD: w1, Init: []byte("first"), Mountpoint: "/one"}); err != nil {
		t.Fatal(err)
	}
	w1.Close()
	if err := a.Hold(ctx, Session{FD: w2, Init: []byte("second"), Mountpoint: "/two"}); err != nil {
		t.Fatal(err)
	}
	w2.Close()
	readEOF(t, r1)
	if l := h.log.wait(t, "fuse-session-held", 2); l.attrs["replaced"] != "true" {
		t.Errorf("held log: %v", l.attrs)
	}
	a.Close()
	h.log.wait(t, "fuse-owner-gone", 1)
	s, err := dial(t, h.path).Take(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.FD.Close()
	if string(s.Init) != "second" || s.Mountpoint != "/two" {
		t.Errorf("took %q %q", s.Init, s.Mountpoint)
	}
	writeThrough(t, s.FD, r2, "second pipe")
}

// TestSecondServeFails: a second holder on a socket path fails while the first
// runs, whether it finds the lock taken or (lock file removed) the first holder
// answering; the first one keeps serving.
func TestSecondServeFails(t *testing.T) {
	h := startHolder(t, Options{Timeout: time.Minute})
	err := Serve(testCtx(t), h.path, Options{})
	if !errors.Is(err, ErrAlreadyRunning) || !strings.Contains(err.Error(), ".lock") {
		t.Errorf("second Serve: %v, want ErrAlreadyRunning (lock)", err)
	}
	if err := os.Remove(h.path + ".lock"); err != nil {
		t.Fatal(err)
	}
	err = Serve(testCtx(t), h.path, Options{})
	if !errors.Is(err, ErrAlreadyRunning) || !strings.Contains(err.Error(), "answers on") {
		t.Errorf("second Serve without the lock file: %v, want ErrAlreadyRunning (answers)", err)
	}
	dial(t, h.path)
	if !h.running() {
		t.Fatal("the first holder stopped")
	}
}

// TestStaleSocketReplaced: a socket file nothing answers on (a holder killed) is
// replaced; the new one is mode 0600, and removed when Serve returns.
func TestStaleSocketReplaced(t *testing.T) {
	path := filepath.Join(shortDir(t), "holder.sock")
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	if _, err := Dial(testCtx(t), path); !errors.Is(err, unix.ECONNREFUSED) {
		t.Fatalf("dial of the stale socket: %v, want ECONNREFUSED", err)
	}
	h := startHolderAt(t, path, Options{})
	c := dial(t, path)
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket file mode %v, want a 0600 socket", fi.Mode())
	}
	if err := c.Release(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if err := h.wait(t); err != nil {
		t.Fatal(err)
	}
	if !isGone(path) {
		t.Error("socket file left behind")
	}
}

// TestServeRefusesNonSocket: Serve never removes a file that is not a socket.
func TestServeRefusesNonSocket(t *testing.T) {
	path := filepath.Join(shortDir(t), "holder.sock")
	if err := os.WriteFile(path, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := Serve(testCtx(t), path, Options{})
	if err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("Serve: %v", err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "keep" {
		t.Errorf("the file became %q, %v", b, err)
	}
}

// TestServeContextEnds: Serve returns ctx's error and closes what it holds.
func TestServeContextEnds(t *testing.T) {
	path := filepath.Join(shortDir(t), "holder.sock")
	log := newLogRecorder(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, path, Options{Logger: slog.New(log)}) }()
	log.wait(t, "fuse-holder-started", 1)
	r, w := pipe(t)
	a := dial(t, path)
	if err := a.Hold(testCtx(t), Session{FD: w, Init: testInit, Mountpoint: testMountpoint}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Serve: %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return")
	}
	readEOF(t, r)
	if l := log.wait(t, "fuse-holder-stopped", 1); l.attrs["owner_connected"] != "true" {
		t.Errorf("stopped log: %v", l.attrs)
	}
	if !isGone(path) {
		t.Error("socket file left behind")
	}
}

// TestAbortAtTimeout: when the session's mountpoint has a FUSE connection in
// fusectl (here stand-ins for mountinfo and fusectl), the holder writes "1" to
// its abort file before closing its descriptor.
func TestAbortAtTimeout(t *testing.T) {
	dir := t.TempDir()
	mi := filepath.Join(dir, "mountinfo")
	line := "90 25 0:77 / /run/slacker/fuse rw,nosuid,nodev shared:40 - fuse.slackerd slackerd rw\n"
	if err := os.WriteFile(mi, []byte(sampleMountinfo+line), 0o600); err != nil {
		t.Fatal(err)
	}
	ctl := filepath.Join(dir, "connections")
	abort := filepath.Join(ctl, "77", "abort")
	if err := os.MkdirAll(filepath.Dir(abort), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(abort, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	h := startHolder(t, Options{Timeout: 100 * time.Millisecond, mountinfo: mi, fusectl: ctl})
	r, w := pipe(t)
	a := dial(t, h.path)
	if err := a.Hold(testCtx(t), Session{FD: w, Init: testInit, Mountpoint: "/run/slacker/fuse"}); err != nil {
		t.Fatal(err)
	}
	if l := h.log.wait(t, "fuse-session-held", 1); l.attrs["fusectl"] != "77" || l.attrs["fusectl_unavailable"] != "" {
		t.Errorf("held log: %v", l.attrs)
	}
	if b, _ := os.ReadFile(abort); len(b) != 0 {
		t.Fatalf("abort written at hold: %q", b)
	}
	w.Close()
	a.Close()
	readEOF(t, r)
	if err := h.wait(t); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(abort); err != nil || string(b) != "1" {
		t.Errorf("abort file %q, %v; want \"1\"", b, err)
	}
	if l := h.log.wait(t, "fuse-connection-ended", 1); l.attrs["fusectl_aborted"] != "yes" || l.attrs["fusectl"] != "77" {
		t.Errorf("ended log: %v", l.attrs)
	}
}

// TestProtocolErrors speaks the protocol by hand: each bad request gets one error
// reply, descriptors sent where none belongs are closed, and the connection stays
// usable.
func TestProtocolErrors(t *testing.T) {
	h := startHolder(t, Options{Timeout: time.Minute})
	nc, err := net.Dial("unixpacket", h.path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	conn := nc.(*net.UnixConn)
	rcv := newReceiver(conn)
	ask := func(msg string, f *os.File) reply {
		t.Helper()
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		if err := send(conn, []byte(msg), f); err != nil {
			t.Fatal(err)
		}
		b, files, err := rcv.recv()
		if err != nil {
			t.Fatal(err)
		}
		closeAll(files)
		if len(files) != 0 {
			t.Errorf("%q: %d descriptors in the reply", msg, len(files))
		}
		rep, err := decodeReply(b)
		if err != nil {
			t.Fatalf("%q: reply %q: %v", msg, b, err)
		}
		return rep
	}
	r, w := pipe(t)
	for _, c := range []struct {
		msg  string
		fd   bool
		want string
	}{
		{`not json`, false, "not a JSON object"},
		{`{"version":2,"op":"hello"}`, false, "speaks version 1"},
		{`{"version":1,"op":"steal"}`, false, "unknown op"},
		{`{"version":1,"op":"hold","init":"AA==","mountpoint":"/m"}`, false, "carries 0 descriptors, want 1"},
		{`{"version":1,"op":"take"}`, true, "carries 1 descriptors, want 0"},
		{`{"version":1,"op":"hello"}`, true, "carries 1 descriptors, want 0"},
		{`{"version":1,"op":"hold","init":"","mountpoint":"/m"}`, true, "without its INIT"},
		{`{"version":1,"op":"hold","init":"AA==","mountpoint":"/m"}` + strings.Repeat(" ", MaxMessage), false, "longer than"},
	} {
		var f *os.File
		if c.fd {
			f = w
		}
		rep := ask(c.msg, f)
		if rep.Version != ProtocolVersion || !strings.Contains(rep.Error, c.want) {
			t.Errorf("%.60q: reply %+v, want an error containing %q", c.msg, rep, c.want)
		}
	}
	// None of the descriptors sent stayed with the holder.
	w.Close()
	readEOF(t, r)
	if rep := ask(`{"version":1,"op":"hello","added_later":true}`, nil); rep.Error != "" || rep.PID != os.Getpid() {
		t.Errorf("hello after the errors: %+v", rep)
	}
	if ls := h.log.find("fuse-session-held"); len(ls) != 0 {
		t.Errorf("a bad request held a session: %v", ls)
	}
}

// TestClientDeadline: a holder that never answers fails Dial at ctx's deadline,
// and the client's Hold refuses a bad session before sending it.
func TestClientDeadline(t *testing.T) {
	path := filepath.Join(shortDir(t), "mute.sock")
	ln, err := net.Listen("unixpacket", path)
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 1)
	t.Cleanup(func() {
		ln.Close()
		if c, ok := <-accepted; ok {
			c.Close()
		}
	})
	go func() {
		defer close(accepted)
		if c, err := ln.Accept(); err == nil {
			accepted <- c // kept open, never answered
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = Dial(ctx, path)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("dial of a mute holder: %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("dial took %v", d)
	}

	h := startHolder(t, Options{})
	c := dial(t, h.path)
	_, w := pipe(t)
	for _, s := range []Session{
		{Init: testInit, Mountpoint: "/m"},
		{FD: w, Mountpoint: "/m"},
		{FD: w, Init: testInit, Mountpoint: "relative"},
		{FD: w, Init: testInit, Mountpoint: "/not\xffutf8"},
	} {
		if err := c.Hold(testCtx(t), s); err == nil {
			t.Errorf("hold of %+v succeeded", s)
		}
	}
	if ls := h.log.find("fuse-session-held"); len(ls) != 0 {
		t.Errorf("a bad session was held: %v", ls)
	}
}
