package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slacker-dev/slacker/bench/rig"
	"github.com/slacker-dev/slacker/bench/workload"
)

// proc is a real process watched as a container is: its standard output and
// error go to the given writers, Done closes when it exits.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
	code int
	// pidErr, when set, is what PID answers (a runtime that never learns the PID).
	pidErr error
}

func startProc(t *testing.T, script string, stdout, stderr io.Writer) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command("sh", "-c", script), done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = stdout, stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		err := p.cmd.Wait()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			p.code = ee.ExitCode()
			if st, ok := ee.Sys().(syscall.WaitStatus); ok && st.Signaled() {
				p.code = 128 + int(st.Signal()) // as rig.Container reports it
			}
		}
		close(p.done)
	}()
	t.Cleanup(func() {
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	})
	return p
}

func (p *proc) Done() <-chan struct{} { return p.done }
func (p *proc) ExitCode() int         { return p.code }
func (p *proc) PID(ctx context.Context) (int, error) {
	if p.pidErr != nil {
		select {
		case <-p.done:
			return 0, errors.New("exited")
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return p.cmd.Process.Pid, nil
}

// freePort returns a loopback TCP port nobody listens on (one just released).
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port
}

func portOf(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(p)
	return n
}

func httpServer(t *testing.T, status int) int {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/health" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	return portOf(t, srv.Listener.Addr().String())
}

// TestAwait runs each readiness rule against real processes, a real TCP listener
// and a real HTTP server (probed through rig.DialInNetns, as the harness does),
// and checks the outcome: ready and by what, or failed and why. Timeouts are short
// and only decide failures; no test asserts how long anything took.
func TestAwait(t *testing.T) {
	const long = 20 * time.Second // a rule that must be met well before this
	const short = 400 * time.Millisecond
	logRule := func(re string) workload.Ready { return &workload.Log{Pattern: regexp.MustCompile(re)} }

	tcpUp := func(t *testing.T) int {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		return portOf(t, l.Addr().String())
	}
	// tcpLate listens only after the first probes have failed.
	tcpLate := func(t *testing.T) int {
		port := freePort(t)
		ready := make(chan net.Listener, 1)
		go func() {
			time.Sleep(150 * time.Millisecond)
			l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
			if err != nil {
				ready <- nil
				return
			}
			ready <- l
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		t.Cleanup(func() {
			if l := <-ready; l != nil {
				l.Close()
			}
		})
		return port
	}

	tests := []struct {
		name    string
		script  string
		ready   func(t *testing.T) workload.Ready
		timeout time.Duration
		started time.Duration // how long before await the run started
		pidErr  bool
		cancel  bool // the harness is interrupted
		// Outcome: ready with what, or failed with a reason containing why.
		ok     bool
		what   string
		why    string
		exited bool
		code   int
	}{
		{name: "exit 0", script: "exit 0", ready: func(*testing.T) workload.Ready { return &workload.Exit{Code: 0} },
			timeout: long, ok: true, what: "exit 0", exited: true},
		{name: "exit 3 wanted", script: "exit 3", ready: func(*testing.T) workload.Ready { return &workload.Exit{Code: 3} },
			timeout: long, ok: true, what: "exit 3", exited: true, code: 3},
		{name: "exit 3 want 0", script: "exit 3", ready: func(*testing.T) workload.Ready { return &workload.Exit{Code: 0} },
			timeout: long, why: "exit status 3, want 0", exited: true, code: 3},
		{name: "killed", script: "kill -9 $$", ready: func(*testing.T) workload.Ready { return &workload.Exit{Code: 0} },
			timeout: long, why: "exit status 137, want 0", exited: true, code: 137},
		{name: "exit timeout", script: "exec sleep 30", ready: func(*testing.T) workload.Ready { return &workload.Exit{Code: 0} },
			timeout: short, why: "not ready after 400ms (timeout)"},
		{name: "timeout counts from the start", script: "exec sleep 30", ready: func(*testing.T) workload.Ready { return &workload.Exit{Code: 0} },
			timeout: 5 * time.Second, started: 5 * time.Second, why: "(timeout)"},
		{name: "interrupted", script: "exec sleep 30", ready: func(*testing.T) workload.Ready { return &workload.Exit{Code: 0} },
			timeout: long, cancel: true, why: "interrupted"},

		{name: "log line, server keeps running", script: "echo starting; echo 'Ready to accept connections'; exec sleep 30",
			ready: func(*testing.T) workload.Ready { return logRule(`[Rr]eady to accept`) }, timeout: long,
			ok: true, what: "log: Ready to accept connections"},
		{name: "log line on stderr", script: "echo noise; echo 'listening on 8080' >&2; exec sleep 30",
			ready: func(*testing.T) workload.Ready { return logRule(`^listening on \d+$`) }, timeout: long,
			ok: true, what: "log: listening on 8080"},
		{name: "log CRLF", script: `printf 'up\r\n'; exec sleep 30`,
			ready: func(*testing.T) workload.Ready { return logRule(`^up$`) }, timeout: long, ok: true, what: "log: up"},
		{name: "log unterminated last line then exit", script: "printf 'done'",
			ready: func(*testing.T) workload.Ready { return logRule(`^done$`) }, timeout: long,
			ok: true, what: "log: done", exited: true},
		{name: "log exit without a match", script: "echo something else; exit 2",
			ready: func(*testing.T) workload.Ready { return logRule(`ready`) }, timeout: long,
			why: "exited with status 2 before a line matched ready", exited: true, code: 2},
		{name: "log exit 0 is not ready", script: "echo nothing",
			ready: func(*testing.T) workload.Ready { return logRule(`ready`) }, timeout: long,
			why: "exited with status 0 before a line matched", exited: true},
		{name: "log timeout", script: "echo waiting; exec sleep 30",
			ready: func(*testing.T) workload.Ready { return logRule(`ready`) }, timeout: short, why: "(timeout)"},

		{name: "tcp listening", script: "exec sleep 30",
			ready: func(t *testing.T) workload.Ready { return &workload.TCP{Port: tcpUp(t)} }, timeout: long,
			ok: true, what: "tcp "},
		{name: "tcp listening late", script: "exec sleep 30",
			ready: func(t *testing.T) workload.Ready { return &workload.TCP{Port: tcpLate(t)} }, timeout: long,
			ok: true, what: "tcp "},
		{name: "tcp nothing listens", script: "exec sleep 30",
			ready: func(t *testing.T) workload.Ready { return &workload.TCP{Port: freePort(t)} }, timeout: short,
			why: "(timeout)"},
		{name: "tcp exits first", script: "sleep 0.1; exit 1",
			ready: func(t *testing.T) workload.Ready { return &workload.TCP{Port: freePort(t)} }, timeout: long,
			why: "exited with status 1 before it was ready", exited: true, code: 1},
		{name: "tcp pid never known, exits", script: "sleep 0.1; exit 4", pidErr: true,
			ready: func(t *testing.T) workload.Ready { return &workload.TCP{Port: freePort(t)} }, timeout: long,
			why: "exited with status 4 before it was ready", exited: true, code: 4},
		{name: "tcp pid never known, timeout", script: "exec sleep 30", pidErr: true,
			ready: func(t *testing.T) workload.Ready { return &workload.TCP{Port: freePort(t)} }, timeout: short,
			why: "(timeout)"},

		{name: "http 200", script: "exec sleep 30",
			ready:   func(t *testing.T) workload.Ready { return &workload.HTTP{Path: "/health", Port: httpServer(t, 200)} },
			timeout: long, ok: true, what: "http 200"},
		{name: "http 404 proves the server is up", script: "exec sleep 30",
			ready:   func(t *testing.T) workload.Ready { return &workload.HTTP{Path: "/missing", Port: httpServer(t, 200)} },
			timeout: long, ok: true, what: "http 404"},
		{name: "http 503 is not ready", script: "exec sleep 30",
			ready:   func(t *testing.T) workload.Ready { return &workload.HTTP{Path: "/health", Port: httpServer(t, 503)} },
			timeout: short, why: "(timeout)"},
		{name: "http port closed", script: "exec sleep 30",
			ready:   func(t *testing.T) workload.Ready { return &workload.HTTP{Path: "/", Port: freePort(t)} },
			timeout: short, why: "(timeout)"},
		{name: "http tcp-only server is not ready", script: "exec sleep 30",
			ready:   func(t *testing.T) workload.Ready { return &workload.HTTP{Path: "/", Port: tcpUp(t)} },
			timeout: short, why: "(timeout)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := &workload.Workload{Name: "w", Ready: tt.ready(t), Timeout: tt.timeout}
			var matcher *workload.LineMatcher
			var streams []io.Writer
			var stdout, stderr io.Writer = io.Discard, io.Discard
			if r, ok := w.Ready.(*workload.Log); ok {
				matcher = workload.NewLineMatcher(r)
				streams = []io.Writer{matcher.Stream(), matcher.Stream()}
				stdout, stderr = streams[0], streams[1]
			}
			started := time.Now().Add(-tt.started)
			p := startProc(t, tt.script, stdout, stderr)
			if tt.pidErr {
				p.pidErr = errors.New("unknown")
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tt.cancel {
				go func() { time.Sleep(50 * time.Millisecond); cancel() }()
			}
			o := await(ctx, w, p, started, matcher, streams, rig.DialInNetns)
			if o.Ready != tt.ok {
				t.Fatalf("ready = %v (%q, %q), want %v", o.Ready, o.What, o.Reason, tt.ok)
			}
			if tt.ok && (!strings.HasPrefix(o.What, tt.what) || o.Reason != "") {
				t.Errorf("what = %q, reason %q; want %q", o.What, o.Reason, tt.what)
			}
			if !tt.ok && (!strings.Contains(o.Reason, tt.why) || o.What != "") {
				t.Errorf("reason = %q, what %q; want %q", o.Reason, o.What, tt.why)
			}
			if o.Exited != tt.exited || (o.Exited && o.Code != tt.code) {
				t.Errorf("exited %v code %d, want %v %d", o.Exited, o.Code, tt.exited, tt.code)
			}
			if o.At.Before(started) {
				t.Errorf("outcome observed at %v, before the start %v", o.At, started)
			}
		})
	}
}

// TestAwaitTCPPort checks that the TCP rule's "what" names the port probed.
func TestAwaitTCPPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := portOf(t, l.Addr().String())
	p := startProc(t, "exec sleep 30", io.Discard, io.Discard)
	w := &workload.Workload{Name: "w", Ready: &workload.TCP{Port: port}, Timeout: 20 * time.Second}
	o := await(context.Background(), w, p, time.Now(), nil, nil, rig.DialInNetns)
	if want := fmt.Sprintf("tcp %d", port); !o.Ready || o.What != want {
		t.Fatalf("outcome %+v, want ready by %q", o, want)
	}
}
