package storage

import (
	"fmt"
	"math"
	"slices"

	"github.com/slacker-dev/slacker/bench/eval"
	"github.com/slacker-dev/slacker/bench/eval/plot"
	"github.com/slacker-dev/slacker/bench/eval/stat"
)

// targets returns the measured targets in report order.
func (r *Results) targets() []string {
	var out []string
	for _, n := range AllTargets {
		if _, ok := r.Targets[n]; ok {
			out = append(out, n)
		}
	}
	return out
}

// Summary summarizes the samples of one target, test and phase.
func (r *Results) Summary(target, rw string, bs int64, phase string, value func(Sample) float64) stat.Summary {
	var v []float64
	for _, s := range r.Samples {
		if s.Target == target && s.RW == rw && s.BS == bs && s.Phase == phase {
			v = append(v, value(s))
		}
	}
	return stat.Summarize(v)
}

func iops(s Sample) float64 { return s.IOPS }
func p99(s Sample) float64  { return s.P99Us }
func p50(s Sample) float64  { return s.P50Us }
func bw(s Sample) float64   { return s.BWBytes }

var tests = []struct{ rw, phase, label string }{
	{"randread", "cold", "random read, cold"},
	{"randread", "warm", "random read, warm"},
	{"randwrite", "cold", "random write, cold"},
	{"randwrite", "warm", "random write, warm"},
}

// Section renders the results.
func (r *Results) Section() eval.Section {
	ts := r.targets()
	c := r.Config
	sec := eval.Section{Item: "storage", Title: "Storage characterization with fio (Docker on high-performance SSDs)", Meta: r.Meta,
		Paper: "Xu et al. ran fio inside containers on an NVMe SSD (libaio, 4 KiB random reads and writes, 32 jobs x queue depth 32): " +
			"overlay and aufs reach the raw device's random-read IOPS, btrfs is far below for small blocks (reads peak at 32 KiB blocks), " +
			"disabling btrfs's copy-on-write raises random-write IOPS 5x, and a data volume performs like the raw device whatever the storage driver."}
	bars := &plot.BarChart{Title: fmt.Sprintf("fio 4 KiB IOPS, %d jobs x QD%d, direct I/O (median of %d)", c.Jobs, c.Depth, c.Runs),
		Categories: ts, Y: plot.Axis{Label: "IOPS", Log: true}}
	for i, t := range tests {
		s := plot.Series{Name: t.label, Color: plot.Palette[(i+2)%len(plot.Palette)]}
		for _, tg := range ts {
			s.Y = append(s.Y, r.Summary(tg, t.rw, 4096, t.phase, iops).Median)
		}
		bars.Series = append(bars.Series, s)
	}
	caption := "Each stack holds the same 32 files; cold is the first run after the page cache was dropped (and, for the two container systems, on a fresh node with nothing fetched), warm the run right after."
	if slices.Contains(ts, "slacker-block") {
		caption = fmt.Sprintf("Each stack holds the same %d files; cold is the first run after the page cache was dropped (and, for the container systems, on a fresh node with nothing fetched), warm the run right after.", c.Jobs)
	}
	sec.Figures = append(sec.Figures, eval.Figure{File: "storage-iops.svg", Title: "IOPS by storage stack (paper Fig 2a, 2c)", SVG: bars.SVG(), Caption: caption})
	if len(c.SweepBS) > 0 {
		lc := &plot.LineChart{Title: fmt.Sprintf("random-read bandwidth by block size, warm (%d jobs x QD%d)", c.Jobs, c.Depth),
			X: plot.Axis{Label: "block size", Log: true, Format: plot.Bytes}, Y: plot.Axis{Label: "bandwidth (bytes/s)", Log: true, Format: plot.Bytes}}
		for i, tg := range ts {
			s := plot.Series{Name: tg, Color: targetColor(tg, i), Points: true}
			for _, bs := range c.SweepBS {
				s.X = append(s.X, float64(bs))
				s.Y = append(s.Y, r.Summary(tg, "randread", bs, "warm", bw).Median)
			}
			lc.Series = append(lc.Series, s)
		}
		sec.Figures = append(sec.Figures, eval.Figure{File: "storage-bs.svg", Title: "Block-size sweep (paper Fig 2b)", SVG: lc.SVG(),
			Caption: "Random reads at each block size, after the 4 KiB runs warmed the stack."})
	}
	tbl := eval.Table{Title: "fio 4 KiB random I/O: IOPS (median) and completion latency p50 / p99",
		Header: []string{"stack"}}
	for _, t := range tests {
		tbl.Header = append(tbl.Header, t.label+" IOPS", "p50 / p99")
	}
	for _, tg := range ts {
		row := []string{tg}
		for _, t := range tests {
			s := r.Summary(tg, t.rw, 4096, t.phase, iops)
			cell := fmtIOPS(s.Median)
			if s.Noisy() {
				cell += " (noisy)"
			}
			row = append(row, cell, fmt.Sprintf("%s / %s", us(r.Summary(tg, t.rw, 4096, t.phase, p50).Median), us(r.Summary(tg, t.rw, 4096, t.phase, p99).Median)))
		}
		tbl.Rows = append(tbl.Rows, row)
	}
	tbl.Note = fmt.Sprintf("%d files of %s, %d s per run, %s. Stacks: ", c.Jobs, plot.Bytes(float64(c.FileSize)), c.Runtime, c.FioVersion)
	for i, tg := range ts {
		if i > 0 {
			tbl.Note += "; "
		}
		tbl.Note += tg + " = " + r.Targets[tg]
	}
	sec.Tables = append(sec.Tables, tbl)
	if len(c.SweepBS) > 0 {
		sw := eval.Table{Title: "Random-read IOPS by block size (warm, median)", Header: []string{"stack"}}
		for _, bs := range c.SweepBS {
			sw.Header = append(sw.Header, sizeName(bs))
		}
		for _, tg := range ts {
			row := []string{tg}
			for _, bs := range c.SweepBS {
				row = append(row, fmtIOPS(r.Summary(tg, "randread", bs, "warm", iops).Median))
			}
			sw.Rows = append(sw.Rows, row)
		}
		sec.Tables = append(sec.Tables, sw)
	}
	r.readStates(&sec)
	for _, t := range tests {
		for _, tg := range []string{"ext4", "overlayfs", "slacker", "slacker-block", "slacker-cache"} {
			if !slices.Contains(ts, tg) {
				continue
			}
			sec.Headlines = append(sec.Headlines, eval.Headline{Name: fmt.Sprintf("fio %s IOPS, %s", t.label, tg),
				Value: fmtIOPS(r.Summary(tg, t.rw, 4096, t.phase, iops).Median)})
		}
	}
	if slices.Contains(ts, "btrfs-loop") && slices.Contains(ts, "btrfs-nodatacow") {
		cow := r.Summary("btrfs-loop", "randwrite", 4096, "warm", iops).Median
		nocow := r.Summary("btrfs-nodatacow", "randwrite", 4096, "warm", iops).Median
		sec.Headlines = append(sec.Headlines, eval.Headline{Name: "btrfs random-write IOPS, nodatacow / copy-on-write",
			Value: plot.Times(stat.Ratio(nocow, cow)), Paper: "5x"})
	}
	return sec
}

// readStates renders the random reads of the Slacker roots by where the data is
// (PhaseNode, PhaseStore), against overlayfs's warm random reads, when the
// results have them.
func (r *Results) readStates(sec *eval.Section) {
	var sys []string
	for _, tg := range r.targets() {
		if r.Summary(tg, "randread", 4096, PhaseNode, iops).N > 0 || r.Summary(tg, "randread", 4096, PhaseStore, iops).N > 0 {
			sys = append(sys, tg)
		}
	}
	if len(sys) == 0 {
		return
	}
	c := r.Config
	ov := r.Summary("overlayfs", "randread", 4096, "warm", iops).Median
	data := float64(c.Jobs) * float64(c.FileSize)
	states := []struct{ phase, label string }{
		{PhaseNode, "data on the node"},
		{PhaseStore, "chunks in the local store, not in the cache"},
	}
	bars := &plot.BarChart{Title: fmt.Sprintf("fio 4 KiB random-read IOPS on Slacker's roots by where the data is, %d jobs x QD%d (median of %d)", c.Jobs, c.Depth, c.Runs),
		Categories: append([]string{"overlayfs (warm)"}, sys...), Y: plot.Axis{Label: "IOPS", Log: true}}
	for i, st := range states {
		s := plot.Series{Name: st.label, Color: plot.Palette[(i+2)%len(plot.Palette)], Y: []float64{math.NaN()}}
		if i == 0 {
			s.Y[0] = ov
		}
		for _, tg := range sys {
			s.Y = append(s.Y, r.Summary(tg, "randread", 4096, st.phase, iops).Median)
		}
		bars.Series = append(bars.Series, s)
	}
	sec.Figures = append(sec.Figures, eval.Figure{File: "storage-read-states.svg", Title: "Random reads on Slacker's roots: data on the node, chunks only in the store", SVG: bars.SVG(),
		Caption: "After the cold and warm runs: every file read whole through the root, the root given back and a new one taken, as by the next container of the image (data on the node); then the root given back, slackerd's cache purged and a new root taken (chunks in the local store, not in the cache); the page cache dropped before each. overlayfs's warm random reads for reference."})
	tbl := eval.Table{Title: "Random reads on Slacker's roots by where the data is: 4 KiB IOPS (median), completion latency p50 / p99",
		Header: []string{"stack", "data on the node: IOPS", "p50 / p99", "slackerd's cache / local image", "chunks in the local store, not in the cache: IOPS", "p50 / p99",
			"on the node / overlayfs warm", "in the store / overlayfs warm"}}
	for _, tg := range sys {
		row := []string{tg}
		var med [2]float64
		for i, st := range states {
			s := r.Summary(tg, "randread", 4096, st.phase, iops)
			med[i] = s.Median
			cell := fmtIOPS(s.Median)
			if s.Noisy() {
				cell += " (noisy)"
			}
			row = append(row, cell, fmt.Sprintf("%s / %s", us(r.Summary(tg, "randread", 4096, st.phase, p50).Median), us(r.Summary(tg, "randread", 4096, st.phase, p99).Median)))
			if st.phase == PhaseNode {
				held := r.Summary(tg, "randread", 4096, st.phase, func(s Sample) float64 { return float64(s.CachedBytes) }).Median
				li := r.Summary(tg, "randread", 4096, st.phase, func(s Sample) float64 { return float64(s.LocalImageBytes) }).Median
				row = append(row, fmt.Sprintf("%s / %s of %s", byts(held), byts(li), byts(data)))
			}
		}
		row = append(row, times(stat.Ratio(med[0], ov)), times(stat.Ratio(med[1], ov)))
		tbl.Rows = append(tbl.Rows, row)
		for i, st := range states {
			sec.Headlines = append(sec.Headlines, eval.Headline{Name: fmt.Sprintf("fio random read IOPS, %s, %s", st.label, tg),
				Value: fmt.Sprintf("%s (%s overlayfs's warm %s)", fmtIOPS(med[i]), times(stat.Ratio(med[i], ov)), fmtIOPS(ov))})
		}
	}
	tbl.Note = "After the cold and warm runs. Data on the node: every file was read whole through the root (each chunk fetched and verified), the root given back and a new one of the image taken, as by the next container, once slackerd had written what it writes when an image's last root goes (its local image, when every chunk is on the node: docs/design.md, \"Local images\"); then the page cache dropped. The run is served from what slackerd kept " +
		"(the column: its cache's memory and disk tiers, and its local images, when the run began; each sample keeps the cache's statistics before and after the run). " +
		"Chunks in the local store, not in the cache: the root given back, slackerd's cache purged through its API (both tiers, all it kept of the chunks, its local images), a new root taken and the page cache dropped. Ratios are against overlayfs's warm random reads (its files on the node's disk)."
	sec.Tables = append(sec.Tables, tbl)
}

func byts(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return plot.Bytes(v)
}

func times(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return plot.Times(v)
}

func targetColor(t string, i int) string {
	switch t {
	case "overlayfs", "slacker", "slacker-block":
		return eval.Color(t)
	case "slacker-cache":
		return "#66c2a5"
	}
	return plot.Palette[(i+2)%len(plot.Palette)]
}

func fmtIOPS(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return plot.Number(math.Round(v))
}

func us(v float64) string {
	if math.IsNaN(v) || v == 0 {
		return "-"
	}
	return plot.Seconds(v / 1e6)
}
