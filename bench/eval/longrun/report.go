package longrun

import (
	"fmt"
	"math"

	"github.com/slacker-dev/slacker/bench/eval"
	"github.com/slacker-dev/slacker/bench/eval/plot"
	"github.com/slacker-dev/slacker/bench/eval/stat"
)

// workloads in the order measured.
func (r *Results) workloads() []string {
	var out []string
	for _, b := range Benches {
		if _, ok := r.Ops[b.Workload]; ok {
			out = append(out, b.Workload)
		}
	}
	return out
}

// Median of f over a system's successful samples of a workload.
func (r *Results) Median(sys, w string, f func(Sample) float64) float64 {
	var v []float64
	for _, s := range r.Samples {
		if s.System == sys && s.Workload == w && s.Error == "" {
			v = append(v, f(s))
		}
	}
	return stat.Median(v)
}

func throughput(s Sample) float64 { return s.Throughput() }
func loaded(s Sample) float64     { return s.Loaded() }
func first(s Sample) float64      { return s.FirstRequest }

// systems are the systems reported, the baseline first: overlayfs, slacker, and
// slacker-block when the results have it.
func (r *Results) systems() []string {
	var have []string
	for _, s := range r.Samples {
		have = append(have, s.System)
	}
	return eval.ReportSystems(have)
}

// Section renders the results.
func (r *Results) Section() eval.Section {
	ws := r.workloads()
	systems := r.systems()
	slackers := systems[1:]
	sec := eval.Section{Item: "longrun", Title: "Long-running servers (Slacker Fig 21)", Meta: r.Meta,
		Paper: "PostgreSQL (pgbench), Redis (a custom get/set/update benchmark), Apache (wrk, static page) and io.js (wrk, dynamic page), each run for 5 minutes starting with a pull: " +
			"Slacker's throughput, start-up included, is at least that of AUFS (ratios 1.0x or more), and Slacker's containers start serving requests 3-19x sooner."}
	title := fmt.Sprintf("throughput of Slacker relative to overlayfs over a %.0f s window from the pull (bars labelled with Slacker's ops/s)", r.Duration)
	if len(slackers) > 1 {
		title = fmt.Sprintf("throughput of Slacker in each mode relative to overlayfs over a %.0f s window from the pull (bars labelled with the mode's ops/s)", r.Duration)
	}
	ratio := &plot.BarChart{Title: title, Categories: ws, Y: plot.Axis{Label: "Slacker / overlayfs", Format: plot.Times}, RefLines: []float64{1}}
	for i, sys := range slackers {
		rs := plot.Series{Name: "start-up included", Color: eval.Color(sys)}
		ls := plot.Series{Name: "while loaded", Color: plot.Palette[2+2*i]}
		if len(slackers) > 1 {
			rs.Name, ls.Name = sys+", start-up included", sys+", while loaded"
		}
		for _, w := range ws {
			rs.Y = append(rs.Y, stat.Ratio(r.Median(sys, w, throughput), r.Median("overlayfs", w, throughput)))
			rs.Labels = append(rs.Labels, fmt.Sprintf("%s/s", plot.Number(math.Round(r.Median(sys, w, throughput)))))
			ls.Y = append(ls.Y, stat.Ratio(r.Median(sys, w, loaded), r.Median("overlayfs", w, loaded)))
		}
		ratio.Series = append(ratio.Series, rs, ls)
	}
	sec.Figures = append(sec.Figures, eval.Figure{File: "longrun-throughput.svg", Title: "Throughput ratio (paper Fig 21a)", SVG: ratio.SVG(),
		Caption: "Operations completed over the whole window (pull, start, benchmark) per second, Slacker over overlayfs; and the same over the benchmark's own time."})
	st := &plot.BarChart{Title: "time from the start of the pull to the first request served", Categories: ws, Y: plot.Axis{Label: "seconds", Log: true, Format: plot.Seconds}}
	for _, sys := range systems {
		s := plot.Series{Name: sys, Color: eval.Color(sys)}
		for _, w := range ws {
			s.Y = append(s.Y, r.Median(sys, w, first))
		}
		st.Series = append(st.Series, s)
	}
	sec.Figures = append(sec.Figures, eval.Figure{File: "longrun-startup.svg", Title: "Start-up delay (paper Fig 21b)", SVG: st.SVG(),
		Caption: "A cold node: pull, start the container, until the first request (a query, a PING, an HTTP GET) is answered."})
	tbl := eval.Table{Title: fmt.Sprintf("Long-running servers, %.0f s window (medians of %d)", r.Duration, r.Runs),
		Header: []string{"server", "op", "overlayfs ops/s (window)"}}
	for _, sys := range slackers {
		tbl.Header = append(tbl.Header, sys+" ops/s (window)", "ratio", "ratio while loaded")
	}
	tbl.Header = append(tbl.Header, "first request: overlayfs")
	for _, sys := range slackers {
		tbl.Header = append(tbl.Header, sys, "sooner")
	}
	for _, w := range ws {
		ot, of := r.Median("overlayfs", w, throughput), r.Median("overlayfs", w, first)
		row := []string{w, r.Ops[w], num(ot)}
		for _, sys := range slackers {
			st := r.Median(sys, w, throughput)
			row = append(row, num(st), times(stat.Ratio(st, ot)), times(stat.Ratio(r.Median(sys, w, loaded), r.Median("overlayfs", w, loaded))))
		}
		row = append(row, secs(of))
		for _, sys := range slackers {
			sf := r.Median(sys, w, first)
			row = append(row, secs(sf), times(stat.Ratio(of, sf)))
		}
		tbl.Rows = append(tbl.Rows, row)
		for _, sys := range slackers {
			st, sf := r.Median(sys, w, throughput), r.Median(sys, w, first)
			sec.Headlines = append(sec.Headlines, eval.Headline{Name: fmt.Sprintf("%s throughput, start-up included, %s / overlayfs", w, eval.Title(sys)),
				Value: fmt.Sprintf("%s (first request %s sooner)", times(stat.Ratio(st, ot)), times(stat.Ratio(of, sf))), Paper: "≥ 1x; 3-19x sooner"})
		}
	}
	tbl.Note = "Clients on the host in the server's network namespace: pgbench -c 8 -j 2 (scale 10, initialized after the first query), redis-benchmark -t set,get,incr -c 50 in rounds of 100,000, wrk -t 2 -c 32."
	sec.Tables = append(sec.Tables, tbl)
	return sec
}

func num(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return plot.Number(math.Round(v))
}

func secs(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.3g", v)
}

func times(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return plot.Times(v)
}
