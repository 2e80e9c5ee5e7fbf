package docsgen

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/slacker-dev/slacker/bench/hellobench/harness"
	"github.com/slacker-dev/slacker/bench/hellobench/report"
)

// HelloBench's results (docs/hellobench/results-*.json, `slacker-bench hello`),
// through package report's statistics: Slacker ("slacker") against the baseline
// (containerd + overlayfs, "overlayfs"). Unless said otherwise a number is a median
// over the workloads both systems ran, of per-workload medians.
func init() {
	figures["hello"] = map[string]figure{
		// deploy|develop median|p90: the speedup of the cycle.
		"deploy":  helloSummary(1, func(s report.Summary, a []string) (float64, error) { return pick(a[0], s.DeployMedian, s.DeployP90) }),
		"develop": helloSummary(1, func(s report.Summary, a []string) (float64, error) { return pick(a[0], s.DevMedian, s.DevP90) }),
		// pull-p90 SYSTEM: the 90th percentile of the system's pull times.
		"pull-p90": helloSummary(1, func(s report.Summary, a []string) (float64, error) {
			return bySystem(a[0], s.PullP90, s.BasePullP90)
		}),
		// run-ratio: Slacker's run until ready over overlayfs's (deployment).
		"run-ratio": helloSummary(0, func(s report.Summary, _ []string) (float64, error) { return s.RunRatio, nil }),
		// fetched-share, read-share: bytes Slacker moved, and the container read,
		// over the image's uncompressed size.
		"fetched-share": helloSummary(0, func(s report.Summary, _ []string) (float64, error) { return s.FetchedShare, nil }),
		"read-share":    helloSummary(0, func(s report.Summary, _ []string) (float64, error) { return s.ReadShare, nil }),
		// fetched-over-read: bytes Slacker moved over bytes the container read.
		"fetched-over-read": helloSummary(0, func(s report.Summary, _ []string) (float64, error) { return s.FetchedOverRead, nil }),
		// failed, succeeded, samples: failed and successful samples of both
		// systems, and all samples.
		"failed": helloSummary(0, func(s report.Summary, _ []string) (float64, error) { return float64(s.Failed + s.BaseFailed), nil }),
		"samples": number(0, func(d *Data, src string, _ []string) (float64, error) {
			t, err := d.hello(src)
			if err != nil {
				return 0, err
			}
			return float64(len(t.R.Samples)), nil
		}),
		"succeeded": number(0, func(d *Data, src string, _ []string) (float64, error) {
			t, err := d.hello(src)
			if err != nil {
				return 0, err
			}
			n := 0
			for _, x := range t.R.Samples {
				if x.OK {
					n++
				}
			}
			return float64(n), nil
		}),
		// runs: repetitions of every sample.
		// The same of another system of the run than slacker (say slacker-block):
		// "sys-deploy SYSTEM median", "sys-develop SYSTEM p90", "sys-fetched-share
		// SYSTEM", "sys-run-ratio SYSTEM".
		"sys-deploy": helloRun(2, func(t *report.Table, a []string) (float64, error) {
			s := t.Summarize(a[0])
			if s.DeployN == 0 {
				return 0, fmt.Errorf("no deployment samples of system %q", a[0])
			}
			return pick(a[1], s.DeployMedian, s.DeployP90)
		}),
		"sys-develop": helloRun(2, func(t *report.Table, a []string) (float64, error) {
			s := t.Summarize(a[0])
			if s.DevN == 0 {
				return 0, fmt.Errorf("no development samples of system %q", a[0])
			}
			return pick(a[1], s.DevMedian, s.DevP90)
		}),
		"sys-fetched-share": helloRun(1, func(t *report.Table, a []string) (float64, error) {
			s := t.Summarize(a[0])
			if s.DeployN == 0 {
				return 0, fmt.Errorf("no deployment samples of system %q", a[0])
			}
			return s.FetchedShare, nil
		}),
		// sys-moved-share SYSTEM: the median share of the image that crossed the
		// emulated link towards the node for SYSTEM (like for like: compressed
		// chunks, gzip layers, eStargz).
		"sys-moved-share": helloRun(1, func(t *report.Table, a []string) (float64, error) {
			s := t.Summarize(a[0])
			if s.DeployN == 0 {
				return 0, fmt.Errorf("no deployment samples of system %q", a[0])
			}
			if math.IsNaN(s.MovedShare) {
				return 0, fmt.Errorf("system %q: no bytes counted on a link (a loopback run?)", a[0])
			}
			return s.MovedShare, nil
		}),
		"sys-run-ratio": helloRun(1, func(t *report.Table, a []string) (float64, error) {
			s := t.Summarize(a[0])
			if s.DeployN == 0 {
				return 0, fmt.Errorf("no deployment samples of system %q", a[0])
			}
			return s.RunRatio, nil
		}),
		// vs-deploy SYSTEM OTHER median|p90: SYSTEM's deployment speedup over
		// OTHER's (OTHER's total over SYSTEM's, per workload both ran), e.g.
		// slacker-containerd over stargz; vs-run-ratio SYSTEM OTHER: SYSTEM's run
		// until ready over OTHER's; vs-failed SYSTEM OTHER: their failed samples.
		"vs-deploy": helloRun(3, func(t *report.Table, a []string) (float64, error) {
			s, err := summarizeAgainst(t, a[0], a[1])
			if err != nil {
				return 0, err
			}
			return pick(a[2], s.DeployMedian, s.DeployP90)
		}),
		"vs-run-ratio": helloRun(2, func(t *report.Table, a []string) (float64, error) {
			s, err := summarizeAgainst(t, a[0], a[1])
			return s.RunRatio, err
		}),
		"vs-failed": helloRun(2, func(t *report.Table, a []string) (float64, error) {
			s, err := summarizeAgainst(t, a[0], a[1])
			return float64(s.Failed + s.BaseFailed), err
		}),
		"runs": helloRun(0, func(t *report.Table, _ []string) (float64, error) { return float64(t.R.Runs), nil }),
		// workloads: how many workloads the run measured; oneshot: how many of
		// them are ready when they exit.
		"workloads": number(0, func(d *Data, src string, _ []string) (float64, error) {
			t, err := d.helloAny(src)
			if err != nil {
				return 0, err
			}
			return float64(len(t.R.Workloads)), nil
		}),
		// own-share SYSTEM fetched|read|link: the median over workloads of the
		// bytes the system's deployments fetched (plain), read, or moved on the
		// link, over the image's uncompressed size; of any run of the system,
		// overlayfs beside or not.
		"own-share": number(2, func(d *Data, src string, a []string) (float64, error) {
			t, err := d.helloAny(src)
			if err != nil {
				return 0, err
			}
			return helloOwnShare(t, a[0], a[1])
		}),
		"oneshot": helloRun(0, func(t *report.Table, _ []string) (float64, error) {
			n := 0
			for _, w := range t.R.Workloads {
				if strings.HasPrefix(w.Ready, "{ exit") {
					n++
				}
			}
			return float64(n), nil
		}),
		// step SYSTEM CYCLES push|pull|run|total: the median over workloads of the
		// system's median time of that step (CYCLES: one, or both comma-separated);
		// the only figure of a run without overlayfs beside.
		"step": numbers(3, func(d *Data, src string, a []string) ([]float64, error) {
			t, err := d.helloAny(src)
			if err != nil {
				return nil, err
			}
			var vs []float64
			for _, cycle := range strings.Split(a[1], ",") {
				v, err := helloStep(t, a[0], cycle, a[2])
				if err != nil {
					return nil, err
				}
				vs = append(vs, v)
			}
			return vs, nil
		}),
		// layer-bytes gzip|tar: the baseline's distinct layers after the publish.
		"layer-bytes": helloRun(1, func(t *report.Table, a []string) (float64, error) {
			f := t.R.Footprint
			if f == nil {
				return 0, fmt.Errorf("no footprint in the results (recorded since issue 11's compressed chunks)")
			}
			switch a[0] {
			case "gzip":
				return float64(f.GzipLayerBytes), nil
			case "tar":
				return float64(f.TarLayerBytes), nil
			}
			return 0, fmt.Errorf("layer-bytes %q: want gzip or tar", a[0])
		}),
		// store-bytes SYSTEM content|stored: the system's store after the publish,
		// as content and as the store keeps it.
		"store-bytes": helloRun(2, func(t *report.Table, a []string) (float64, error) {
			sf := t.R.Footprint.Store(a[0])
			if sf == nil {
				return 0, fmt.Errorf("no footprint of the store of system %q", a[0])
			}
			switch a[1] {
			case "content":
				return float64(sf.ContentBytes), nil
			case "stored":
				return float64(sf.StoredBytes), nil
			}
			return 0, fmt.Errorf("store-bytes %q: want content or stored", a[1])
		}),
		// store-vs-gzip SYSTEM: the system's store as kept over the baseline's
		// distinct gzip layers.
		"store-vs-gzip": helloRun(1, func(t *report.Table, a []string) (float64, error) {
			sf := t.R.Footprint.Store(a[0])
			if sf == nil || t.R.Footprint.GzipLayerBytes == 0 {
				return 0, fmt.Errorf("no footprint of the store of system %q", a[0])
			}
			return float64(sf.StoredBytes) / float64(t.R.Footprint.GzipLayerBytes), nil
		}),
		// wire-share SYSTEM: the median, over the system's deployments, of the bytes
		// that crossed the link towards the node over the bytes the node fetched.
		"wire-share": helloRun(1, func(t *report.Table, a []string) (float64, error) {
			var v []float64
			for _, x := range t.R.Samples {
				if x.System == a[0] && x.Cycle == harness.Deployment && x.OK && x.LinkBytes > 0 && x.Fetched() > 0 {
					v = append(v, float64(x.LinkBytes)/float64(x.Fetched()))
				}
			}
			if len(v) == 0 {
				return 0, fmt.Errorf("no deployment of system %q across a link", a[0])
			}
			return report.Median(v), nil
		}),
		// link-max SYSTEM: the most bytes one of the system's deployments moved
		// over the link towards the node.
		"link-max": helloRun(1, func(t *report.Table, a []string) (float64, error) {
			var n int64
			for _, x := range t.R.Samples {
				if x.System == a[0] && x.Cycle == harness.Deployment && x.OK {
					n = max(n, x.LinkBytes)
				}
			}
			if n == 0 {
				return 0, fmt.Errorf("no deployment of system %q across a link", a[0])
			}
			return float64(n), nil
		}),
		// publish-link SYSTEM: bytes that crossed the link away from the node while
		// the system published every image.
		"publish-link": helloRun(1, func(t *report.Table, a []string) (float64, error) { return helloPublishLink(t, a[0], false) }),
		// optimize-link SYSTEM: bytes that crossed the link away from the node while
		// the system laid every image out for start-up (--optimize) and published it
		// again: what a start-up layout adds to the store.
		"optimize-link": helloRun(1, func(t *report.Table, a []string) (float64, error) { return helloPublishLink(t, a[0], true) }),
		// run-gap: Slacker's run until ready minus overlayfs's (deployment).
		"run-gap": helloRun(0, helloRunGap),
		// link-time: the link time of the bytes Slacker moved at start-up (median
		// bytes over the link's rate); latency: what is left of run-gap.
		"link-time": helloRun(0, helloLinkTime),
		"latency": helloRun(0, func(t *report.Table, a []string) (float64, error) {
			g, err := helloRunGap(t, a)
			if err != nil {
				return 0, err
			}
			l, err := helloLinkTime(t, a)
			return g - l, err
		}),
		// fetched: the bytes Slacker moved for a deployment; moved-read: those bytes
		// over the bytes the container read.
		"fetched": helloRun(0, func(t *report.Table, _ []string) (float64, error) {
			return report.Median(t.PerWorkload("slacker", harness.Deployment, func(c *report.Cell) float64 { return c.Fetched })), nil
		}),
		"moved-read": helloRun(0, func(t *report.Table, _ []string) (float64, error) {
			return report.Median(t.PerWorkload("slacker", harness.Deployment, func(c *report.Cell) float64 {
				if !(c.Read > 0) {
					return math.NaN()
				}
				return c.Fetched / c.Read
			})), nil
		}),
		// ceiling: overlayfs's deployment over its own run until ready, the speedup
		// of a free pull and a run as fast as overlayfs's; dev-ceiling: overlayfs's
		// development cycle over Slacker's run alone.
		"ceiling": helloRun(0, func(t *report.Table, _ []string) (float64, error) {
			return report.Median(t.PerWorkload(t.Baseline, harness.Deployment, func(c *report.Cell) float64 { return c.Total / c.Run })), nil
		}),
		"dev-ceiling": helloRun(0, func(t *report.Table, _ []string) (float64, error) {
			var v []float64
			for _, w := range t.R.Workloads {
				b, s := t.Cell(w.Name, t.Baseline, harness.Development), t.Cell(w.Name, "slacker", harness.Development)
				if b.OK() && s.OK() && s.Run > 0 {
					v = append(v, b.Total/s.Run)
				}
			}
			return report.Median(v), nil
		}),
		// faster OTHER: for how many workloads Slacker's run until ready was faster
		// here than in the results file OTHER.
		"faster": numbers(1, func(d *Data, src string, a []string) ([]float64, error) {
			t, err := d.helloAny(src)
			if err != nil {
				return nil, err
			}
			o, err := d.helloAny(a[0])
			if err != nil {
				return nil, err
			}
			n := 0
			for _, w := range t.R.Workloads {
				c, oc := t.Cell(w.Name, "slacker", harness.Deployment), o.Cell(w.Name, "slacker", harness.Deployment)
				if c.OK() && oc.OK() && c.Run < oc.Run {
					n++
				}
			}
			return []float64{float64(n)}, nil
		}),
		// publish-vs OTHER SYSTEM: publish here over publish in OTHER.
		"publish-vs": numbers(2, func(d *Data, src string, a []string) ([]float64, error) {
			var v [2]float64
			for i, s := range []string{src, a[0]} {
				t, err := d.hello(s)
				if err != nil {
					return nil, err
				}
				if v[i], err = helloPublish(t, a[1]); err != nil {
					return nil, err
				}
			}
			return []float64{v[0] / v[1]}, nil
		}),
		// publish SYSTEM: the time the system took to publish every image (for
		// Slacker, conversion included), summed.
		"publish": helloRun(1, func(t *report.Table, a []string) (float64, error) { return helloPublish(t, a[0]) }),
		// image NAME layers|compressed|data: a workload's image as the results
		// record it: its layers, its gzip and its uncompressed size (bytes).
		"image": helloRun(2, func(t *report.Table, a []string) (float64, error) {
			w := t.R.Workload(a[0])
			if w == nil {
				return 0, fmt.Errorf("no workload %q", a[0])
			}
			return workloadField(w, a[1])
		}),
		// images sum|median layers|compressed|data: over every workload's image.
		"images": helloRun(2, func(t *report.Table, a []string) (float64, error) {
			var v []float64
			for i := range t.R.Workloads {
				x, err := workloadField(&t.R.Workloads[i], a[1])
				if err != nil {
					return 0, err
				}
				v = append(v, x)
			}
			switch a[0] {
			case "sum":
				sum := 0.0
				for _, x := range v {
					sum += x
				}
				return sum, nil
			case "median":
				return report.Median(v), nil
			}
			return 0, fmt.Errorf("%q: sum or median", a[0])
		}),
		// elapsed: the run's wall-clock time.
		"elapsed": helloRun(0, func(t *report.Table, _ []string) (float64, error) { return t.R.Elapsed, nil }),
		// the tables of docs/BENCHMARKS.md and docs/hellobench/README.md, one row
		// per source.
		"summary-table": text(helloSummaryTable),
		"profile-table": text(helloProfileTable),
		"steps-table":   text(helloStepsTable),
	}
}

// hello is the run in src, which must have measured a Slacker system and
// overlayfs: most figures compare the two.
func (d *Data) hello(src string) (*report.Table, error) {
	t, err := d.helloAny(src)
	if err == nil && t.Baseline != "overlayfs" {
		err = fmt.Errorf("%s: systems %v, the docs compare a Slacker system with overlayfs", src, t.Systems)
	}
	return t, err
}

// helloAny is the run in src, which must have measured a Slacker system; for
// the figures of one system's own times (step), such as a run of Slacker's
// binaries before and after a change, without overlayfs beside.
func (d *Data) helloAny(src string) (*report.Table, error) {
	return load(d, src, func(p string) (*report.Table, error) {
		r, err := harness.ReadResults(p)
		if err != nil {
			return nil, err
		}
		t := report.Aggregate(r)
		if !slices.ContainsFunc(t.Systems, func(s string) bool { return strings.HasPrefix(s, "slacker") }) {
			return nil, fmt.Errorf("%s: systems %v, the docs measure a Slacker system", p, t.Systems)
		}
		return t, nil
	})
}

func containsSystem(t *report.Table, s string) bool {
	for _, x := range t.Systems {
		if x == s {
			return true
		}
	}
	return false
}

func helloRun(nargs int, f func(t *report.Table, args []string) (float64, error)) figure {
	return number(nargs, func(d *Data, src string, args []string) (float64, error) {
		t, err := d.hello(src)
		if err != nil {
			return 0, err
		}
		return f(t, args)
	})
}

// helloSummary is a figure of the system "slacker" against the baseline; a run
// without it (slacker-containerd and stargz only) has the sys- and vs- figures.
func helloSummary(nargs int, f func(s report.Summary, args []string) (float64, error)) figure {
	return helloRun(nargs, func(t *report.Table, args []string) (float64, error) {
		if !containsSystem(t, "slacker") {
			return 0, fmt.Errorf("the run has no system \"slacker\" (it has %s): use the sys- or vs- figures", strings.Join(t.Systems, ", "))
		}
		return f(t.Summarize("slacker"), args)
	})
}

// summarizeAgainst summarizes system against other instead of the run's baseline.
func summarizeAgainst(t *report.Table, system, other string) (report.Summary, error) {
	for _, x := range []string{system, other} {
		if !slices.Contains(t.Systems, x) {
			return report.Summary{}, fmt.Errorf("the run has no system %q (it has %s)", x, strings.Join(t.Systems, ", "))
		}
	}
	u := *t
	u.Baseline = other
	s := u.Summarize(system)
	if s.DeployN == 0 {
		return s, fmt.Errorf("no deployment samples of %s beside %s", system, other)
	}
	return s, nil
}

func pick(which string, median, p90 float64) (float64, error) {
	switch which {
	case "median":
		return median, nil
	case "p90":
		return p90, nil
	}
	return 0, fmt.Errorf("%q: median or p90", which)
}

func bySystem(sys string, slacker, overlayfs float64) (float64, error) {
	switch sys {
	case "slacker":
		return slacker, nil
	case "overlayfs":
		return overlayfs, nil
	}
	return 0, fmt.Errorf("system %q: slacker or overlayfs", sys)
}

func helloStep(t *report.Table, sys, cycle, step string) (float64, error) {
	var f func(c *report.Cell) float64
	switch step {
	case "push":
		f = func(c *report.Cell) float64 { return c.Push }
	case "pull":
		f = func(c *report.Cell) float64 { return c.Pull }
	case "run":
		f = func(c *report.Cell) float64 { return c.Run }
	case "total":
		f = func(c *report.Cell) float64 { return c.Total }
	default:
		return 0, fmt.Errorf("step %q: push, pull, run or total", step)
	}
	if cycle != harness.Deployment && cycle != harness.Development {
		return 0, fmt.Errorf("cycle %q: %s or %s", cycle, harness.Deployment, harness.Development)
	}
	v := t.PerWorkload(sys, cycle, f)
	if len(v) == 0 {
		return 0, fmt.Errorf("no %s samples of %s", cycle, sys)
	}
	return report.Median(v), nil
}

// helloOwnShare is sys's share of the image of the kind what (fetched, read,
// link), as the run's summary of sys has it, which needs no baseline.
func helloOwnShare(t *report.Table, sys, what string) (float64, error) {
	sm := t.Summarize(sys)
	var v float64
	switch what {
	case "fetched":
		v = sm.FetchedShare
	case "read":
		v = sm.ReadShare
	case "link":
		v = sm.MovedShare
	default:
		return 0, fmt.Errorf("own-share %q: fetched, read or link", what)
	}
	if math.IsNaN(v) || v <= 0 {
		return 0, fmt.Errorf("no deployment of %s recorded %s bytes", sys, what)
	}
	return v, nil
}

func workloadField(w *harness.WorkloadInfo, field string) (float64, error) {
	switch field {
	case "layers":
		return float64(w.Layers), nil
	case "compressed":
		return float64(w.CompressedBytes), nil
	case "data":
		return float64(w.DataBytes), nil
	}
	return 0, fmt.Errorf("%q: layers, compressed or data", field)
}

func helloPublishLink(t *report.Table, sys string, optimize bool) (float64, error) {
	var n int64
	for _, p := range t.R.Publish {
		if p.System == sys && p.OK && p.Optimize == optimize {
			n += p.LinkBytes
		}
	}
	if n == 0 {
		what := "publish"
		if optimize {
			what = "start-up layout"
		}
		return 0, fmt.Errorf("no %s of system %q across a link", what, sys)
	}
	return float64(n), nil
}

func helloPublish(t *report.Table, sys string) (float64, error) {
	sum, n := 0.0, 0
	for _, p := range t.R.Publish {
		if p.System == sys && p.OK && !p.Optimize {
			sum += p.Total
			n++
		}
	}
	if n == 0 {
		return 0, fmt.Errorf("no publish samples of %s", sys)
	}
	return sum, nil
}

func helloRunGap(t *report.Table, _ []string) (float64, error) {
	s, err := helloStep(t, "slacker", harness.Deployment, "run")
	if err != nil {
		return 0, err
	}
	o, err := helloStep(t, t.Baseline, harness.Deployment, "run")
	return s - o, err
}

func helloLinkTime(t *report.Table, _ []string) (float64, error) {
	if t.R.Profile.RateBits <= 0 {
		return 0, fmt.Errorf("profile %s has no link", t.R.Profile.Name)
	}
	b := report.Median(t.PerWorkload("slacker", harness.Deployment, func(c *report.Cell) float64 { return c.Fetched }))
	return b * 8 / float64(t.R.Profile.RateBits), nil
}

// profileName is how the docs name a profile: loopback, 1 Gbit/s (with its round
// trip if rtt).
func profileName(p harness.Profile, rtt bool) string {
	if p.RateBits <= 0 {
		return p.Name
	}
	var s string
	switch r := float64(p.RateBits); {
	case r >= 1e9:
		s = fmt.Sprintf("%g Gbit/s", r/1e9)
	default:
		s = fmt.Sprintf("%g Mbit/s", r/1e6)
	}
	if rtt {
		s += fmt.Sprintf(", %g ms", p.RTTMillis)
	}
	return s
}

func helloTables(d *Data, srcs []string, args []string, f func(t *report.Table, s report.Summary) (string, error)) ([]string, error) {
	if len(args) != 0 {
		return nil, fmt.Errorf("no arguments, one row per source")
	}
	var rows []string
	for _, src := range srcs {
		t, err := d.hello(src)
		if err != nil {
			return nil, err
		}
		row, err := f(t, t.Summarize("slacker"))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", src, err)
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// fv formats a value, or records the first error.
type fv struct{ err error }

func (e *fv) f(format string, v float64) string {
	s, err := formatValues(format, []float64{v})
	if err != nil && e.err == nil {
		e.err = err
	}
	return s
}

// helloSummaryTable is docs/BENCHMARKS.md's HelloBench table.
func helloSummaryTable(d *Data, srcs []string, args []string) (string, error) {
	rows, err := helloTables(d, srcs, args, func(t *report.Table, s report.Summary) (string, error) {
		var e fv
		row := fmt.Sprintf("| %s | %s (%s) | %s (%s) | %s vs %s | %s | %s | %d of %d |",
			profileName(t.R.Profile, false), e.f("xr", s.DeployMedian), e.f("xr", s.DeployP90), e.f("xr", s.DevMedian), e.f("xr", s.DevP90),
			e.f("hsecs", s.PullP90), e.f("hsecs", s.BasePullP90), e.f("f2", s.RunRatio), e.f("pct1", s.FetchedShare),
			s.Failed+s.BaseFailed, len(t.R.Samples))
		return row, e.err
	})
	if err != nil {
		return "", err
	}
	return "| profile | deployment speedup, median (p90) | development speedup, median (p90) | pull p90, slacker vs overlayfs | run time ratio | fetched / image (median) | failed |\n" +
		"| --- | --- | --- | --- | --- | --- | --- |\n" + strings.Join(rows, "\n") + "\n", nil
}

// helloProfileTable is docs/hellobench/README.md's summary table.
func helloProfileTable(d *Data, srcs []string, args []string) (string, error) {
	rows, err := helloTables(d, srcs, args, func(t *report.Table, s report.Summary) (string, error) {
		var e fv
		row := fmt.Sprintf("| %s | slacker | **%s** (%s) | %s (%s) | %s vs %s | %s | %s |",
			profileName(t.R.Profile, true), e.f("xr", s.DeployMedian), e.f("xr", s.DeployP90), e.f("xr", s.DevMedian), e.f("xr", s.DevP90),
			e.f("hsecs", s.PullP90), e.f("hsecs", s.BasePullP90), e.f("f2", s.RunRatio), e.f("pct1", s.FetchedShare))
		return row, e.err
	})
	if err != nil {
		return "", err
	}
	return "| profile | system vs overlayfs | deployment speedup, median (p90) | development speedup, median (p90) | pull p90 | run time ratio (median) | fetched / image (median) |\n" +
		"| --- | --- | --- | --- | --- | --- | --- |\n" + strings.Join(rows, "\n") + "\n", nil
}

// helloStepsTable is docs/hellobench/README.md's table of the steps' medians.
func helloStepsTable(d *Data, srcs []string, args []string) (string, error) {
	rows, err := helloTables(d, srcs, args, func(t *report.Table, _ report.Summary) (string, error) {
		var lines []string
		for _, cycle := range []string{harness.Deployment, harness.Development} {
			for _, sys := range []string{t.Baseline, "slacker"} {
				var e fv
				cell := func(step string) string {
					if step == "push" && cycle == harness.Deployment {
						return "–"
					}
					v, err := helloStep(t, sys, cycle, step)
					if err != nil && e.err == nil {
						e.err = err
					}
					return e.f("s2", v)
				}
				lines = append(lines, fmt.Sprintf("| %s | %s | %s | %s | %s | %s | %s |",
					t.R.Profile.Name, sys, cycle, cell("push"), cell("pull"), cell("run"), cell("total")))
				if e.err != nil {
					return "", e.err
				}
			}
		}
		return strings.Join(lines, "\n"), nil
	})
	if err != nil {
		return "", err
	}
	return "| profile | system | cycle | push | pull | run until ready | total |\n| --- | --- | --- | --- | --- | --- | --- |\n" +
		strings.Join(rows, "\n") + "\n", nil
}
