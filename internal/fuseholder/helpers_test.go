package fuseholder

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// logRecorder is a slog.Handler that keeps every record and passes it to t.Log.
type logRecorder struct {
	t       testing.TB
	mu      sync.Mutex
	recs    []logRec
	changed chan struct{} // closed and replaced at each record
	quiet   bool          // the test ended: t.Log no more
}

type logRec struct {
	msg   string
	attrs map[string]string
}

func newLogRecorder(t testing.TB) *logRecorder {
	r := &logRecorder{t: t, changed: make(chan struct{})}
	t.Cleanup(func() {
		r.mu.Lock()
		r.quiet = true
		r.mu.Unlock()
	})
	return r
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *logRecorder) WithGroup(string) slog.Handler            { return r }

func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	l := logRec{msg: rec.Message, attrs: map[string]string{}}
	var line strings.Builder
	fmt.Fprintf(&line, "%s %s", rec.Level, rec.Message)
	rec.Attrs(func(a slog.Attr) bool {
		l.attrs[a.Key] = a.Value.String()
		fmt.Fprintf(&line, " %s=%q", a.Key, a.Value.String())
		return true
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.quiet {
		r.t.Log(line.String())
	}
	r.recs = append(r.recs, l)
	close(r.changed)
	r.changed = make(chan struct{})
	return nil
}

// find returns the records with message msg so far.
func (r *logRecorder) find(msg string) []logRec {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []logRec
	for _, l := range r.recs {
		if l.msg == msg {
			out = append(out, l)
		}
	}
	return out
}

// wait returns the n-th record (from 1) with message msg, waiting for it at most 5 s.
func (r *logRecorder) wait(t testing.TB, msg string, n int) logRec {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		r.mu.Lock()
		changed := r.changed
		r.mu.Unlock()
		if ls := r.find(msg); len(ls) >= n {
			return ls[n-1]
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("no log record %q (#%d) within 5s", msg, n)
		}
	}
}

// shortDir is a new directory with a short path (a unix socket path has at most
// 107 bytes), removed at the end of the test.
func shortDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", "fh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// testHolder is Serve running in this process.
type testHolder struct {
	path string
	log  *logRecorder
	done chan struct{}
	err  error
}

// startHolder runs Serve on a new socket, waits until it answers, and stops it at
// the end of the test.
func startHolder(t *testing.T, opts Options) *testHolder {
	t.Helper()
	return startHolderAt(t, filepath.Join(shortDir(t), "holder.sock"), opts)
}

func startHolderAt(t *testing.T, path string, opts Options) *testHolder {
	t.Helper()
	h := &testHolder{path: path, log: newLogRecorder(t), done: make(chan struct{})}
	opts.Logger = slog.New(h.log)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		defer close(h.done)
		h.err = Serve(ctx, path, opts)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-h.done:
		case <-time.After(10 * time.Second):
			t.Error("Serve did not return within 10s of its context's end")
		}
	})
	h.log.wait(t, "fuse-holder-started", 1)
	return h
}

// wait waits for Serve to return on its own, at most 5 s.
func (h *testHolder) wait(t testing.TB) error {
	t.Helper()
	select {
	case <-h.done:
		return h.err
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return within 5s")
		return nil
	}
}

func (h *testHolder) running() bool {
	select {
	case <-h.done:
		return false
	default:
		return true
	}
}

// dial connects a client, closed at the end of the test.
func dial(t testing.TB, path string) *Client {
	t.Helper()
	c, err := Dial(testCtx(t), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// testCtx is a context that ends with the test, and after 30 s.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// pipe stands in for /dev/fuse: the holder keeps the write end, the test reads
// the other.
func pipe(t testing.TB) (r, w *os.File) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	return r, w
}

// readEOF waits, at most 5 s, for r to read end of file: every write end closed.
func readEOF(t testing.TB, r *os.File) {
	t.Helper()
	r.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 64)
	for {
		n, err := r.Read(buf)
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatalf("pipe read: %v, want EOF (a write end is still open)", err)
		}
		if n > 0 {
			continue
		}
	}
}

// noEOF checks that r reads neither data nor end of file for a short while: some
// write end is still open.
func noEOF(t testing.TB, r *os.File) {
	t.Helper()
	r.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	n, err := r.Read(make([]byte, 64))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("pipe read: %d bytes, %v; want a timeout (the holder should still hold the write end)", n, err)
	}
}

// writeThrough writes through w and checks the bytes come out of r.
func writeThrough(t testing.TB, w, r *os.File, msg string) {
	t.Helper()
	if _, err := w.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	r.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(r, buf); err != nil || string(buf) != msg {
		t.Fatalf("read %q, %v; want %q", buf, err, msg)
	}
}

// sameFile reports whether a and b are descriptors of the same open file's inode.
func sameFile(t testing.TB, a, b *os.File) bool {
	t.Helper()
	var sa, sb unix.Stat_t
	withFD(t, a, func(fd int) error { return unix.Fstat(fd, &sa) })
	withFD(t, b, func(fd int) error { return unix.Fstat(fd, &sb) })
	return sa.Dev == sb.Dev && sa.Ino == sb.Ino
}

func isCloexec(t testing.TB, f *os.File) bool {
	t.Helper()
	var flags int
	withFD(t, f, func(fd int) (err error) {
		flags, err = unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		return err
	})
	return flags&unix.FD_CLOEXEC != 0
}

// withFD calls fn with f's descriptor, without Fd's side effect (blocking mode:
// no more deadlines).
func withFD(t testing.TB, f *os.File, fn func(fd int) error) {
	t.Helper()
	rc, err := f.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		t.Fatal(err)
	}
	if ferr != nil {
		t.Fatal(ferr)
	}
}

func isGone(path string) bool {
	_, err := os.Lstat(path)
	return errors.Is(err, os.ErrNotExist)
}
