package multimake

import (
	"fmt"
	"math"

	"github.com/slacker-dev/slacker/bench/eval"
	"github.com/slacker-dev/slacker/bench/eval/plot"
	"github.com/slacker-dev/slacker/bench/eval/stat"
)

var systems = []string{"overlayfs", "slacker"}

var phases = []struct {
	name string
	f    func(Step) float64
}{
	{"pull", func(s Step) float64 { return s.Pull }},
	{"compile (container run)", func(s Step) float64 { return s.Compile }},
	{"test", func(s Step) float64 { return s.Test }},
	{"delete", func(s Step) float64 { return s.Delete }},
}

// median of f over a system's successful steps of a compiler ("" = summed over
// compilers per run).
func (r *Results) median(sys, compiler string, f func(Step) float64) float64 {
	per := map[int]float64{}
	for _, s := range r.Steps {
		if s.System == sys && s.Error == "" && (compiler == "" || s.Compiler == compiler) {
			per[s.Run] += f(s)
		}
	}
	var v []float64
	for _, x := range per {
		v = append(v, x)
	}
	return stat.Median(v)
}

// Total is the median whole MultiMake time of a system.
func (r *Results) Total(sys string) float64 {
	var v []float64
	for _, t := range r.Totals {
		if t.System == sys {
			v = append(v, t.Seconds)
		}
	}
	return stat.Median(v)
}

// Section renders the results.
func (r *Results) Section() eval.Section {
	sec := eval.Section{Item: "multimake", Title: "MultiMake: one program, every compiler (Slacker §7, Fig 24)", Meta: r.Meta,
		Paper: "MultiMake builds one C program (vector arithmetic) with the last 16 GCC releases, each a Docker image in a registry. The binaries of the 4.6 and 4.7 series take about 50% longer than the others (Fig 24a). " +
			"Pulling, compiling, testing and deleting all 16 is 9.5x faster with Slacker, mostly from pulls; deleting is also cheaper, one NFS file instead of thousands of files (Fig 24b)."}
	bin := &plot.BarChart{Title: fmt.Sprintf("run time of the binary each compiler built (-O2, %d rounds; median of %d runs on the host)", r.Iterations, r.Tests),
		Categories: r.Compilers, Y: plot.Axis{Label: "seconds", Format: plot.Seconds}}
	bs := plot.Series{Name: "binary run time", Color: plot.Palette[2]}
	for _, c := range r.Compilers {
		var v []float64
		for _, s := range r.Steps {
			if s.Compiler == c && s.Error == "" {
				v = append(v, s.BinarySeconds)
			}
		}
		bs.Y = append(bs.Y, stat.Median(v))
	}
	bin.Series = []plot.Series{bs}
	sec.Figures = append(sec.Figures, eval.Figure{File: "multimake-binaries.svg", Title: "Run time of each compiler's binary (paper Fig 24a)", SVG: bin.SVG(),
		Caption: "The same source compiled with -O2 by each compiler in its own container; every binary then runs on the host."})
	ph := &plot.BarChart{Title: fmt.Sprintf("MultiMake of %d compilers from a cold node, time by phase (median of %d)", len(r.Compilers), r.Runs),
		Categories: systems, Stacked: true, Y: plot.Axis{Label: "seconds", Format: plot.Seconds}}
	for i, p := range phases {
		s := plot.Series{Name: p.name, Color: plot.Palette[(i+2)%len(plot.Palette)]}
		for _, sys := range systems {
			s.Y = append(s.Y, r.median(sys, "", p.f))
		}
		ph.Series = append(ph.Series, s)
	}
	sec.Figures = append(sec.Figures, eval.Figure{File: "multimake-phases.svg", Title: "MultiMake time by phase (paper Fig 24b)", SVG: ph.SVG(),
		Caption: "Sum over the compilers of each phase: pull of the compiler's image, the container run that compiles, running the binary, and deleting the image from the node."})
	tbl := eval.Table{Title: "Per compiler (medians, seconds)", Header: []string{"compiler", "version", "image", "binary run time",
		"pull: overlayfs", "slacker", "compile: overlayfs", "slacker", "delete: overlayfs", "slacker"}}
	for _, c := range r.Compilers {
		version := ""
		for _, s := range r.Steps {
			if s.Compiler == c && s.Version != "" {
				version = s.Version
				break
			}
		}
		row := []string{c, version, eval.HumanBytes(r.ImageBytes[c])}
		var v []float64
		for _, s := range r.Steps {
			if s.Compiler == c && s.Error == "" {
				v = append(v, s.BinarySeconds)
			}
		}
		row = append(row, secs(stat.Median(v)))
		for _, p := range []func(Step) float64{phases[0].f, phases[1].f, phases[3].f} {
			for _, sys := range systems {
				row = append(row, secs(r.median(sys, c, p)))
			}
		}
		tbl.Rows = append(tbl.Rows, row)
	}
	ot, st := r.Total("overlayfs"), r.Total("slacker")
	tbl.Note = fmt.Sprintf("Whole MultiMake (all phases, all compilers, from a cold node): overlayfs %s s, Slacker %s s.", secs(ot), secs(st))
	sec.Tables = append(sec.Tables, tbl)
	sec.Headlines = append(sec.Headlines, eval.Headline{Name: fmt.Sprintf("MultiMake speedup (%d compilers: pull, compile, test, delete)", len(r.Compilers)),
		Value: fmt.Sprintf("%s (%s s vs %s s)", times(stat.Ratio(ot, st)), secs(ot), secs(st)), Paper: "9.5x"})
	return sec
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
