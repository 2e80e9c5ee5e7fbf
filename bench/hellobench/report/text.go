package report

import (
	"fmt"
	"io"
	"math"
	"text/tabwriter"

	"github.com/slacker-dev/slacker/bench/hellobench/harness"
)

// WriteTable prints the per-workload medians and the summary of one profile.
func WriteTable(w io.Writer, r *harness.Results) {
	t := Aggregate(r)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "WORKLOAD\tSYSTEM\tOK\tPULL\tRUN\tDEPLOY\tPUSH\tDEVELOP\tFETCHED\tREAD\tSPEEDUP DEPLOY/DEVELOP\n")
	for _, wl := range r.Workloads {
		for _, s := range t.Systems {
			d, v := t.Cell(wl.Name, s, harness.Deployment), t.Cell(wl.Name, s, harness.Development)
			n, failed := 0, 0
			for _, c := range []*Cell{d, v} {
				if c != nil {
					n, failed = n+c.N, failed+c.Failed
				}
			}
			ok := fmt.Sprint(n)
			if failed > 0 {
				ok = fmt.Sprintf("%d (%d failed)", n, failed)
			}
			val := func(c *Cell, f func(*Cell) float64, fm func(float64) string) string {
				if !c.OK() {
					return "-"
				}
				return fm(f(c))
			}
			sp := ""
			if s != t.Baseline {
				bd, bv := t.Cell(wl.Name, t.Baseline, harness.Deployment), t.Cell(wl.Name, t.Baseline, harness.Development)
				a, c := "-", "-"
				if bd.OK() && d.OK() {
					a = x(bd.Total / d.Total)
				}
				if bv.OK() && v.OK() {
					c = x(bv.Total / v.Total)
				}
				sp = a + " / " + c
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", wl.Name, s, ok,
				val(d, func(c *Cell) float64 { return c.Pull }, secs), val(d, func(c *Cell) float64 { return c.Run }, secs),
				val(d, func(c *Cell) float64 { return c.Total }, secs), val(v, func(c *Cell) float64 { return c.Push }, secs),
				val(v, func(c *Cell) float64 { return c.Total }, secs), val(d, func(c *Cell) float64 { return c.Fetched }, mbytes),
				val(d, func(c *Cell) float64 { return c.Read }, mbytes), sp)
		}
	}
	tw.Flush()
	for _, sub := range t.others() {
		sm := t.Summarize(sub)
		moved := ""
		if !math.IsNaN(sm.MovedShare) {
			moved = fmt.Sprintf(" (%s on the link)", pct(sm.MovedShare))
		}
		fmt.Fprintf(w, "\n%s vs %s, profile %s: deployment %s median (p90 %s), development %s (p90 %s); pull p90 %s vs %s; run time ratio %s; fetched %s of the image (median)%s; %d of %d samples failed (%s: %d)\n",
			sub, t.Baseline, r.Profile.Name, x(sm.DeployMedian), x(sm.DeployP90), x(sm.DevMedian), x(sm.DevP90),
			secs(sm.PullP90), secs(sm.BasePullP90), ratio(sm.RunRatio), pct(sm.FetchedShare), moved, sm.Failed, sm.Samples, t.Baseline, sm.BaseFailed)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}

// WriteMarkdown prints, for each profile, the summary table and the targets, for
// docs/BENCHMARKS.md.
func WriteMarkdown(w io.Writer, rs []*harness.Results) {
	fmt.Fprintln(w, "| profile | system | deployment speedup, median (p90) | development speedup, median (p90) | pull p90 | run time ratio (median) | fetched / image (median) | failed samples |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- | --- | --- |")
	for _, r := range rs {
		t := Aggregate(r)
		for _, sub := range t.others() {
			sm := t.Summarize(sub)
			fmt.Fprintf(w, "| %s | %s vs %s | %s (%s) | %s (%s) | %s vs %s | %s | %s | %d of %d (%s: %d) |\n",
				r.Profile.Name, sub, t.Baseline, x(sm.DeployMedian), x(sm.DeployP90), x(sm.DevMedian), x(sm.DevP90),
				secs(sm.PullP90), secs(sm.BasePullP90), ratio(sm.RunRatio), pct(sm.FetchedShare), sm.Failed, sm.Samples, t.Baseline, sm.BaseFailed)
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| profile | target | result | |")
	fmt.Fprintln(w, "| --- | --- | --- | --- |")
	for _, r := range rs {
		t := Aggregate(r)
		for _, sub := range t.others() {
			for _, tg := range Targets(t.Summarize(sub), r.Profile.RateBits) {
				got := x(tg.Got)
				if !tg.AtLeast {
					got = pct(tg.Got)
				}
				status := "not met"
				if tg.Met {
					status = "met"
				}
				if !tg.Relevant {
					status = "no data"
				}
				fmt.Fprintf(w, "| %s | %s (%s) | %s | %s |\n", r.Profile.Name, tg.What, sub, got, status)
			}
		}
	}
	for _, r := range rs {
		for _, n := range r.Notes {
			fmt.Fprintf(w, "\nNote (%s): %s.\n", r.Profile.Name, n)
		}
	}
}
