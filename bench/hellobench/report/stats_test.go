package report

import (
	"math"
	"slices"
	"testing"

	"github.com/slacker-dev/slacker/bench/hellobench/harness"
)

func near(a, b float64) bool {
	if math.IsNaN(a) || math.IsNaN(b) {
		return math.IsNaN(a) && math.IsNaN(b)
	}
	return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b))
}

func TestQuantile(t *testing.T) {
	nan := math.NaN()
	ten := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	tests := []struct {
		v    []float64
		q    float64
		want float64
	}{
		{nil, 0.5, nan},
		{[]float64{}, 0.9, nan},
		{[]float64{3}, 0.5, 3},
		{[]float64{3}, 0.9, 3},
		{[]float64{1, 2, 3, 4}, 0.5, 2.5}, // between 2 and 3
		{[]float64{4, 1, 3, 2}, 0.5, 2.5}, // order does not matter
		{[]float64{1, 2, 3, 4}, 0.9, 3.7}, // h = 0.9*3 = 2.7: 3 + 0.7*(4-3)
		{[]float64{1, 2, 3, 4}, 0, 1},
		{[]float64{1, 2, 3, 4}, 1, 4},
		{[]float64{1, 2, 3, 4}, -1, 1}, // clamped
		{[]float64{1, 2, 3, 4}, 2, 4},
		{[]float64{1, 2, 3}, 0.5, 2},
		{[]float64{5, 10}, 0.9, 9.5}, // 5 + 0.9*5
		{ten, 0.9, 9.1},              // h = 8.1: 9 + 0.1*1
		{ten, 0.5, 5.5},
		{[]float64{2, 2, 2}, 0.9, 2},
		{[]float64{1, 2}, nan, nan},
	}
	for _, tt := range tests {
		in := slices.Clone(tt.v)
		if got := Quantile(tt.v, tt.q); !near(got, tt.want) {
			t.Errorf("Quantile(%v, %v) = %v, want %v", tt.v, tt.q, got, tt.want)
		}
		if !slices.Equal(in, tt.v) {
			t.Errorf("Quantile sorted its input: %v -> %v", in, tt.v)
		}
	}
	if got := Median([]float64{7, 1, 100}); got != 7 {
		t.Errorf("Median = %v, want 7", got)
	}
}

func TestMeanAndCDF(t *testing.T) {
	if !math.IsNaN(Mean(nil)) {
		t.Error("Mean(nil) is not NaN")
	}
	if got := Mean([]float64{1, 2, 3, 4}); got != 2.5 {
		t.Errorf("Mean = %v", got)
	}
	in := []float64{3, 1, 2}
	xs, ps := CDF(in)
	if !slices.Equal(xs, []float64{1, 2, 3}) || !near(ps[0], 1.0/3) || !near(ps[1], 2.0/3) || ps[2] != 1 {
		t.Errorf("CDF = %v, %v", xs, ps)
	}
	if !slices.Equal(in, []float64{3, 1, 2}) {
		t.Errorf("CDF sorted its input")
	}
	if xs, ps := CDF(nil); len(xs) != 0 || len(ps) != 0 {
		t.Errorf("CDF(nil) = %v, %v", xs, ps)
	}
}

// sample builds a successful sample; fetched is split into 1 MB from the registry
// and the rest from the store.
func sample(w, sys, cycle string, run int, push, pull, runT float64, fetched, read int64) harness.Sample {
	reg := min(fetched, 1e6)
	return harness.Sample{Workload: w, Category: category[w], System: sys, Cycle: cycle, Run: run, OK: true,
		Push: push, Pull: pull, RunTime: runT, Total: push + pull + runT, RegistryBytes: reg, StoreBytes: fetched - reg,
		ReadBytes: read, Ready: "exit 0", Output: "out of " + w + "\n"}
}

func failed(w, sys, cycle string, run int, stage, why string) harness.Sample {
	return harness.Sample{Workload: w, Category: category[w], System: sys, Cycle: cycle, Run: run, Stage: stage, Failure: why,
		Pull: 1, RunTime: 60, Total: 61, ReadBytes: -1}
}

var category = map[string]string{"alpha": "distro", "beta": "database", "gamma": "database"}

// testResults: three workloads, overlayfs against slacker, three runs.
//
//	deployment     overlayfs pull/run/total         slacker pull/run/total
//	alpha          4/1/5  6/1/7  8/2/10 → 6/1/7       .2/.5/.7  .3/.7/1  .1/.4/.5 → .2/.5/.7   speedup 7/.7 = 10
//	beta           10/2/12 12/2/14 failed → 11/2/13   1/1.6/2.6 1.2/1.4/2.6 2/2/4 → 1.2/1.6/2.6 speedup 13/2.6 = 5
//	gamma          3/1/4 3/1/4 5/1/6 → 3/1/4          three failed: no speedup
//	development alpha: overlayfs 2+6+1 = 9, slacker .2+.2+.5 = .9: speedup 10
func testResults() *harness.Results {
	d, v := harness.Deployment, harness.Development
	r := &harness.Results{Version: harness.ResultsVersion, Runs: 3, Profile: harness.Profile{Name: "loopback", Registry: "127.0.0.1:5000"},
		Workloads: []harness.WorkloadInfo{
			{Name: "alpha", Category: "distro", Ready: "{ exit = 0 }", Layers: 1, CompressedBytes: 40e6, DataBytes: 100e6},
			{Name: "beta", Category: "database", Ready: "{ tcp = 6379 }", Layers: 2, CompressedBytes: 80e6, DataBytes: 200e6},
			{Name: "gamma", Category: "database", Ready: "{ log = \"ready\" }", Layers: 2, CompressedBytes: 20e6, DataBytes: 50e6},
		},
		Systems: []harness.SystemInfo{{Name: "slacker", Detail: "s"}, {Name: "overlayfs", Detail: "o"}},
		Publish: []harness.PublishSample{
			{Workload: "alpha", System: "overlayfs", OK: true, Push: 3, Total: 3},
			{Workload: "alpha", System: "slacker", OK: true, Push: 0.1, Total: 2},
			{Workload: "beta", System: "slacker", Failure: "boom"},
		},
		Samples: []harness.Sample{
			sample("alpha", "overlayfs", d, 1, 0, 4, 1, 40e6, -1),
			sample("alpha", "overlayfs", d, 2, 0, 6, 1, 40e6, -1),
			sample("alpha", "overlayfs", d, 3, 0, 8, 2, 40e6, -1),
			sample("beta", "overlayfs", d, 1, 0, 10, 2, 80e6, -1),
			sample("beta", "overlayfs", d, 2, 0, 12, 2, 80e6, -1),
			failed("beta", "overlayfs", d, 3, "ready", "exited with status 1 before it was ready"),
			sample("gamma", "overlayfs", d, 1, 0, 3, 1, 20e6, -1),
			sample("gamma", "overlayfs", d, 2, 0, 3, 1, 20e6, -1),
			sample("gamma", "overlayfs", d, 3, 0, 5, 1, 20e6, -1),

			sample("alpha", "slacker", d, 1, 0, 0.2, 0.5, 5e6, 2e6),
			sample("alpha", "slacker", d, 2, 0, 0.3, 0.7, 10e6, 2e6),
			sample("alpha", "slacker", d, 3, 0, 0.1, 0.4, 15e6, 2e6),
			sample("beta", "slacker", d, 1, 0, 1, 1.6, 40e6, 8e6),
			sample("beta", "slacker", d, 2, 0, 1.2, 1.4, 30e6, 8e6),
			sample("beta", "slacker", d, 3, 0, 2, 2, 50e6, 8e6),
			failed("gamma", "slacker", d, 1, "pull", "slacker pull: exit 1"),
			failed("gamma", "slacker", d, 2, "ready", "not ready after 1m0s (timeout)"),
			failed("gamma", "slacker", d, 3, "start", "<&> \"quoted\""),

			sample("alpha", "overlayfs", v, 1, 2, 6, 1, 40e6, -1),
			sample("alpha", "slacker", v, 1, 0.2, 0.2, 0.5, 5e6, 2e6),
		},
	}
	return r
}

func TestAggregate(t *testing.T) {
	tb := Aggregate(testResults())
	if tb.Baseline != "overlayfs" || !slices.Equal(tb.Systems, []string{"slacker", "overlayfs"}) {
		t.Fatalf("systems %v, baseline %q", tb.Systems, tb.Baseline)
	}
	nan := math.NaN()
	d, v := harness.Deployment, harness.Development
	tests := []struct {
		w, s, c                 string
		n, failed               int
		pull, run, total, push  float64
		fetched, registry, read float64
	}{
		{"alpha", "overlayfs", d, 3, 0, 6, 1, 7, 0, 40e6, 1e6, nan},
		{"beta", "overlayfs", d, 2, 1, 11, 2, 13, 0, 80e6, 1e6, nan},
		{"gamma", "overlayfs", d, 3, 0, 3, 1, 4, 0, 20e6, 1e6, nan},
		{"alpha", "slacker", d, 3, 0, 0.2, 0.5, 0.7, 0, 10e6, 1e6, 2e6},
		{"beta", "slacker", d, 3, 0, 1.2, 1.6, 2.6, 0, 40e6, 1e6, 8e6},
		{"gamma", "slacker", d, 0, 3, nan, nan, nan, nan, nan, nan, nan},
		{"alpha", "overlayfs", v, 1, 0, 6, 1, 9, 2, 40e6, 1e6, nan},
		{"alpha", "slacker", v, 1, 0, 0.2, 0.5, 0.9, 0.2, 5e6, 1e6, 2e6},
	}
	for _, tt := range tests {
		c := tb.Cell(tt.w, tt.s, tt.c)
		if c == nil {
			t.Errorf("no cell %s %s %s", tt.w, tt.s, tt.c)
			continue
		}
		if c.N != tt.n || c.Failed != tt.failed || len(c.Failures) != tt.failed || c.OK() != (tt.n > 0) {
			t.Errorf("%s %s %s: n %d failed %d (%q), want %d %d", tt.w, tt.s, tt.c, c.N, c.Failed, c.Failures, tt.n, tt.failed)
		}
		for _, f := range []struct {
			what      string
			got, want float64
		}{{"pull", c.Pull, tt.pull}, {"run", c.Run, tt.run}, {"total", c.Total, tt.total}, {"push", c.Push, tt.push},
			{"fetched", c.Fetched, tt.fetched}, {"registry", c.Registry, tt.registry}, {"read", c.Read, tt.read}} {
			if !near(f.got, f.want) {
				t.Errorf("%s %s %s: %s %v, want %v", tt.w, tt.s, tt.c, f.what, f.got, f.want)
			}
		}
	}
	if c := tb.Cell("beta", "overlayfs", d); c.Failures[0] != "ready: exited with status 1 before it was ready" {
		t.Errorf("failure %q", c.Failures[0])
	}
	if c := tb.Cell("alpha", "slacker", d); c.Output != "out of alpha\n" {
		t.Errorf("output %q", c.Output)
	}
	if tb.Cell("delta", "slacker", d) != nil || tb.Cell("gamma", "slacker", v).OK() {
		t.Error("cells of samples never taken")
	}
}

func TestSpeedupsAndSummary(t *testing.T) {
	tb := Aggregate(testResults())
	dep := tb.Speedups(harness.Deployment, "slacker")
	want := []Speedup{{"alpha", "distro", 10}, {"beta", "database", 5}}
	if len(dep) != len(want) {
		t.Fatalf("speedups %+v, want %+v (gamma failed on slacker: no pair)", dep, want)
	}
	for i := range want {
		if dep[i].Workload != want[i].Workload || dep[i].Category != want[i].Category || !near(dep[i].Value, want[i].Value) {
			t.Errorf("speedup %d: %+v, want %+v", i, dep[i], want[i])
		}
	}
	if v := Values(dep); !near(v[0], 10) || !near(v[1], 5) {
		t.Errorf("Values = %v", v)
	}
	// The baseline against itself is 1 wherever it succeeded.
	for _, s := range tb.Speedups(harness.Deployment, "overlayfs") {
		if !near(s.Value, 1) {
			t.Errorf("baseline over itself: %+v", s)
		}
	}

	sm := tb.Summarize("slacker")
	for _, f := range []struct {
		what      string
		got, want float64
	}{
		{"deploy median", sm.DeployMedian, 7.5}, // of 10 and 5
		{"deploy p90", sm.DeployP90, 9.5},       // 5 + 0.9*(10-5)
		{"dev median", sm.DevMedian, 10},
		{"dev p90", sm.DevP90, 10},
		{"pull median", sm.PullMedian, 0.7}, // of .2 and 1.2
		{"pull p90", sm.PullP90, 1.1},       // .2 + 0.9*1
		{"base pull median", sm.BasePullMedian, 6},
		{"base pull p90", sm.BasePullP90, 10}, // of 3, 6, 11: h = 1.8, 6 + 0.8*5
		{"run ratio", sm.RunRatio, 0.65},      // .5/1 and 1.6/2
		{"run mean", sm.RunMean, 1.05},
		{"base run mean", sm.BaseRunMean, 4.0 / 3},
		{"push", sm.PushMedian, 0.2},
		{"base push", sm.BasePushMedian, 2},
		{"fetched share", sm.FetchedShare, 0.15},     // 10/100 and 40/200
		{"read share", sm.ReadShare, 0.03},           // 2/100 and 8/200
		{"fetched over read", sm.FetchedOverRead, 5}, // 10/2 and 40/8
	} {
		if !near(f.got, f.want) {
			t.Errorf("%s = %v, want %v", f.what, f.got, f.want)
		}
	}
	if !math.IsNaN(sm.MovedShare) {
		t.Errorf("moved share %v without a link, want NaN", sm.MovedShare)
	}
	// Behind a link, what crossed it over the image, per workload.
	r := testResults()
	for i := range r.Samples {
		if x := &r.Samples[i]; x.System == "slacker" && x.Cycle == harness.Deployment && x.OK {
			x.LinkBytes = map[string]int64{"alpha": 4e6, "beta": 20e6}[x.Workload]
		}
	}
	if got := Aggregate(r).Summarize("slacker").MovedShare; !near(got, 0.07) { // 4/100 and 20/200
		t.Errorf("moved share %v, want 0.07", got)
	}
	// Failed samples are counted, never dropped.
	if sm.DeployN != 2 || sm.DevN != 1 || sm.Failed != 3 || sm.Samples != 10 || sm.BaseFailed != 1 {
		t.Errorf("counts: deploy %d dev %d, failed %d of %d, baseline failed %d", sm.DeployN, sm.DevN, sm.Failed, sm.Samples, sm.BaseFailed)
	}

	ts := Targets(sm, 0)
	if len(ts) != 4 || !ts[0].Met || ts[1].Met || ts[2].Met || ts[3].Met || !ts[0].Relevant || !ts[1].Relevant || !ts[2].Relevant || !ts[3].Relevant {
		t.Errorf("targets on loopback: %+v", ts)
	}
	if ts := Targets(sm, 1e9); ts[0].Want != 10 || ts[0].Met {
		t.Errorf("deployment target at 1 Gbit/s: %+v", ts[0])
	}
}

// TestSummaryEmpty: no samples, or only failed ones, give NaN statistics (shown as
// "–"), zero counts for what is missing, and irrelevant targets: never a panic or
// a made-up number.
func TestSummaryEmpty(t *testing.T) {
	empty := &harness.Results{Version: 1, Systems: []harness.SystemInfo{{Name: "overlayfs"}, {Name: "slacker"}},
		Workloads: []harness.WorkloadInfo{{Name: "alpha", Category: "distro", DataBytes: 1}}}
	allFailed := testResults()
	for i := range allFailed.Samples {
		allFailed.Samples[i].OK = false
	}
	for _, tt := range []struct {
		name             string
		r                *harness.Results
		samples, failed  int
		baseFailed, cell int
	}{
		{"no samples", empty, 0, 0, 0, 0},
		{"all failed", allFailed, 10, 10, 10, 3},
		{"no systems", &harness.Results{Version: 1}, 0, 0, 0, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tb := Aggregate(tt.r)
			sm := tb.Summarize("slacker")
			for _, v := range []float64{sm.DeployMedian, sm.DeployP90, sm.DevMedian, sm.PullP90, sm.BasePullP90, sm.RunRatio,
				sm.RunMean, sm.PushMedian, sm.FetchedShare, sm.ReadShare} {
				if !math.IsNaN(v) {
					t.Errorf("summary %+v has a number without successful samples", sm)
					break
				}
			}
			if sm.DeployN != 0 || sm.DevN != 0 || sm.Samples != tt.samples || sm.Failed != tt.failed || sm.BaseFailed != tt.baseFailed {
				t.Errorf("counts %+v", sm)
			}
			for _, tg := range Targets(sm, 0) {
				if tg.Relevant || tg.Met {
					t.Errorf("target %+v without data", tg)
				}
			}
			if c := tb.Cell("alpha", "slacker", harness.Deployment); tt.cell > 0 && (c.OK() || c.Failed != tt.cell) {
				t.Errorf("alpha cell %+v", c)
			}
		})
	}
}

func TestBaseline(t *testing.T) {
	tests := []struct {
		systems []string
		want    string
	}{
		{[]string{"overlayfs", "slacker"}, "overlayfs"},
		{[]string{"slacker", "stargz", "overlayfs"}, "overlayfs"},
		{[]string{"native", "slacker"}, "native"},
		{[]string{"slacker"}, "slacker"},
		{nil, ""},
	}
	for _, tt := range tests {
		r := &harness.Results{}
		for _, s := range tt.systems {
			r.Systems = append(r.Systems, harness.SystemInfo{Name: s})
		}
		tb := Aggregate(r)
		if tb.Baseline != tt.want {
			t.Errorf("systems %v: baseline %q, want %q", tt.systems, tb.Baseline, tt.want)
		}
		for _, o := range tb.others() {
			if o == tb.Baseline {
				t.Errorf("systems %v: the baseline is among the others", tt.systems)
			}
		}
		if len(tt.systems) > 0 && len(tb.others()) != len(tt.systems)-1 {
			t.Errorf("systems %v: others %v", tt.systems, tb.others())
		}
	}
}
