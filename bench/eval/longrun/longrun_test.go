package longrun

import (
	"strings"
	"testing"

	"github.com/slacker-dev/slacker/bench/eval"
)

const pgbenchOut = `pgbench (15.18 (Debian 15.18-0+deb12u1))
starting vacuum...end.
transaction type: <builtin: TPC-B (sort of)>
scaling factor: 10
query mode: simple
number of clients: 8
number of threads: 2
maximum number of tries: 1
duration: 10 s
number of transactions actually processed: 12345
number of failed transactions: 0 (0.000%)
latency average = 6.480 ms
initial connection time = 12.345 ms
tps = 1234.567890 (without initial connection time)
`

const wrkOut = `Running 10s test @ http://127.0.0.1:80/
  2 threads and 32 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     1.23ms  456.00us  10.00ms   80.00%
    Req/Sec    12.34k     1.23k   15.00k    70.00%
  245678 requests in 10.00s, 200.00MB read
Requests/sec:  24567.80
Transfer/sec:     20.00MB
`

const redisOut = `"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
"SET","90909.09","0.303","0.104","0.287","0.463","0.599","1.431"
"GET","94339.62","0.288","0.096","0.271","0.447","0.599","1.151"
"INCR","92592.59","0.295","0.100","0.279","0.455","0.599","1.247"
`

func TestParsers(t *testing.T) {
	if n, err := ParsePgbench(pgbenchOut); err != nil || n != 12345 {
		t.Fatalf("pgbench %d %v", n, err)
	}
	if n, err := ParseWrk(wrkOut); err != nil || n != 245678 {
		t.Fatalf("wrk %d %v", n, err)
	}
	if n, err := ParseRedisBenchmark(redisOut, 100000); err != nil || n != 300000 {
		t.Fatalf("redis %d %v", n, err)
	}
	for _, bad := range []string{"", "error: connection refused"} {
		if _, err := ParsePgbench(bad); err == nil {
			t.Error("pgbench garbage")
		}
		if _, err := ParseWrk(bad); err == nil {
			t.Error("wrk garbage")
		}
		if _, err := ParseRedisBenchmark(bad, 1); err == nil {
			t.Error("redis garbage")
		}
	}
	if durSecs(2600e6) != "3" || durSecs(0) != "1" {
		t.Fatal("secs rounds to whole seconds, at least 1")
	}
}

func TestSection(t *testing.T) {
	r := &Results{Meta: eval.NewMeta("longrun"), Duration: 60, Runs: 1, Ops: map[string]string{"redis": "requests", "nginx": "requests"}}
	r.Samples = []Sample{
		{System: "overlayfs", Workload: "redis", Pull: 3, FirstRequest: 4, Window: 60, Ops: 5600000, LoadSeconds: 56},
		{System: "slacker", Workload: "redis", Pull: 0.1, FirstRequest: 0.5, Window: 60, Ops: 5950000, LoadSeconds: 59.5},
		{System: "overlayfs", Workload: "nginx", Error: "boom"},
	}
	sec := r.Section()
	if len(sec.Figures) != 2 {
		t.Fatalf("%d figures", len(sec.Figures))
	}
	row := sec.Tables[0].Rows[1] // the paper's order: postgres, redis, nginx, express
	if row[0] != "nginx" || row[2] != "-" {
		t.Fatalf("nginx row %v", row)
	}
	row = sec.Tables[0].Rows[0]
	if row[0] != "redis" || row[4] != "1.06x" || row[5] != "1x" || row[8] != "8x" {
		t.Fatalf("redis row %v", row)
	}
	if !strings.HasPrefix(sec.Headlines[0].Value, "1.06x") {
		t.Fatalf("headlines %v", sec.Headlines)
	}
}

// TestSectionModes: slacker-block gets its own throughput, ratio and first-request
// columns beside slacker's, its series in both figures, and its headlines.
func TestSectionModes(t *testing.T) {
	r := &Results{Meta: eval.NewMeta("longrun"), Duration: 60, Runs: 1, Ops: map[string]string{"postgres": "transactions"},
		RootModes: map[string]string{"slacker": "shared", "slacker-block": "block"}}
	r.Samples = []Sample{
		{System: "slacker-block", Workload: "postgres", FirstRequest: 2, Window: 60, Ops: 48000, LoadSeconds: 50},
		{System: "overlayfs", Workload: "postgres", FirstRequest: 8, Window: 60, Ops: 60000, LoadSeconds: 50},
		{System: "slacker", Workload: "postgres", FirstRequest: 1, Window: 60, Ops: 66000, LoadSeconds: 55},
	}
	sec := r.Section()
	tbl := sec.Tables[0]
	want := "server,op,overlayfs ops/s (window),slacker ops/s (window),ratio,ratio while loaded,slacker-block ops/s (window),ratio,ratio while loaded," +
		"first request: overlayfs,slacker,sooner,slacker-block,sooner"
	if strings.Join(tbl.Header, ",") != want {
		t.Fatalf("header %q", tbl.Header)
	}
	if got := strings.Join(tbl.Rows[0], ","); got != "postgres,transactions,1000,1100,1.1x,1x,800,0.8x,0.8x,8,1,8x,2,4x" {
		t.Fatalf("row %s", got)
	}
	if len(sec.Headlines) != 2 || sec.Headlines[1].Name != "postgres throughput, start-up included, Slacker block mode / overlayfs" ||
		sec.Headlines[1].Value != "0.8x (first request 4x sooner)" {
		t.Fatalf("headlines %v", sec.Headlines)
	}
	if !strings.Contains(sec.Figures[0].SVG, "slacker-block, while loaded") || !strings.Contains(sec.Figures[1].SVG, "slacker-block") {
		t.Fatal("a figure lacks slacker-block")
	}
}
