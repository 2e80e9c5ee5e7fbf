package report

import (
	"fmt"
	"html"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/slacker-dev/slacker/bench/hellobench/harness"
)

// Write renders results (one per profile) into dir: index.html and one SVG per
// figure, named after the profile.
func Write(dir string, rs []*harness.Results) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var b strings.Builder
	pageHead(&b, rs)
	for _, r := range rs {
		t := Aggregate(r)
		figs := t.figures(r.Profile.Name)
		for _, f := range figs {
			if err := os.WriteFile(filepath.Join(dir, f.File), []byte(f.SVG+"\n"), 0o644); err != nil {
				return err
			}
		}
		t.section(&b, figs)
	}
	b.WriteString("</body></html>\n")
	return os.WriteFile(filepath.Join(dir, "index.html"), []byte(b.String()), 0o644)
}

const css = `body{font-family:DejaVu Sans,Helvetica,Arial,sans-serif;font-size:14px;max-width:1200px;margin:1em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:0.5em 0 1em}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right;font-variant-numeric:tabular-nums}
th{background:#f4f4f4}td.l,th.l{text-align:left}.fail{color:#b00}.ok{color:#070}.small{font-size:12px;color:#555}
figure{display:inline-block;margin:0.5em 1em 1em 0;vertical-align:top;max-width:780px}figcaption{font-size:12px;color:#444;max-width:760px}
code{background:#f4f4f4;padding:0 3px}`

func pageHead(b *strings.Builder, rs []*harness.Results) {
	fmt.Fprintf(b, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>HelloBench: Slacker vs containerd + overlayfs</title><style>%s</style></head><body>\n", css)
	b.WriteString("<h1>HelloBench</h1>\n<p>Push, pull and run of each workload, from a cold node every time (fresh node state, page cache dropped), in shuffled order. <b>Deployment</b> = pull + run until ready; <b>development</b> = push of a change to the top layer (one new file) + pull + run. Times are medians of the runs of each workload; speedups are ratios of medians measured side by side in one run. Failed runs are counted and listed, never dropped.</p>\n")
	b.WriteString("<ul>\n")
	for _, r := range rs {
		fmt.Fprintf(b, "<li><a href=\"#%s\">%s</a>: %s</li>\n", esc(r.Profile.Name), esc(r.Profile.Name), esc(profileLine(r)))
	}
	b.WriteString("</ul>\n")
}

func profileLine(r *harness.Results) string {
	p := r.Profile
	s := "registry on loopback"
	if p.RateBits > 0 {
		s = fmt.Sprintf("emulated link %s, RTT %g ms, between the node and the registry", rate(p.RateBits), p.RTTMillis)
		if p.StoreRemote {
			s += " and Slacker's store"
		} else {
			s += " (Slacker's store on the node)"
		}
	}
	return s
}

func rate(bits int64) string {
	switch {
	case bits >= 1e9:
		return fmt.Sprintf("%g Gbit/s", float64(bits)/1e9)
	case bits >= 1e6:
		return fmt.Sprintf("%g Mbit/s", float64(bits)/1e6)
	}
	return fmt.Sprintf("%g kbit/s", float64(bits)/1e3)
}

func (t *Table) section(b *strings.Builder, figs []figure) {
	r := t.R
	fmt.Fprintf(b, "<h2 id=\"%s\">Profile %s</h2>\n", esc(r.Profile.Name), esc(r.Profile.Name))
	fmt.Fprintf(b, "<p class=\"small\">%s. Measured %s on %s (%s, %d CPUs, %s, Linux %s), commit %s, %d runs, seed %d, %s in all.<br>Command: <code>%s</code><br>Workloads: %s. Registry %s; Slacker's store %s.</p>\n",
		esc(profileLine(r)), r.Date.Format("2006-01-02 15:04 MST"), esc(r.Machine.Hostname), esc(r.Machine.CPU), r.Machine.CPUs,
		esc(r.Machine.Memory), esc(r.Machine.Kernel), esc(r.Commit), r.Runs, r.Seed, time.Duration(r.Elapsed*float64(time.Second)).Round(time.Second),
		esc(strings.Join(r.Command, " ")), esc(r.WorkloadsFile), esc(r.Profile.Registry), esc(r.Profile.Store))
	for _, n := range r.Notes {
		fmt.Fprintf(b, "<p><b>Note:</b> %s.</p>\n", esc(n))
	}
	for _, s := range r.Systems {
		fmt.Fprintf(b, "<p class=\"small\"><b>%s</b>: %s</p>\n", esc(s.Name), esc(s.Detail))
	}
	for _, sub := range t.others() {
		sm := t.Summarize(sub)
		fmt.Fprintf(b, "<h3>%s against %s</h3>\n<table><tr><th class=l>measure</th><th>%s</th><th>%s</th><th>ratio</th></tr>\n", esc(sub), esc(t.Baseline), esc(sub), esc(t.Baseline))
		row := func(what, a, bb, ratio string) {
			fmt.Fprintf(b, "<tr><td class=l>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>\n", esc(what), a, bb, ratio)
		}
		row(fmt.Sprintf("deployment speedup, median (p90), %d workloads", sm.DeployN), "", "", fmt.Sprintf("%s (%s)", x(sm.DeployMedian), x(sm.DeployP90)))
		row(fmt.Sprintf("development speedup, median (p90), %d workloads", sm.DevN), "", "", fmt.Sprintf("%s (%s)", x(sm.DevMedian), x(sm.DevP90)))
		row("pull, median across workloads", secs(sm.PullMedian), secs(sm.BasePullMedian), x(sm.BasePullMedian/sm.PullMedian))
		row("pull, p90 across workloads", secs(sm.PullP90), secs(sm.BasePullP90), x(sm.BasePullP90/sm.PullP90))
		row("run, mean across workloads", secs(sm.RunMean), secs(sm.BaseRunMean), "")
		row("run time / "+t.Baseline+"'s, median across workloads", "", "", ratio(sm.RunRatio))
		row("push of a change, median", secs(sm.PushMedian), secs(sm.BasePushMedian), x(sm.BasePushMedian/sm.PushMedian))
		row("bytes fetched / image size, median", pct(sm.FetchedShare), "", "")
		row("bytes read / image size, median", pct(sm.ReadShare), "", "")
		row("failed samples", fmt.Sprintf("%d of %d", sm.Failed, sm.Samples), fmt.Sprint(sm.BaseFailed), "")
		b.WriteString("</table>\n<table><tr><th class=l>target (benchmark, not a test)</th><th>result</th><th></th></tr>\n")
		for _, tg := range Targets(sm, r.Profile.RateBits) {
			got := x(tg.Got)
			if !tg.AtLeast {
				got = pct(tg.Got)
			}
			status := `<span class="fail">not met</span>`
			if tg.Met {
				status = `<span class="ok">met</span>`
			}
			if !tg.Relevant {
				status = "no data"
			}
			fmt.Fprintf(b, "<tr><td class=l>%s</td><td>%s</td><td>%s</td></tr>\n", esc(tg.What), got, status)
		}
		b.WriteString("</table>\n")
	}
	for _, f := range figs {
		fmt.Fprintf(b, "<figure><img src=\"%s\" alt=\"%s\"><figcaption>%s</figcaption></figure>\n", esc(f.File), esc(f.File), esc(f.Caption))
	}
	t.workloadTable(b)
	t.failureList(b)
}

func (t *Table) workloadTable(b *strings.Builder) {
	r := t.R
	b.WriteString("<h3>Per workload</h3>\n<p class=small>Medians of the successful runs (n). Deployment: pull, run, pull + run; development: push of a change, and push + pull + run. Fetched: what the node moved for pull + run (registry + store). Read: bytes of the image read by the workload (from Slacker's block-level counters).</p>\n<table><tr><th class=l>workload</th><th class=l>category</th><th>image (gzip / data)</th><th class=l>system</th><th>n</th><th>pull</th><th>run</th><th>deploy</th><th>push</th><th>develop</th><th>fetched</th><th>read</th><th>speedup deploy / develop</th></tr>\n")
	for _, w := range r.Workloads {
		for i, s := range t.Systems {
			d, v := t.Cell(w.Name, s, harness.Deployment), t.Cell(w.Name, s, harness.Development)
			b.WriteString("<tr>")
			if i == 0 {
				fmt.Fprintf(b, "<td class=l rowspan=%d>%s</td><td class=l rowspan=%d>%s</td><td rowspan=%d>%s / %s</td>", len(t.Systems), esc(w.Name),
					len(t.Systems), esc(w.Category), len(t.Systems), mbytes(float64(w.CompressedBytes)), mbytes(float64(w.DataBytes)))
			}
			n, failed := 0, 0
			for _, c := range []*Cell{d, v} {
				if c != nil {
					n += c.N
					failed += c.Failed
				}
			}
			nStr := fmt.Sprint(n)
			if failed > 0 {
				nStr += fmt.Sprintf(` <span class="fail">(%d failed)</span>`, failed)
			}
			fmt.Fprintf(b, "<td class=l>%s</td><td>%s</td>", esc(s), nStr)
			get := func(c *Cell, f func(*Cell) float64, fm func(float64) string) string {
				if !c.OK() {
					return `<span class="fail">–</span>`
				}
				return fm(f(c))
			}
			fmt.Fprintf(b, "<td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td>",
				get(d, func(c *Cell) float64 { return c.Pull }, secs), get(d, func(c *Cell) float64 { return c.Run }, secs),
				get(d, func(c *Cell) float64 { return c.Total }, secs), get(v, func(c *Cell) float64 { return c.Push }, secs),
				get(v, func(c *Cell) float64 { return c.Total }, secs), get(d, func(c *Cell) float64 { return c.Fetched }, mbytes),
				get(d, func(c *Cell) float64 { return c.Read }, mbytes))
			sp := ""
			if s != t.Baseline {
				bd, bv := t.Cell(w.Name, t.Baseline, harness.Deployment), t.Cell(w.Name, t.Baseline, harness.Development)
				a, c := "–", "–"
				if bd.OK() && d.OK() {
					a = x(bd.Total / d.Total)
				}
				if bv.OK() && v.OK() {
					c = x(bv.Total / v.Total)
				}
				sp = a + " / " + c
			}
			fmt.Fprintf(b, "<td>%s</td></tr>\n", sp)
		}
	}
	b.WriteString("</table>\n")
	// Output comparison of exit-rule workloads.
	var diffs []string
	for _, w := range r.Workloads {
		var outs []string
		for _, s := range t.Systems {
			if c := t.Cell(w.Name, s, harness.Deployment); c.OK() && c.Output != "" {
				outs = append(outs, c.Output)
			}
		}
		for _, o := range outs[min(1, len(outs)):] {
			if o != outs[0] {
				diffs = append(diffs, w.Name)
				break
			}
		}
	}
	if len(diffs) > 0 {
		fmt.Fprintf(b, "<p class=fail>Standard output differs between systems for: %s.</p>\n", esc(strings.Join(diffs, ", ")))
	} else {
		b.WriteString("<p class=small>Every workload whose rule is an exit status printed the same standard output on every system.</p>\n")
	}
	b.WriteString("<h3>First push of each whole image</h3>\n")
	if r.Profile.PublishUnshaped {
		b.WriteString("<p class=small>The images were published with the link's rate and delay off (--publish-unshaped): these times are not the profile's, and the push figures leave them out.</p>\n")
	}
	b.WriteString("<table><tr><th class=l>system</th><th>images</th><th>push, median</th><th>push, p90</th><th>with preparation (Slacker: conversion), median</th></tr>\n")
	for _, s := range t.Systems {
		var push, total []float64
		failed := 0
		for _, p := range r.Publish {
			if p.System != s || p.Optimize {
				continue
			}
			if !p.OK {
				failed++
				continue
			}
			push, total = append(push, p.Push), append(total, p.Total)
		}
		f := ""
		if failed > 0 {
			f = fmt.Sprintf(` <span class="fail">(%d failed)</span>`, failed)
		}
		fmt.Fprintf(b, "<tr><td class=l>%s</td><td>%d%s</td><td>%s</td><td>%s</td><td>%s</td></tr>\n", esc(s), len(push), f,
			secs(Median(push)), secs(Quantile(push, 0.9)), secs(Median(total)))
	}
	b.WriteString("</table>\n")
}

func (t *Table) failureList(b *strings.Builder) {
	var rows []string
	for _, s := range t.R.Samples {
		if !s.OK {
			rows = append(rows, fmt.Sprintf("<tr><td class=l>%s</td><td class=l>%s</td><td class=l>%s</td><td>%d</td><td class=l>%s</td><td class=l>%s</td></tr>",
				esc(s.Workload), esc(s.System), esc(s.Cycle), s.Run, esc(s.Stage), esc(clip(s.Failure, 400))))
		}
	}
	if len(rows) == 0 {
		b.WriteString("<p class=ok>No failed runs.</p>\n")
		return
	}
	fmt.Fprintf(b, "<h3 class=fail>Failed runs (%d)</h3>\n<table><tr><th class=l>workload</th><th class=l>system</th><th class=l>cycle</th><th>run</th><th class=l>stage</th><th class=l>why</th></tr>\n%s\n</table>\n", len(rows), strings.Join(rows, "\n"))
}

func secs(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "–"
	}
	switch {
	case v < 0.01:
		return fmt.Sprintf("%.1f ms", v*1000)
	case v < 1:
		return fmt.Sprintf("%.0f ms", v*1000)
	case v < 100:
		return fmt.Sprintf("%.2f s", v)
	default:
		return fmt.Sprintf("%.0f s", v)
	}
}

func x(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "–"
	}
	if v < 10 {
		return fmt.Sprintf("%.2fx", v)
	}
	return fmt.Sprintf("%.1fx", v)
}

// ratio is a plain ratio with two decimals ("–" when there is none).
func ratio(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "–"
	}
	return fmt.Sprintf("%.2f", v)
}

func pct(v float64) string {
	if math.IsNaN(v) {
		return "–"
	}
	return fmt.Sprintf("%.1f%%", v*100)
}

func mbytes(v float64) string {
	if math.IsNaN(v) {
		return "–"
	}
	switch {
	case v < 1e6:
		return fmt.Sprintf("%.0f kB", v/1e3)
	case v < 1e9:
		return fmt.Sprintf("%.1f MB", v/1e6)
	}
	return fmt.Sprintf("%.2f GB", v/1e9)
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

func esc(s string) string { return html.EscapeString(s) }
