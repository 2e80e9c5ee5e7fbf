package micro

import (
	"fmt"
	"math"
	"slices"

	"github.com/slacker-dev/slacker/bench/eval"
	"github.com/slacker-dev/slacker/bench/eval/plot"
	"github.com/slacker-dev/slacker/bench/eval/stat"
)

// systemsOf are the systems a part of the results reports, the baseline first:
// overlayfs, slacker, and slacker-block when its samples have it.
func systemsOf[T any](samples []T, system func(T) string) []string {
	var have []string
	for _, s := range samples {
		have = append(have, system(s))
	}
	return eval.ReportSystems(have)
}

// cowLabel names a system in the copy-on-write table by how it copies on write
// (plainly in older results, whose modes were not recorded).
func (r *Results) cowLabel(sys string) string {
	switch r.RootModes[sys] {
	case "shared":
		return sys + " (shared: whole-file copy-up)"
	case "block":
		return sys + " (4 KiB copy-on-write)"
	}
	return sys
}

// OpenSummary summarizes the opens of a system at a depth.
func (r *Results) OpenSummary(sys string, depth int) stat.Summary {
	var v []float64
	for _, s := range r.Open {
		if s.System == sys && s.Depth == depth {
			v = append(v, s.Seconds)
		}
	}
	return stat.Summarize(v)
}

// AppendSummary summarizes the appends of a system at a size (with fsync if sync).
func (r *Results) AppendSummary(sys string, size int64, sync bool) stat.Summary {
	var v []float64
	for _, s := range r.Append {
		if s.System == sys && s.Size == size {
			if sync {
				v = append(v, s.FsyncSeconds)
			} else {
				v = append(v, s.Seconds)
			}
		}
	}
	return stat.Summarize(v)
}

// paperCOW is HP-Mapper's copy-on-write table (ms): overlay2 and HP-Mapper.
var paperCOW = map[int64][2]float64{4 << 10: {1.99, 0.07}, 64 << 10: {2.49, 0.12}, 1 << 20: {7.14, 0.55}, 16 << 20: {61.7, 0.57}}

func ms(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.3g", v*1e3)
}

// Section renders the results.
func (r *Results) Section() eval.Section {
	c := r.Config
	sec := eval.Section{Item: "micro", Title: "Micro-benchmarks: lookup depth and copy-on-write (Slacker Fig 11, HP-Mapper's COW table)", Meta: r.Meta,
		Paper: "Slacker Fig 11a: on AUFS, the latency of open() grows with the depth of the layer holding the file (16 layers of 1K empty files, cold cache). " +
			"Fig 11b: a 1-byte append to a file in a lower layer costs time proportional to the file's size, because AUFS copies the whole file up (over 20 s for large files). " +
			"HP-Mapper: copy-on-write latency on overlay2 is 1.99 ms at 4 KB and 61.7 ms at 16 MB; block-level HP-Mapper stays at 0.07-0.57 ms."}
	if len(r.Open) > 0 {
		systems := systemsOf(r.Open, func(s OpenSample) string { return s.System })
		slackers := systems[1:]
		lc := &plot.LineChart{Title: fmt.Sprintf("open() latency by layer depth, page cache dropped (median of %d x %d opens)", c.Runs, c.OpensPerLayer),
			X: plot.Axis{Label: "layer depth of the file (1 = top layer)"}, Y: plot.Axis{Label: "open latency", Format: plot.Seconds}}
		tbl := eval.Table{Title: "open() latency by depth (median; ms)", Header: append([]string{"depth"}, systems...)}
		for _, sys := range slackers {
			tbl.Header = append(tbl.Header, "overlayfs / "+sys)
		}
		for _, sys := range systems {
			s := plot.Series{Name: sys, Color: eval.Color(sys), Points: true}
			for d := 1; d <= c.Layers; d++ {
				s.X = append(s.X, float64(d))
				s.Y = append(s.Y, r.OpenSummary(sys, d).Median)
			}
			lc.Series = append(lc.Series, s)
		}
		for d := 1; d <= c.Layers; d++ {
			o := r.OpenSummary("overlayfs", d)
			row := []string{fmt.Sprint(d), ms(o.Median)}
			for _, sys := range slackers {
				row = append(row, ms(r.OpenSummary(sys, d).Median))
			}
			for _, sys := range slackers {
				row = append(row, plot.Times(stat.Ratio(o.Median, r.OpenSummary(sys, d).Median)))
			}
			tbl.Rows = append(tbl.Rows, row)
		}
		sec.Figures = append(sec.Figures, eval.Figure{File: "micro-open-depth.svg", Title: "Open latency by layer depth (paper Fig 11a)", SVG: lc.SVG(),
			Caption: "Each open is preceded by dropping the page cache, dentries and inodes; Slacker's node chunk cache (in slackerd) stays warm after the first opens, as it would on a node."})
		sec.Tables = append(sec.Tables, tbl)
	}
	if len(r.Append) > 0 {
		systems := systemsOf(r.Append, func(s AppendSample) string { return s.System })
		slackers := systems[1:]
		lc := &plot.LineChart{Title: fmt.Sprintf("1-byte append to a file of the image's lower layer (median of %d)", c.Runs),
			X: plot.Axis{Label: "file size", Log: true, Format: plot.Bytes}, Y: plot.Axis{Label: "latency", Log: true, Format: plot.Seconds}}
		for _, sys := range systems {
			for _, sync := range []bool{false, true} {
				name := sys
				if sync {
					name += " + fsync"
				}
				s := plot.Series{Name: name, Color: eval.Color(sys), Points: true, Dash: sync}
				for _, size := range c.Sizes {
					s.X = append(s.X, float64(size))
					s.Y = append(s.Y, r.AppendSummary(sys, size, sync).Median)
				}
				lc.Series = append(lc.Series, s)
			}
		}
		caption := "The file was stat'ed first (lookup not counted) after the page cache was dropped, on a fresh node: overlayfs copies the whole file up at open; Slacker copies one 4 KiB block."
		title := "Copy-on-write latency (ms), as HP-Mapper's table: open for append + 1-byte write"
		if r.RootModes != nil {
			caption = "The file was stat'ed first (lookup not counted) after the page cache was dropped, on a fresh node: overlayfs, and Slacker's default mode (slacker: shared roots, an overlay over the node's read-only mount of the image), copy the whole file up at open; slacker-block (a block clone) copies one 4 KiB block."
			title = "Copy-on-write latency by file size (ms), as HP-Mapper's table: open for append + 1-byte write"
		}
		sec.Figures = append(sec.Figures, eval.Figure{File: "micro-append.svg", Title: "Copy-on-write latency by file size (paper Fig 11b)", SVG: lc.SVG(), Caption: caption})
		tbl := eval.Table{Title: title, Header: []string{"file size", "overlayfs"}}
		for _, sys := range slackers {
			tbl.Header = append(tbl.Header, r.cowLabel(sys))
		}
		for _, sys := range slackers {
			tbl.Header = append(tbl.Header, "overlayfs / "+sys)
		}
		tbl.Header = append(tbl.Header, "with fsync: overlayfs")
		tbl.Header = append(tbl.Header, slackers...)
		tbl.Header = append(tbl.Header, "paper overlay2", "paper HP-Mapper")
		cell := func(s stat.Summary) string {
			if s.Noisy() {
				return ms(s.Median) + " (noisy)"
			}
			return ms(s.Median)
		}
		for _, size := range c.Sizes {
			o, of := r.AppendSummary("overlayfs", size, false), r.AppendSummary("overlayfs", size, true)
			po, ph := "-", "-"
			if p, ok := paperCOW[size]; ok {
				po, ph = fmt.Sprint(p[0]), fmt.Sprint(p[1])
			}
			row := []string{eval.HumanBytes(size), cell(o)}
			for _, sys := range slackers {
				row = append(row, cell(r.AppendSummary(sys, size, false)))
			}
			for _, sys := range slackers {
				row = append(row, plot.Times(stat.Ratio(o.Median, r.AppendSummary(sys, size, false).Median)))
			}
			row = append(row, cell(of))
			for _, sys := range slackers {
				row = append(row, cell(r.AppendSummary(sys, size, true)))
			}
			tbl.Rows = append(tbl.Rows, append(row, po, ph))
		}
		sec.Tables = append(sec.Tables, tbl)
		for _, size := range []int64{16 << 20} {
			o := r.AppendSummary("overlayfs", size, false)
			for _, sys := range slackers {
				s := r.AppendSummary(sys, size, false)
				if s.N > 0 && o.N > 0 {
					sec.Headlines = append(sec.Headlines, eval.Headline{Name: "copy-on-write latency at 16 MiB, overlayfs / " + eval.Title(sys),
						Value: fmt.Sprintf("%s (%s ms vs %s ms)", plot.Times(stat.Ratio(o.Median, s.Median)), ms(o.Median), ms(s.Median)),
						Paper: "108x (overlay2 61.7 ms vs HP-Mapper 0.57 ms)"})
				}
			}
		}
	}
	if len(r.Rerun) > 0 {
		r.rerunSection(&sec)
	}
	return sec
}

// RerunMedian is a workload's median first or second time on a system (NaN if it
// never succeeded).
func (r *Results) RerunMedian(sys, w string, second bool) float64 {
	var v []float64
	for _, s := range r.Rerun {
		if s.System == sys && s.Workload == w && s.Error == "" {
			if second {
				v = append(v, s.Second)
			} else {
				v = append(v, s.First)
			}
		}
	}
	return stat.Median(v)
}

func (r *Results) rerunSection(sec *eval.Section) {
	var ws []string
	for _, s := range r.Rerun {
		if !slices.Contains(ws, s.Workload) {
			ws = append(ws, s.Workload)
		}
	}
	lc := &plot.LineChart{Title: "time until a second container of the same image is ready, CDF over workloads (Fig 22)",
		X: plot.Axis{Label: "seconds (median per workload)", Log: true, Format: plot.Seconds}, Y: plot.Axis{Label: "fraction of workloads", Lo: 0, Hi: 1, Format: plot.Percent}}
	tbl := eval.Table{Title: "Run time on one node: first container (cold node) and second (median over workloads, seconds)",
		Header: []string{"system", "workloads", "first run, median", "second run, median", "second run, mean", "second run, 90th percentile"}}
	meds := map[string]float64{}
	systems := systemsOf(r.Rerun, func(s RerunSample) string { return s.System })
	for _, sys := range systems {
		for _, second := range []bool{true, false} {
			var v []float64
			for _, w := range ws {
				v = append(v, r.RerunMedian(sys, w, second))
			}
			xs, ps := stat.CDF(v)
			name := sys + ", second run"
			if !second {
				name = sys + ", first run (cold)"
			}
			lc.Series = append(lc.Series, plot.Series{Name: name, Color: eval.Color(sys), X: xs, Y: ps, Step: true, Dash: !second})
			if second {
				meds[sys] = stat.Median(v)
				var first []float64
				for _, w := range ws {
					first = append(first, r.RerunMedian(sys, w, false))
				}
				tbl.Rows = append(tbl.Rows, []string{sys, fmt.Sprint(len(xs)), ms3(stat.Median(first)), ms3(stat.Median(v)), ms3(stat.Mean(v)), ms3(stat.Quantile(v, 0.9))})
			}
		}
	}
	caption := "Each HelloBench workload started twice on one node; solid: the second container (the image's data already on the node), dashed: the first, on a cold node. The paper's Slacker used a modified loopback driver to share the page cache across containers; here each container has its own ext4 and page cache, and the node's chunk cache is what the second run finds warm."
	if r.RootModes != nil {
		caption = "Each HelloBench workload started twice on one node; solid: the second container (the image's data already on the node), dashed: the first, on a cold node. The paper's Slacker used a modified loopback driver to share the page cache across containers. Slacker's default mode (slacker) shares one read-only mount of the image among the node's containers while one uses it (the second container here starts after the first was removed, so it mounts the image again); slacker-block gives each container its own ext4 and page cache. In both, the node's chunk cache is what the second run finds warm."
	}
	sec.Figures = append(sec.Figures, eval.Figure{File: "micro-second-run.svg", Title: "Second run time (paper Fig 22)", SVG: lc.SVG(), Caption: caption})
	sec.Tables = append(sec.Tables, tbl)
	for _, sys := range systems[1:] {
		sec.Headlines = append(sec.Headlines, eval.Headline{Name: "second-run time, median over workloads, " + eval.Title(sys) + " vs overlayfs",
			Value: fmt.Sprintf("%s s vs %s s", ms3(meds[sys]), ms3(meds["overlayfs"])), Paper: "mean 1.71 s (0.97 s with the modified loopback) vs AUFS fastest"})
	}
}

func ms3(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.3g", v)
}
