package report

import (
	"fmt"
	"math"
	"slices"

	"github.com/slacker-dev/slacker/bench/hellobench/harness"
	"github.com/slacker-dev/slacker/bench/workload"
)

// figure is one SVG of the report.
type figure struct {
	File    string // file name
	Caption string
	SVG     string
}

func (t *Table) color(system string) string {
	i := slices.Index(t.Systems, system)
	if system == t.Baseline {
		return palette[0]
	}
	if i < 0 {
		return palette[len(palette)-1]
	}
	// The baseline takes palette[0]; the others follow in order.
	j := 1
	for _, s := range t.Systems[:i] {
		if s != t.Baseline {
			j++
		}
	}
	return palette[j%len(palette)]
}

// others are the systems compared with the baseline.
func (t *Table) others() []string {
	var out []string
	for _, s := range t.Systems {
		if s != t.Baseline {
			out = append(out, s)
		}
	}
	return out
}

// figures draws every figure of one profile; names are prefixed with prefix.
func (t *Table) figures(prefix string) []figure {
	var figs []figure
	p := t.R.Profile.Name
	// Fig 8: CDFs of push, pull and run across workloads.
	for _, op := range []struct{ key, title, cycle string }{
		{"push", "push", harness.Development},
		{"pull", "pull", harness.Deployment},
		{"run", "run (until ready)", harness.Deployment},
	} {
		c := &lineChart{Title: fmt.Sprintf("%s time, CDF across workloads (%s)", op.title, p), XLabel: "seconds (log scale, median of runs per workload)",
			YLabel: "fraction of workloads", XLog: true, XFormat: fmtSeconds}
		for _, s := range t.Systems {
			f := func(c *Cell) float64 {
				switch op.key {
				case "push":
					return c.Push
				case "pull":
					return c.Pull
				}
				return c.Run
			}
			xs, ps := CDF(t.PerWorkload(s, op.cycle, f))
			name := s
			if op.key == "push" {
				name = s + ": a change"
			}
			c.Series = append(c.Series, lineSeries{Name: name, Color: t.color(s), X: xs, Y: ps, Step: true})
			if first := t.firstPush(s); op.key == "push" && len(first) > 0 {
				xs, ps := CDF(first)
				c.Series = append(c.Series, lineSeries{Name: s + ": whole image", Color: t.color(s), Dash: "5 3", X: xs, Y: ps, Step: true})
			}
		}
		figs = append(figs, figure{File: fmt.Sprintf("%s-cdf-%s.svg", prefix, op.key), SVG: c.svg(),
			Caption: fmt.Sprintf("%s time per workload (median of runs), CDF across workloads, as the paper's Fig 8.", op.title) +
				map[string]string{
					"push": " Solid: push of a change to the top layer (the development cycle's push); dashed: the first push of the whole image.",
					"pull": " Deployment cycle, cold node.",
					"run":  " From the run command to ready (exit, log line, port or HTTP answer); cold node, right after the pull.",
				}[op.key]})
	}
	// Fig 9 / 19: per-category averages, stacked push, pull and run per system.
	cats := t.categories()
	bc := &barChart{Title: fmt.Sprintf("push, pull and run by category, mean of workload medians (%s)", p), YLabel: "seconds",
		YFormat: fmtSeconds, Groups: cats, Bars: t.Systems, Stacks: []string{"push (a change)", "pull", "run"},
		Colors: []string{"#bbbbbb", "#4a90d9", "#f5a623"}}
	bc.BarLetters = make([]string, len(t.Systems))
	for i, s := range t.Systems {
		bc.BarLetters[i] = string([]rune(s)[0:1])
	}
	for _, cat := range cats {
		var g [][]float64
		for _, s := range t.Systems {
			var push, pull, run []float64
			for _, w := range t.R.Workloads {
				if w.Category != cat {
					continue
				}
				if c := t.Cell(w.Name, s, harness.Development); c.OK() {
					push = append(push, c.Push)
				}
				if c := t.Cell(w.Name, s, harness.Deployment); c.OK() {
					pull = append(pull, c.Pull)
					run = append(run, c.Run)
				}
			}
			g = append(g, []float64{nanZero(Mean(push)), nanZero(Mean(pull)), nanZero(Mean(run))})
		}
		bc.Values = append(bc.Values, g)
	}
	letters := ""
	for i, s := range t.Systems {
		if i > 0 {
			letters += ", "
		}
		letters += bc.BarLetters[i] + " = " + s
	}
	figs = append(figs, figure{File: prefix + "-category-times.svg", SVG: bc.svg(),
		Caption: "Mean over each category's workloads of the median push (of a change), pull and run times, stacked, per system (" + letters + "), as the paper's Fig 9 and 19."})
	// Fig 20: speedup CDFs with median and p90 marked.
	sc := &lineChart{Title: fmt.Sprintf("speedup over %s, CDF across workloads (%s)", t.Baseline, p),
		XLabel: fmt.Sprintf("%s time / system time (log scale)", t.Baseline), YLabel: "fraction of workloads", XLog: true, XFormat: fmtTimes}
	for _, s := range t.others() {
		for _, cy := range []struct {
			cycle, label, dash string
		}{{harness.Deployment, "deployment (pull+run)", ""}, {harness.Development, "development (push+pull+run)", "6 3"}} {
			v := Values(t.Speedups(cy.cycle, s))
			xs, ps := CDF(v)
			name := cy.label
			if len(t.others()) > 1 {
				name = s + " " + cy.label
			}
			sc.Series = append(sc.Series, lineSeries{Name: name, Color: t.color(s), Dash: cy.dash, X: xs, Y: ps, Step: true})
			if len(v) > 0 {
				short := map[string]string{harness.Deployment: "deploy", harness.Development: "dev"}[cy.cycle]
				sc.Marks = append(sc.Marks,
					vmark{X: Median(v), Label: fmt.Sprintf("%s median %.1fx", short, Median(v)), Color: t.color(s)},
					vmark{X: Quantile(v, 0.9), Label: fmt.Sprintf("%s p90 %.1fx", short, Quantile(v, 0.9)), Color: t.color(s)})
			}
		}
	}
	figs = append(figs, figure{File: prefix + "-speedup.svg", SVG: sc.svg(),
		Caption: fmt.Sprintf("Speedup over %s per workload (ratio of median cycle times), CDF across workloads, with median and 90th percentile marked, as the paper's Fig 20.", t.Baseline)})
	// Fig 5: data sizes, CDF across workloads.
	sub := t.subject()
	dc := &lineChart{Title: fmt.Sprintf("data sizes, CDF across workloads (%s)", p), XLabel: "bytes (log scale)",
		YLabel: "fraction of workloads", XLog: true, XFormat: fmtBytes}
	var reads, fetched, comp, data []float64
	for _, w := range t.R.Workloads {
		comp = append(comp, float64(w.CompressedBytes))
		data = append(data, float64(w.DataBytes))
		if c := t.Cell(w.Name, sub, harness.Deployment); c.OK() {
			if !math.IsNaN(c.Read) {
				reads = append(reads, c.Read)
			}
			fetched = append(fetched, c.Fetched)
		}
	}
	for _, s := range []struct {
		name  string
		v     []float64
		color string
		dash  string
	}{
		{"read by the workload", reads, "#333333", ""},
		{sub + " fetched", fetched, t.color(sub), ""},
		{"image, compressed (what " + t.Baseline + " pulls)", comp, t.color(t.Baseline), "6 3"},
		{"image, uncompressed", data, "#7570b3", "2 2"},
	} {
		xs, ps := CDF(s.v)
		dc.Series = append(dc.Series, lineSeries{Name: s.name, Color: s.color, Dash: s.dash, X: xs, Y: ps, Step: true})
	}
	figs = append(figs, figure{File: prefix + "-sizes-cdf.svg", SVG: dc.svg(),
		Caption: fmt.Sprintf("Bytes of the image the workload read to become ready (measured by %s at the block level), bytes %s fetched for pull + run (registry and store), and the image's compressed and uncompressed sizes, CDF across workloads, as the paper's Fig 5.", sub, sub)})
	// Fig 6: the same by category, with amplification over the data read.
	kc := &barChart{Title: fmt.Sprintf("data sizes by category, mean (%s)", p), YLabel: "bytes (log scale)", YLog: true, YFormat: fmtBytes,
		Groups: cats, Bars: []string{"read", sub + " fetched", "compressed", "uncompressed"}, BarLetters: []string{"R", "F", "C", "U"},
		Stacks: []string{"bytes"}, Colors: []string{"#333333", t.color(sub), t.color(t.Baseline), "#7570b3"}}
	for _, cat := range cats {
		var r, f, c, u []float64
		for _, w := range t.R.Workloads {
			if w.Category != cat {
				continue
			}
			c = append(c, float64(w.CompressedBytes))
			u = append(u, float64(w.DataBytes))
			if cell := t.Cell(w.Name, sub, harness.Deployment); cell.OK() {
				if !math.IsNaN(cell.Read) {
					r = append(r, cell.Read)
				}
				f = append(f, cell.Fetched)
			}
		}
		vals := []float64{Mean(r), Mean(f), Mean(c), Mean(u)}
		var g [][]float64
		var labels []string
		for _, v := range vals {
			g = append(g, []float64{nanZero(v)})
			if rd := vals[0]; rd > 0 && !math.IsNaN(v) {
				labels = append(labels, fmt.Sprintf("%.0fx", v/rd))
			} else {
				labels = append(labels, "")
			}
		}
		labels[0] = ""
		kc.Values = append(kc.Values, g)
		kc.Labels = append(kc.Labels, labels)
	}
	figs = append(figs, figure{File: prefix + "-sizes-category.svg", SVG: kc.svg(),
		Caption: "Mean bytes read, fetched by " + sub + ", and image sizes compressed and uncompressed, per category; bars are labelled with their ratio to the bytes read (amplification), as the paper's Fig 6."})
	return figs
}

// subject is the system whose bytes are shown: slacker if present, else the first
// that is not the baseline.
func (t *Table) subject() string {
	if slices.Contains(t.Systems, "slacker") {
		return "slacker"
	}
	if o := t.others(); len(o) > 0 {
		return o[0]
	}
	return t.Baseline
}

func (t *Table) firstPush(system string) []float64 {
	var v []float64
	for _, p := range t.R.Publish {
		if p.System == system && p.OK && !p.Optimize && !p.Unshaped {
			v = append(v, p.Push)
		}
	}
	return v
}

// categories in the paper's order, those present.
func (t *Table) categories() []string {
	var out []string
	for _, c := range workload.Categories {
		for _, w := range t.R.Workloads {
			if w.Category == string(c) {
				out = append(out, string(c))
				break
			}
		}
	}
	return out
}

func nanZero(v float64) float64 {
	if math.IsNaN(v) {
		return 0
	}
	return v
}
