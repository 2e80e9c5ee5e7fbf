package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/slacker-dev/slacker/bench/workload"
)

// watched is what readiness needs from a started container (*rig.Container).
type watched interface {
	Done() <-chan struct{}
	ExitCode() int
	PID(ctx context.Context) (int, error)
}

// dialFunc connects to addr inside the network namespace of process pid.
type dialFunc func(ctx context.Context, pid int, network, addr string) (net.Conn, error)

// outcome is how a run ended.
type outcome struct {
	Ready  bool
	At     time.Time // when readiness (or the failure) was observed
	What   string    // what satisfied the rule
	Reason string    // why it failed
	Exited bool      // the run command had exited when the outcome was decided
	Code   int       // its exit status, if Exited
}

// probeEvery is the interval between TCP or HTTP probes.
const probeEvery = 10 * time.Millisecond

// await watches c until w's ready rule is satisfied, the run ends without
// satisfying it, or w's timeout (counted from started) passes. For a log rule,
// matcher is fed the container's output and streams are its writers (flushed when
// the container exits, so an unterminated last line still counts).
func await(ctx context.Context, w *workload.Workload, c watched, started time.Time, matcher *workload.LineMatcher, streams []io.Writer, dial dialFunc) outcome {
	ctx, cancel := context.WithDeadline(ctx, started.Add(w.Timeout))
	defer cancel()
	exited := func() outcome {
		return outcome{At: time.Now(), Exited: true, Code: c.ExitCode()}
	}
	timeout := func() outcome {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return outcome{At: time.Now(), Reason: fmt.Sprintf("not ready after %s (timeout)", w.Timeout)}
		}
		return outcome{At: time.Now(), Reason: "interrupted"}
	}
	switch r := w.Ready.(type) {
	case *workload.Exit:
		select {
		case <-c.Done():
			o := exited()
			if o.Ready = r.Satisfied(o.Code); o.Ready {
				o.What = fmt.Sprintf("exit %d", o.Code)
			} else {
				o.Reason = fmt.Sprintf("exit status %d, want %d", o.Code, r.Code)
			}
			return o
		case <-ctx.Done():
			return timeout()
		}
	case *workload.Log:
		select {
		case <-matcher.Done():
			line, _ := matcher.Matched()
			return outcome{Ready: true, At: time.Now(), What: "log: " + clip(line, 200)}
		case <-c.Done():
			o := exited()
			for _, s := range streams {
				workload.Flush(s)
			}
			if line, ok := matcher.Matched(); ok {
				o.Ready, o.What = true, "log: "+clip(line, 200)
				return o
			}
			o.Reason = fmt.Sprintf("exited with status %d before a line matched %s", o.Code, r.Pattern)
			return o
		case <-ctx.Done():
			return timeout()
		}
	case *workload.TCP, *workload.HTTP:
		pid, err := c.PID(ctx)
		if err != nil {
			select {
			case <-c.Done():
				o := exited()
				o.Reason = fmt.Sprintf("exited with status %d before it was ready", o.Code)
				return o
			default:
			}
			if ctx.Err() != nil {
				return timeout()
			}
			return outcome{At: time.Now(), Reason: fmt.Sprintf("find the container's process: %v", err)}
		}
		for {
			if what, ok := probe(ctx, w.Ready, pid, dial); ok {
				return outcome{Ready: true, At: time.Now(), What: what}
			}
			select {
			case <-c.Done():
				o := exited()
				o.Reason = fmt.Sprintf("exited with status %d before it was ready", o.Code)
				return o
			case <-ctx.Done():
				return timeout()
			case <-time.After(probeEvery):
			}
		}
	default:
		return outcome{At: time.Now(), Reason: fmt.Sprintf("unknown ready rule %T", w.Ready)}
	}
}

// loopbacks are the addresses a port inside a container is probed on.
var loopbacks = []string{"127.0.0.1", "::1"}

// probe tries a TCP or HTTP rule once inside the namespace of pid.
func probe(ctx context.Context, rule workload.Ready, pid int, dial dialFunc) (string, bool) {
	switch r := rule.(type) {
	case *workload.TCP:
		for _, host := range loopbacks {
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			conn, err := dial(cctx, pid, "tcp", r.Address(host))
			cancel()
			if err == nil {
				conn.Close()
				return "tcp " + strconv.Itoa(r.Port), true
			}
		}
	case *workload.HTTP:
		for _, host := range loopbacks {
			status, err := httpGet(ctx, r.URL(host), func(ctx context.Context, network, addr string) (net.Conn, error) {
				return dial(ctx, pid, network, addr)
			})
			if err == nil && r.Accepts(status) {
				return "http " + strconv.Itoa(status), true
			}
		}
	}
	return "", false
}

func httpGet(ctx context.Context, url string, dial func(ctx context.Context, network, addr string) (net.Conn, error)) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	tr := &http.Transport{DialContext: dial, DisableKeepAlives: true, Proxy: nil}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	return resp.StatusCode, nil
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
