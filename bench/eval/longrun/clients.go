package longrun

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Bench is a benchmark client run against a server container: it loads the server
// for a while and reports the operations done. The clients run on the host, inside
// the container's network namespace (nsenter), as the paper's ran next to the server.
type Bench struct {
	// Workload is the HelloBench workload of the server's image.
	Workload string
	// Op names an operation ("transactions", "requests").
	Op string
	// Tool is the client program (for the tools check); Package its Debian package.
	Tool, Package string
	// Probe makes one request and reports whether it was served (time to the first
	// request served).
	Probe func(ctx context.Context, netns string) bool
	// Prepare runs once before the load (pgbench's initialization); may be nil.
	Prepare func(ctx context.Context, netns string) error
	// Load loads the server for d and returns the operations it completed.
	Load func(ctx context.Context, netns string, d time.Duration) (int64, error)
}

// Benches are the paper's four long-running workloads (Fig 21): PostgreSQL under
// pgbench, Redis under redis-benchmark (set, get and update at the same rate), a
// static web server under wrk (nginx for the paper's Apache) and a dynamic
// JavaScript server under wrk (express on node for the paper's io.js).
var Benches = []Bench{
	{Workload: "postgres", Op: "transactions", Tool: "pgbench", Package: "postgresql-client",
		Probe: func(ctx context.Context, ns string) bool {
			return inNetns(ctx, ns, "psql", "-h", "127.0.0.1", "-U", "postgres", "-d", "postgres", "-Atc", "select 1").Run() == nil
		},
		Prepare: func(ctx context.Context, ns string) error {
			out, err := inNetns(ctx, ns, "pgbench", "-i", "-q", "-s", "10", "-h", "127.0.0.1", "-U", "postgres", "postgres").CombinedOutput()
			if err != nil {
				return fmt.Errorf("pgbench -i: %w: %s", err, tail(out))
			}
			return nil
		},
		Load: func(ctx context.Context, ns string, d time.Duration) (int64, error) {
			out, err := inNetns(ctx, ns, "pgbench", "-T", durSecs(d), "-c", "8", "-j", "2", "-h", "127.0.0.1", "-U", "postgres", "postgres").CombinedOutput()
			if err != nil {
				return 0, fmt.Errorf("pgbench: %w: %s", err, tail(out))
			}
			return ParsePgbench(string(out))
		}},
	{Workload: "redis", Op: "requests", Tool: "redis-benchmark", Package: "redis-tools",
		Probe: func(ctx context.Context, ns string) bool {
			out, err := inNetns(ctx, ns, "redis-cli", "-h", "127.0.0.1", "-p", "6379", "ping").Output()
			return err == nil && strings.TrimSpace(string(out)) == "PONG"
		},
		Load: func(ctx context.Context, ns string, d time.Duration) (int64, error) {
			// redis-benchmark runs a number of requests, not a duration: rounds of
			// 100,000 requests per test until the time is up.
			end := time.Now().Add(d)
			var total int64
			for time.Now().Before(end) {
				out, err := inNetns(ctx, ns, "redis-benchmark", "-h", "127.0.0.1", "-p", "6379", "-q", "--csv",
					"-t", "set,get,incr", "-n", "100000", "-c", "50", "-r", "100000").CombinedOutput()
				if err != nil {
					return total, fmt.Errorf("redis-benchmark: %w: %s", err, tail(out))
				}
				n, err := ParseRedisBenchmark(string(out), 100000)
				if err != nil {
					return total, err
				}
				total += n
			}
			return total, nil
		}},
	{Workload: "nginx", Op: "requests", Tool: "wrk", Package: "wrk",
		Probe: func(ctx context.Context, ns string) bool { return httpOK(ctx, ns, "http://127.0.0.1:80/") },
		Load: func(ctx context.Context, ns string, d time.Duration) (int64, error) {
			return wrk(ctx, ns, "http://127.0.0.1:80/", d)
		}},
	{Workload: "express", Op: "requests", Tool: "wrk", Package: "wrk",
		Probe: func(ctx context.Context, ns string) bool { return httpOK(ctx, ns, "http://127.0.0.1:3000/") },
		Load: func(ctx context.Context, ns string, d time.Duration) (int64, error) {
			return wrk(ctx, ns, "http://127.0.0.1:3000/", d)
		}},
}

// inNetns runs a program inside the network namespace at ns (/proc/PID/ns/net).
func inNetns(ctx context.Context, ns, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + ns, "--", name}, args...)...)
}

func durSecs(d time.Duration) string {
	return strconv.Itoa(max(int(d.Round(time.Second)/time.Second), 1))
}

func tail(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 500 {
		s = "..." + s[len(s)-500:]
	}
	return s
}

func httpOK(ctx context.Context, ns, url string) bool {
	out, err := inNetns(ctx, ns, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "2", url).Output()
	return err == nil && strings.HasPrefix(string(out), "2")
}

func wrk(ctx context.Context, ns, url string, d time.Duration) (int64, error) {
	out, err := inNetns(ctx, ns, "wrk", "-t", "2", "-c", "32", "-d", durSecs(d)+"s", url).CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("wrk: %w: %s", err, tail(out))
	}
	return ParseWrk(string(out))
}

var (
	pgbenchTx = regexp.MustCompile(`(?m)^number of transactions actually processed: (\d+)`)
	wrkReqs   = regexp.MustCompile(`(?m)^\s*(\d+) requests in [0-9.]+\w+,`)
)

// ParsePgbench returns the transactions a pgbench run processed.
func ParsePgbench(out string) (int64, error) {
	m := pgbenchTx.FindStringSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("pgbench output has no transaction count: %s", tail([]byte(out)))
	}
	return strconv.ParseInt(m[1], 10, 64)
}

// ParseWrk returns the requests a wrk run completed.
func ParseWrk(out string) (int64, error) {
	m := wrkReqs.FindStringSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("wrk output has no request count: %s", tail([]byte(out)))
	}
	return strconv.ParseInt(m[1], 10, 64)
}

// ParseRedisBenchmark returns the requests of a `redis-benchmark --csv` run: n for
// each test it reports (a line per test after the header).
func ParseRedisBenchmark(out string, n int64) (int64, error) {
	var tests int64
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Split(strings.TrimSpace(sc.Text()), ",")
		if len(f) < 2 || f[0] == `"test"` {
			continue
		}
		rps := strings.Trim(f[1], `"`)
		if _, err := strconv.ParseFloat(rps, 64); err != nil {
			continue
		}
		tests++
	}
	if tests == 0 {
		return 0, fmt.Errorf("redis-benchmark output has no test results: %s", tail([]byte(out)))
	}
	return tests * n, nil
}
