package report

import (
	"math"
	"slices"
	"sort"

	"github.com/slacker-dev/slacker/bench/hellobench/harness"
)

// Quantile returns the q-quantile (0 ≤ q ≤ 1) of v, interpolating linearly between
// order statistics (Hyndman and Fan's type 7, the default of R and NumPy). It is
// NaN for no values.
func Quantile(v []float64, q float64) float64 {
	if len(v) == 0 || math.IsNaN(q) {
		return math.NaN()
	}
	s := slices.Clone(v)
	sort.Float64s(s)
	q = min(max(q, 0), 1)
	h := q * float64(len(s)-1)
	lo := int(math.Floor(h))
	hi := min(lo+1, len(s)-1)
	return s[lo] + (h-float64(lo))*(s[hi]-s[lo])
}

// Median is Quantile(v, 0.5).
func Median(v []float64) float64 { return Quantile(v, 0.5) }

// Mean is the arithmetic mean of v (NaN for none).
func Mean(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

// CDF returns v sorted and, for each value, the fraction of values at or below it
// (i+1)/n: the points of an empirical CDF's steps.
func CDF(v []float64) (xs, ps []float64) {
	xs = slices.Clone(v)
	sort.Float64s(xs)
	ps = make([]float64, len(xs))
	for i := range xs {
		ps[i] = float64(i+1) / float64(len(xs))
	}
	return xs, ps
}

// Cell is what one system did with one workload in one cycle: medians over its
// successful samples (NaN when there are none).
type Cell struct {
	Workload, System, Cycle string
	// N is the number of successful samples, Failed the failed ones.
	N, Failed int
	// Failures are the failed samples' reasons.
	Failures               []string
	Push, Pull, Run, Total float64
	// Fetched = Registry + Store bytes; Read is the image bytes read (NaN if unknown).
	Fetched, Registry, Store, Link, Read float64
	// Output is the first successful sample's output (exit-rule workloads).
	Output string
}

// OK reports whether the cell has at least one successful sample.
func (c *Cell) OK() bool { return c != nil && c.N > 0 }

type cellKey struct{ w, s, c string }

// Table holds the cells of one results file.
type Table struct {
	R *harness.Results
	// Systems in the results' order; Baseline is the one the others are compared
	// with (overlayfs when present, else the first).
	Systems  []string
	Baseline string
	cells    map[cellKey]*Cell
}

// Aggregate computes the cells of r.
func Aggregate(r *harness.Results) *Table {
	t := &Table{R: r, cells: map[cellKey]*Cell{}}
	for _, s := range r.Systems {
		t.Systems = append(t.Systems, s.Name)
	}
	if len(t.Systems) > 0 {
		t.Baseline = t.Systems[0]
	}
	if slices.Contains(t.Systems, "overlayfs") {
		t.Baseline = "overlayfs"
	}
	type acc struct {
		push, pull, run, total, fetched, reg, store, link, read []float64
	}
	accs := map[cellKey]*acc{}
	for i := range r.Samples {
		s := &r.Samples[i]
		k := cellKey{s.Workload, s.System, s.Cycle}
		c := t.cells[k]
		if c == nil {
			c = &Cell{Workload: s.Workload, System: s.System, Cycle: s.Cycle}
			t.cells[k] = c
			accs[k] = &acc{}
		}
		if !s.OK {
			c.Failed++
			c.Failures = append(c.Failures, s.Stage+": "+s.Failure)
			continue
		}
		c.N++
		if c.Output == "" {
			c.Output = s.Output
		}
		a := accs[k]
		a.push = append(a.push, s.Push)
		a.pull = append(a.pull, s.Pull)
		a.run = append(a.run, s.RunTime)
		a.total = append(a.total, s.Total)
		a.fetched = append(a.fetched, float64(s.Fetched()))
		a.reg = append(a.reg, float64(s.RegistryBytes))
		a.store = append(a.store, float64(s.StoreBytes))
		a.link = append(a.link, float64(s.LinkBytes))
		if s.ReadBytes >= 0 {
			a.read = append(a.read, float64(s.ReadBytes))
		}
	}
	for k, c := range t.cells {
		a := accs[k]
		c.Push, c.Pull, c.Run, c.Total = Median(a.push), Median(a.pull), Median(a.run), Median(a.total)
		c.Fetched, c.Registry, c.Store, c.Link, c.Read = Median(a.fetched), Median(a.reg), Median(a.store), Median(a.link), Median(a.read)
	}
	return t
}

// Cell returns the cell of a workload, system and cycle (nil if never sampled).
func (t *Table) Cell(workload, system, cycle string) *Cell {
	return t.cells[cellKey{workload, system, cycle}]
}

// Speedup is the baseline's median cycle time over a system's, for one workload.
type Speedup struct {
	Workload, Category string
	Value              float64
}

// Speedups returns baseline/subject time of a cycle for every workload where both
// have successful samples, in workload order.
func (t *Table) Speedups(cycle, subject string) []Speedup {
	var out []Speedup
	for _, w := range t.R.Workloads {
		b, s := t.Cell(w.Name, t.Baseline, cycle), t.Cell(w.Name, subject, cycle)
		if !b.OK() || !s.OK() || s.Total <= 0 {
			continue
		}
		out = append(out, Speedup{w.Name, w.Category, b.Total / s.Total})
	}
	return out
}

// Values extracts the speedup values.
func Values(sp []Speedup) []float64 {
	v := make([]float64, len(sp))
	for i, s := range sp {
		v[i] = s.Value
	}
	return v
}

// PerWorkload returns f of system's cell for each workload that has a successful
// one in cycle.
func (t *Table) PerWorkload(system, cycle string, f func(*Cell) float64) []float64 {
	var v []float64
	for _, w := range t.R.Workloads {
		if c := t.Cell(w.Name, system, cycle); c.OK() {
			if x := f(c); !math.IsNaN(x) {
				v = append(v, x)
			}
		}
	}
	return v
}

// Ratios returns f(subject)/f(baseline) per workload where both succeeded.
func (t *Table) Ratios(subject, cycle string, f func(*Cell) float64) []float64 {
	var v []float64
	for _, w := range t.R.Workloads {
		b, s := t.Cell(w.Name, t.Baseline, cycle), t.Cell(w.Name, subject, cycle)
		if b.OK() && s.OK() && f(b) > 0 {
			v = append(v, f(s)/f(b))
		}
	}
	return v
}

// Summary is the headline of one profile for one system against the baseline.
type Summary struct {
	Profile, System, Baseline string
	// Workloads compared in each cycle.
	DeployN, DevN int
	// Speedups of the cycles: median and 90th percentile across workloads.
	DeployMedian, DeployP90, DevMedian, DevP90 float64
	// PullP90 and BasePullP90: 90th percentile of median pull times (s).
	PullP90, BasePullP90, PullMedian, BasePullMedian float64
	// RunRatio is the median over workloads of run time / the baseline's (> 1:
	// slower); RunMean and BaseRunMean the mean run times (s).
	RunRatio, RunMean, BaseRunMean float64
	// PushMedian and BasePushMedian: median push of a change (s).
	PushMedian, BasePushMedian float64
	// FetchedShare is the median over workloads of bytes fetched / image size
	// (uncompressed); ReadShare the same for bytes read.
	FetchedShare, ReadShare float64
	// FetchedOverRead is the median over workloads of bytes fetched / bytes read.
	FetchedOverRead float64
	// MovedShare is the median over workloads of the bytes that crossed the
	// emulated link towards the node (IP level: compressed chunks, gzip layers,
	// eStargz) / image size (uncompressed), like for like across systems, where
	// FetchedShare counts Slacker's chunks as the cache holds them, plain; NaN
	// without a link.
	MovedShare float64
	// Failed counts failed samples of the system and of the baseline.
	Failed, BaseFailed, Samples int
}

// Summarize computes the summary of subject against the baseline.
func (t *Table) Summarize(subject string) Summary {
	s := Summary{Profile: t.R.Profile.Name, System: subject, Baseline: t.Baseline}
	dep, dev := t.Speedups(harness.Deployment, subject), t.Speedups(harness.Development, subject)
	s.DeployN, s.DevN = len(dep), len(dev)
	s.DeployMedian, s.DeployP90 = Median(Values(dep)), Quantile(Values(dep), 0.9)
	s.DevMedian, s.DevP90 = Median(Values(dev)), Quantile(Values(dev), 0.9)
	pull := func(c *Cell) float64 { return c.Pull }
	s.PullP90 = Quantile(t.PerWorkload(subject, harness.Deployment, pull), 0.9)
	s.BasePullP90 = Quantile(t.PerWorkload(t.Baseline, harness.Deployment, pull), 0.9)
	s.PullMedian = Median(t.PerWorkload(subject, harness.Deployment, pull))
	s.BasePullMedian = Median(t.PerWorkload(t.Baseline, harness.Deployment, pull))
	run := func(c *Cell) float64 { return c.Run }
	s.RunRatio = Median(t.Ratios(subject, harness.Deployment, run))
	s.RunMean = Mean(t.PerWorkload(subject, harness.Deployment, run))
	s.BaseRunMean = Mean(t.PerWorkload(t.Baseline, harness.Deployment, run))
	push := func(c *Cell) float64 { return c.Push }
	s.PushMedian = Median(t.PerWorkload(subject, harness.Development, push))
	s.BasePushMedian = Median(t.PerWorkload(t.Baseline, harness.Development, push))
	var fetched, read, over, moved []float64
	for _, w := range t.R.Workloads {
		c := t.Cell(w.Name, subject, harness.Deployment)
		if !c.OK() || w.DataBytes <= 0 {
			continue
		}
		fetched = append(fetched, c.Fetched/float64(w.DataBytes))
		if c.Link > 0 {
			moved = append(moved, c.Link/float64(w.DataBytes))
		}
		if !math.IsNaN(c.Read) {
			read = append(read, c.Read/float64(w.DataBytes))
			if c.Read > 0 {
				over = append(over, c.Fetched/c.Read)
			}
		}
	}
	s.FetchedShare, s.ReadShare, s.FetchedOverRead = Median(fetched), Median(read), Median(over)
	s.MovedShare = math.NaN()
	if len(moved) > 0 {
		s.MovedShare = Median(moved)
	}
	for _, x := range t.R.Samples {
		switch {
		case x.System == subject:
			s.Samples++
			if !x.OK {
				s.Failed++
			}
		case x.System == t.Baseline && !x.OK:
			s.BaseFailed++
		}
	}
	return s
}

// Target is one of the benchmark's targets, checked against a summary.
type Target struct {
	What     string
	Want     float64
	Got      float64
	AtLeast  bool // Got must be ≥ Want (else ≤)
	Met      bool
	Relevant bool
}

// Targets are the project's targets for a profile (benchmarks, not tests):
// deployment ≥ 10x at 1 Gbit/s and ≥ 5x on loopback, development ≥ 20x, fetched
// ≤ 10% of the image (median).
func Targets(s Summary, linkRate int64) []Target {
	dep := Target{What: "deployment speedup (median) ≥ 5x on loopback", Want: 5, Got: s.DeployMedian, AtLeast: true}
	if linkRate > 0 {
		dep = Target{What: "deployment speedup (median) ≥ 10x at 1 Gbit/s", Want: 10, Got: s.DeployMedian, AtLeast: true}
	}
	ts := []Target{dep,
		{What: "development speedup (median) ≥ 20x", Want: 20, Got: s.DevMedian, AtLeast: true},
		{What: "bytes fetched ≤ 10% of the image (median)", Want: 0.10, Got: s.FetchedShare},
		{What: "bytes fetched ≤ 1.2x the bytes read (median)", Want: 1.2, Got: s.FetchedOverRead},
	}
	for i := range ts {
		t := &ts[i]
		if math.IsNaN(t.Got) {
			continue
		}
		t.Relevant = true
		t.Met = (t.AtLeast && t.Got >= t.Want) || (!t.AtLeast && t.Got <= t.Want)
	}
	return ts
}
