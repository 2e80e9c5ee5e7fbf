package startup

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/slacker-dev/slacker/bench/eval/launch"
	"github.com/slacker-dev/slacker/bench/rig"
	"github.com/slacker-dev/slacker/bench/workload"
	"github.com/slacker-dev/slacker/internal/api"
)

// Result is one container's start.
type Result struct {
	// Seconds is from the launch of the container until it was ready.
	Seconds float64
	// Stats are its volume's statistics (Slacker only; HasStats says so).
	Stats    api.VolumeStats
	HasStats bool
}

// Pair is a workload's two starts on one node.
type Pair struct {
	// Pull is the pull's time (the node is cold before it).
	Pull          float64
	First, Second Result
}

// Run makes s cold, pulls ref and starts two containers of w one after the other,
// each until ready. cfg is the image's config; dir a work directory.
func Run(ctx context.Context, s rig.System, ref string, w *workload.Workload, cfg v1.Config, dir string) (Pair, error) {
	var p Pair
	if err := s.Cold(ctx); err != nil {
		return p, err
	}
	t := time.Now()
	if _, err := s.Pull(ctx, ref); err != nil {
		return p, err
	}
	p.Pull = time.Since(t).Seconds()
	l, err := launch.New(ctx, s, launch.Options{Dir: filepath.Join(dir, "launch"), Ref: ref, Config: cfg, Args: w.Cmd})
	if err != nil {
		return p, err
	}
	if p.First, err = once(ctx, l, w, "first"); err != nil {
		return p, fmt.Errorf("first run: %w", err)
	}
	if p.Second, err = once(ctx, l, w, "second"); err != nil {
		return p, fmt.Errorf("second run: %w", err)
	}
	return p, nil
}

// once starts one container, waits until it is ready, reads its volume's
// statistics and removes it.
func once(ctx context.Context, l launch.Launcher, w *workload.Workload, name string) (Result, error) {
	var r Result
	id := fmt.Sprintf("su-%s-%s", w.Name, name)
	tctx, cancel := context.WithTimeout(ctx, w.Timeout)
	defer cancel()
	c, err := launch.Start(tctx, l, id)
	if err != nil {
		return r, err
	}
	defer c.Remove(context.WithoutCancel(ctx))
	at, err := Ready(tctx, c, w.Ready)
	if err != nil {
		return r, err
	}
	r.Seconds = at.Sub(c.Started).Seconds()
	r.Stats, r.HasStats = l.VolumeStats(ctx, id)
	return r, nil
}

// probeEvery is the interval between TCP or HTTP probes.
const probeEvery = 20 * time.Millisecond

// Ready waits until the container satisfies rule and returns when it did: its exit
// status (Exit), an output line (Log), a TCP connection or an HTTP answer inside its
// network namespace (TCP, HTTP).
func Ready(ctx context.Context, c *launch.Container, rule workload.Ready) (time.Time, error) {
	switch r := rule.(type) {
	case *workload.Exit:
		select {
		case <-c.Done():
			at := time.Now()
			if !r.Satisfied(c.ExitCode()) {
				return at, fmt.Errorf("exit status %d, want %d: %s", c.ExitCode(), r.Code, c.Tail())
			}
			return at, nil
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("no exit: %w: %s", ctx.Err(), c.Tail())
		}
	case *workload.Log:
		return c.WaitLine(ctx, r.Pattern)
	case *workload.TCP, *workload.HTTP:
		ns, err := c.Netns(ctx)
		if err != nil {
			return time.Time{}, err
		}
		for {
			if probe(ctx, ns, rule) {
				return time.Now(), nil
			}
			select {
			case <-c.Done():
				return time.Time{}, fmt.Errorf("exited (status %d) before %s: %s", c.ExitCode(), rule, c.Tail())
			case <-ctx.Done():
				return time.Time{}, fmt.Errorf("not ready by %s: %w: %s", rule, ctx.Err(), c.Tail())
			case <-time.After(probeEvery):
			}
		}
	}
	return time.Time{}, fmt.Errorf("unknown ready rule %v", rule)
}

var httpStatus = regexp.MustCompile(`^\d{3}$`)

// probe tries the rule once from inside the network namespace ns.
func probe(ctx context.Context, ns string, rule workload.Ready) bool {
	switch r := rule.(type) {
	case *workload.TCP:
		return exec.CommandContext(ctx, "nsenter", "--net="+ns, "--", "bash", "-c",
			"exec 3<>/dev/tcp/127.0.0.1/"+strconv.Itoa(r.Port)).Run() == nil
	case *workload.HTTP:
		out, err := exec.CommandContext(ctx, "nsenter", "--net="+ns, "--", "curl", "-s", "-o", "/dev/null",
			"-w", "%{http_code}", "--max-time", "2", r.URL("127.0.0.1")).Output()
		if err != nil || !httpStatus.Match(out) {
			return false
		}
		code, _ := strconv.Atoi(string(out))
		return r.Accepts(code)
	}
	return false
}
