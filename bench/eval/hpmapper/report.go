package hpmapper

import (
	"fmt"
	"math"
	"slices"

	"github.com/slacker-dev/slacker/bench/eval"
	"github.com/slacker-dev/slacker/bench/eval/plot"
	"github.com/slacker-dev/slacker/bench/eval/stat"
)

// systems are the systems reported, the baseline first: overlayfs, slacker, and
// slacker-block when the results have it.
func (r *Results) systems() []string {
	var have []string
	for _, s := range r.Samples {
		have = append(have, s.System)
	}
	return eval.ReportSystems(have)
}

// Median of f over the samples of a system and limit (failed starts included: a
// start where containers failed still took its time and memory; see Failed).
func (r *Results) Median(sys string, limit int64, f func(Sample) float64) float64 {
	var v []float64
	for _, s := range r.Samples {
		if s.System == sys && s.Limit == limit && s.Ready > 0 {
			v = append(v, f(s))
		}
	}
	return stat.Median(v)
}

// Memory is the page cache plus the daemon's own chunk cache: what the node keeps
// of the image's data in memory.
func Memory(s Sample) float64 { return float64(s.PageCache + s.DaemonCache) }

func seconds(s Sample) float64 { return s.Seconds }

// Section renders the results.
func (r *Results) Section() eval.Section {
	sec := eval.Section{Item: "hpmapper", Title: fmt.Sprintf("%d containers from one image (HP-Mapper's start-up, I/O and cache experiment)", r.Containers), Meta: r.Meta,
		Paper: "HP-Mapper starts 64 containers from one image (Tomcat, Nextcloud, Vault): block-based drivers (devicemapper, btrfs) read the shared data once per container and cannot share the page cache; " +
			"file-based overlay2 shares the page cache. HP-Mapper removes the redundant reads, uses over 65% less cache, and starts the 64 containers 2.0-7.2x faster than the other drivers; " +
			"its advantage grows as memory gets scarce."}
	var cats []string
	type key struct {
		sys   string
		limit int64
	}
	var keys []key
	systems := r.systems()
	for _, l := range r.Limits {
		for _, s := range systems {
			cats = append(cats, fmt.Sprintf("%s, limit %s", s, limitName(l)))
			keys = append(keys, key{s, l})
		}
	}
	tb := &plot.BarChart{Title: fmt.Sprintf("time until all %d %s containers are ready, cold (median of %d)", r.Containers, r.Image, r.Runs),
		Categories: cats, Y: plot.Axis{Label: "seconds", Format: plot.Seconds}}
	ts := plot.Series{Name: "all ready"}
	ms := plot.Series{Name: "median container"}
	for _, k := range keys {
		ts.Y = append(ts.Y, r.Median(k.sys, k.limit, seconds))
		ms.Y = append(ms.Y, r.Median(k.sys, k.limit, func(s Sample) float64 { return s.ReadyMedian }))
	}
	ts.Color, ms.Color = plot.Palette[2], plot.Palette[3]
	tb.Series = []plot.Series{ts, ms}
	sec.Figures = append(sec.Figures, eval.Figure{File: "hpmapper-time.svg", Title: "Start-up time of N containers (HP-Mapper's start-up figures)", SVG: tb.SVG(),
		Caption: "All containers launched at once on a cold node (the image pulled, then the page cache dropped; for Slacker a fresh node whose chunk cache is empty)."})
	mb := &plot.BarChart{Title: "memory once all are ready: page cache and slackerd's chunk cache", Categories: cats, Stacked: true, Y: plot.Axis{Label: "bytes", Format: plot.Bytes}}
	pc := plot.Series{Name: "page cache (node, all cgroups)", Color: plot.Palette[4]}
	dc := plot.Series{Name: "slackerd chunk cache", Color: plot.Slacker}
	db := &plot.BarChart{Title: "bytes read while starting", Categories: cats, Y: plot.Axis{Label: "bytes", Format: plot.Bytes}}
	dr := plot.Series{Name: "from the disk", Color: plot.Palette[2]}
	sr := plot.Series{Name: "fetched from Slacker's store", Color: plot.Slacker}
	for _, k := range keys {
		pc.Y = append(pc.Y, r.Median(k.sys, k.limit, func(s Sample) float64 { return float64(s.PageCache) }))
		dc.Y = append(dc.Y, r.Median(k.sys, k.limit, func(s Sample) float64 { return float64(s.DaemonCache) }))
		dr.Y = append(dr.Y, r.Median(k.sys, k.limit, func(s Sample) float64 { return float64(s.DiskReadBytes) }))
		sr.Y = append(sr.Y, r.Median(k.sys, k.limit, func(s Sample) float64 { return float64(s.StoreBytes) }))
	}
	mb.Series = []plot.Series{pc, dc}
	db.Series = []plot.Series{dr, sr}
	sec.Figures = append(sec.Figures,
		eval.Figure{File: "hpmapper-memory.svg", Title: "Cache usage (HP-Mapper's cache figure)", SVG: mb.SVG(),
			Caption: "Page cache of the node's whole cgroup tree (daemon and containers) and, for Slacker, the chunks slackerd holds in memory."},
		eval.Figure{File: "hpmapper-io.svg", Title: "Redundant reads (HP-Mapper's read-I/O figure)", SVG: db.SVG(),
			Caption: "Bytes the node's cgroups read from the disk while the containers started (blkio), and what slackerd fetched from its store (here a local directory on the same disk)."})
	tbl := eval.Table{Title: "Per system and memory limit (medians)", Header: []string{"system", "containers' memory limit", "ready", "all ready", "median container", "disk read", "store fetched",
		"page cache", "slackerd chunk cache", "anonymous", "daemon RSS", "OOM kills"}}
	for _, k := range keys {
		var ready, oom []float64
		for _, s := range r.Samples {
			if s.System == k.sys && s.Limit == k.limit {
				ready, oom = append(ready, float64(s.Ready)), append(oom, float64(s.OOMKills))
			}
		}
		med := func(f func(Sample) float64) float64 { return r.Median(k.sys, k.limit, f) }
		tbl.Rows = append(tbl.Rows, []string{k.sys, limitName(k.limit), fmt.Sprintf("%.0f/%d", stat.Median(ready), r.Containers),
			secs(med(seconds)), secs(med(func(s Sample) float64 { return s.ReadyMedian })),
			byts(med(func(s Sample) float64 { return float64(s.DiskReadBytes) })), byts(med(func(s Sample) float64 { return float64(s.StoreBytes) })),
			byts(med(func(s Sample) float64 { return float64(s.PageCache) })), byts(med(func(s Sample) float64 { return float64(s.DaemonCache) })),
			byts(med(func(s Sample) float64 { return float64(s.Anon) })), byts(med(func(s Sample) float64 { return float64(s.DaemonRSS) })),
			fmt.Sprintf("%.0f", stat.Median(oom))})
	}
	tbl.Note = fmt.Sprintf("Image %s (%s uncompressed), command %q, ready when a line matches %q; %d launched at once (at most %d launching together).",
		r.Image, eval.HumanBytes(r.ImageBytes), r.Args, r.Ready, r.Containers, r.Parallel)
	sec.Tables = append(sec.Tables, tbl)
	if r.hasBreakdown() {
		bt := eval.Table{Title: "Where the containers' reads go (medians)", Header: []string{"system", "containers' memory limit", "major page faults", "containers' page cache", "read through FUSE from the volumes"}}
		cpu := r.hasCPU()
		if cpu {
			bt.Header = append(bt.Header, "CPU s: daemon", "containers")
		}
		for _, k := range keys {
			med := func(f func(Sample) float64) float64 { return r.Median(k.sys, k.limit, f) }
			vr := "-"
			if k.sys != "overlayfs" {
				vr = byts(med(func(s Sample) float64 { return float64(s.VolumeReadBytes) }))
			}
			row := []string{k.sys, limitName(k.limit), fmt.Sprintf("%.0f", med(func(s Sample) float64 { return float64(s.MajorFaults) })),
				byts(med(func(s Sample) float64 { return float64(s.ContainersCache) })), vr}
			if cpu {
				row = append(row, secs(med(func(s Sample) float64 { return s.DaemonCPU })), secs(med(func(s Sample) float64 { return s.ContainersCPU })))
			}
			bt.Rows = append(bt.Rows, row)
		}
		bt.Note = r.breakdownNote(systems)
		sec.Tables = append(sec.Tables, bt)
	}
	for _, l := range r.Limits {
		ot, om := r.Median("overlayfs", l, seconds), r.Median("overlayfs", l, Memory)
		for _, sys := range systems[1:] {
			st, sm := r.Median(sys, l, seconds), r.Median(sys, l, Memory)
			sec.Headlines = append(sec.Headlines,
				eval.Headline{Name: fmt.Sprintf("%d containers, memory limit %s: time until all ready, overlayfs / %s", r.Containers, limitName(l), eval.Title(sys)),
					Value: fmt.Sprintf("%s (%s s vs %s s)%s", ratio(ot, st), secs(ot), secs(st), r.notReady(l, sys)), Paper: "HP-Mapper 2.0-7.2x faster than other drivers"},
				eval.Headline{Name: fmt.Sprintf("%d containers, memory limit %s: page cache + daemon cache, %s / overlayfs", r.Containers, limitName(l), eval.Title(sys)),
					Value: fmt.Sprintf("%s (%s vs %s)", ratio(sm, om), byts(sm), byts(om)), Paper: "HP-Mapper uses >65% less cache"})
		}
	}
	return sec
}

// breakdownNote explains the read breakdown of the systems reported.
func (r *Results) breakdownNote(systems []string) string {
	note := "Page faults and page cache of the containers' cgroup. "
	if r.RootModes == nil {
		// Results from before the modes were measured: "slacker" launched block clones.
		return note + "overlayfs shares one page cache of the image's files among all containers; " +
			"each Slacker container has its own ext4 on its own clone, so each caches its own copy of what it reads, and under a memory limit the pages evicted are read again through loop, FUSE and slackerd."
	}
	note += "overlayfs, and slacker (Slacker's default mode: one read-only mount of the image per node, under each container's overlay), share one page cache of the image's files among all containers; " +
		"slacker's reads through FUSE are its image root's, counted once"
	if slices.Contains(systems, "slacker-block") {
		note += ". slacker-block gives each container its own ext4 on its own clone, so each caches its own copy of what it reads, and under a memory limit the pages evicted are read again through loop, FUSE and slackerd"
	}
	return note + "."
}

func secs(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.3g", v)
}

func byts(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return plot.Bytes(v)
}

func ratio(a, b float64) string {
	v := stat.Ratio(a, b)
	if math.IsNaN(v) {
		return "-"
	}
	return plot.Times(v)
}

// hasBreakdown says whether the samples carry the read breakdown (results of older
// runs do not).
func (r *Results) hasBreakdown() bool {
	for _, s := range r.Samples {
		if s.MajorFaults > 0 || s.ContainersCache > 0 {
			return true
		}
	}
	return false
}

// hasCPU says whether the samples carry CPU times (results of older runs do not).
func (r *Results) hasCPU() bool {
	for _, s := range r.Samples {
		if s.DaemonCPU > 0 || s.ContainersCPU > 0 {
			return true
		}
	}
	return false
}

// notReady notes, for the headline comparing sys with overlayfs, those of the two
// whose starts under limit did not all get ready (their time is then the timeout).
func (r *Results) notReady(limit int64, sys string) string {
	var out string
	for _, sys := range []string{"overlayfs", sys} {
		var ready []float64
		for _, s := range r.Samples {
			if s.System == sys && s.Limit == limit {
				ready = append(ready, float64(s.Ready))
			}
		}
		if len(ready) > 0 && stat.Median(ready) < float64(r.Containers) {
			out += fmt.Sprintf("; %s: only %.0f of %d ready by the timeout", sys, stat.Median(ready), r.Containers)
		}
	}
	return out
}
