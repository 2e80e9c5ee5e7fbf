package analysis

import (
	"fmt"
	"math"

	"github.com/slacker-dev/slacker/bench/eval"
	"github.com/slacker-dev/slacker/bench/eval/plot"
	"github.com/slacker-dev/slacker/bench/eval/stat"
	"github.com/slacker-dev/slacker/bench/workload"
)

// median of a start field over an image's successful runs (NaN if none).
func (im Image) median(f func(Start) float64) float64 {
	var v []float64
	for _, s := range im.Starts {
		if s.Error == "" {
			v = append(v, f(s))
		}
	}
	return stat.Median(v)
}

// Read is the median distinct bytes read at start-up.
func (im Image) Read() float64 {
	return im.median(func(s Start) float64 { return float64(s.ReadBytes) })
}

// Fetched is the median bytes the node fetched for the first container.
func (im Image) Fetched() float64 {
	return im.median(func(s Start) float64 { return float64(s.FetchedBytes) })
}

func (r *Results) hasStarts() bool {
	for _, im := range r.Images {
		if !math.IsNaN(im.Read()) {
			return true
		}
	}
	return false
}

// categories present, in the paper's order.
func (r *Results) categories() []string {
	var out []string
	for _, c := range workload.Categories {
		for _, im := range r.Images {
			if im.Category == string(c) {
				out = append(out, string(c))
				break
			}
		}
	}
	return out
}

// catMean is the mean of f over the images of category c (all images for "").
func (r *Results) catMean(c string, f func(Image) float64) float64 {
	var v []float64
	for _, im := range r.Images {
		if c == "" || im.Category == c {
			v = append(v, f(im))
		}
	}
	return stat.Mean(v)
}

func gz(im Image) float64    { return float64(im.GzBytes) }
func tarB(im Image) float64  { return float64(im.TarBytes) }
func readB(im Image) float64 { return im.Read() }

// Section renders the results.
func (r *Results) Section() eval.Section {
	sec := eval.Section{Item: "analysis", Title: "Workload analysis of the HelloBench corpus (Slacker §4: Fig 5, 6, 7, 12, 13, 14)", Meta: r.Meta,
		Paper: "On 57 Docker Hub images (2015): the median image is 117 MB compressed and 329 MB uncompressed, but a workload reads only 20 MB at the median " +
			"to start; on average images are 15x larger than what is read, and only 6.4% of the data is needed (Fig 5, 6). gzip compresses images 2.3-2.7x per image; " +
			"deduplication does poorly inside one image but reaches 2.6x (files) and 2.8x (4 KB blocks) across all images (Fig 7). Half of the bytes are at depth 9 or more (Fig 12); " +
			"for 79% of images the top layer holds 0% of the data, the bottom layer holds 27% on average (Fig 13). In a second run of the same image, up to 99% of reads could be served by a cache the first run filled (Fig 14)."}
	if r.StartMethod != "" {
		sec.Paper += " Here, bytes read at start-up: " + r.StartMethod + "."
	}
	cats := r.categories()
	starts := r.hasStarts()

	// Fig 5: CDFs of sizes.
	cdf := &plot.LineChart{Title: "image sizes and bytes read at start-up, CDF over images (Fig 5)", X: plot.Axis{Label: "bytes", Log: true, Format: plot.Bytes},
		Y: plot.Axis{Label: "fraction of images", Lo: 0, Hi: 1, Format: plot.Percent}}
	series := []struct {
		name  string
		color string
		f     func(Image) float64
	}{{"compressed", plot.Palette[2], gz}, {"uncompressed", plot.Palette[3], tarB}}
	if starts {
		series = append(series, struct {
			name  string
			color string
			f     func(Image) float64
		}{"read at start-up", plot.Slacker, readB})
	}
	for _, s := range series {
		var v []float64
		for _, im := range r.Images {
			v = append(v, s.f(im))
		}
		xs, ps := stat.CDF(v)
		cdf.Series = append(cdf.Series, plot.Series{Name: s.name, Color: s.color, X: xs, Y: ps, Step: true})
		cdf.Marks = append(cdf.Marks, plot.Mark{X: stat.Median(v), Label: "median " + s.name + " " + plot.Bytes(stat.Median(v)), Color: s.color})
	}
	sec.Figures = append(sec.Figures, eval.Figure{File: "analysis-sizes-cdf.svg", Title: "Data sizes, CDF (paper Fig 5)", SVG: cdf.SVG(),
		Caption: "Compressed: the gzip layer blobs; uncompressed: the layer tars; read: distinct bytes of the image a workload read until ready, under Slacker (first container on a cold node)."})

	// Fig 6: by category, with amplification factors.
	bars := &plot.BarChart{Title: "mean sizes by category, labelled with the amplification over bytes read (Fig 6)", Categories: append(append([]string(nil), cats...), "all"),
		Y: plot.Axis{Label: "bytes", Log: true, Format: plot.Bytes}}
	gs := plot.Series{Name: "compressed (what overlayfs pulls)", Color: plot.Baseline}
	ts := plot.Series{Name: "uncompressed", Color: plot.Palette[3]}
	rs := plot.Series{Name: "read at start-up", Color: plot.Palette[2]}
	fs := plot.Series{Name: "fetched by Slacker", Color: plot.Slacker}
	catTbl := eval.Table{Title: "Sizes by category (means) and amplification over bytes read",
		Header: []string{"category", "images", "compressed", "uncompressed", "read at start-up", "fetched by Slacker", "compressed / read", "uncompressed / read", "read / uncompressed"}}
	for _, c := range bars.Categories {
		cc := c
		if c == "all" {
			cc = ""
		}
		g, t := r.catMean(cc, gz), r.catMean(cc, tarB)
		rd, fe := r.catMean(cc, readB), r.catMean(cc, func(im Image) float64 { return im.Fetched() })
		gs.Y, ts.Y, rs.Y, fs.Y = append(gs.Y, g), append(ts.Y, t), append(rs.Y, rd), append(fs.Y, fe)
		gs.Labels = append(gs.Labels, label(stat.Ratio(g, rd)))
		ts.Labels = append(ts.Labels, label(stat.Ratio(t, rd)))
		n := 0
		for _, im := range r.Images {
			if cc == "" || im.Category == cc {
				n++
			}
		}
		catTbl.Rows = append(catTbl.Rows, []string{c, fmt.Sprint(n), bytesCell(g), bytesCell(t), bytesCell(rd), bytesCell(fe),
			times(stat.Ratio(g, rd)), times(stat.Ratio(t, rd)), pct(stat.Ratio(rd, t))})
	}
	bars.Series = []plot.Series{gs, ts}
	if starts {
		bars.Series = append(bars.Series, rs, fs)
	}
	sec.Figures = append(sec.Figures, eval.Figure{File: "analysis-sizes-category.svg", Title: "Data sizes by category (paper Fig 6)", SVG: bars.SVG(),
		Caption: "Bars are labelled with the amplification factor: bytes transferred (compressed) or stored (uncompressed) per byte read at start-up."})
	sec.Tables = append(sec.Tables, catTbl)
	if starts {
		var rd, t float64
		for _, im := range r.Images {
			if v := im.Read(); !math.IsNaN(v) {
				rd += v
				t += float64(im.TarBytes)
			}
		}
		sec.Headlines = append(sec.Headlines, eval.Headline{Name: "share of the image read at start-up (all workloads)", Value: pct(rd / t), Paper: "6.4%"})
	}

	// Fig 7: compression and deduplication.
	names := make([]string, len(r.Images))
	dz := plot.Series{Name: "gzip", Color: plot.Palette[2]}
	df := plot.Series{Name: "file dedup", Color: plot.Palette[3]}
	db := plot.Series{Name: "4 KiB block dedup", Color: plot.Palette[4]}
	var gzr []float64
	for i, im := range r.Images {
		names[i] = im.Name
		dz.Y = append(dz.Y, stat.Ratio(float64(im.TarBytes), float64(im.GzBytes)))
		df.Y = append(df.Y, stat.Ratio(float64(im.FileBytes), float64(im.UniqueFileBytes)))
		db.Y = append(db.Y, stat.Ratio(float64(im.FileBytes), float64(im.UniqueBlockBytes)))
		gzr = append(gzr, dz.Y[i])
	}
	c := r.Corpus
	gf, gb := stat.Ratio(float64(c.RawBytes), float64(c.UniqueFileBytes)), stat.Ratio(float64(c.RawBytes), float64(c.UniqueBlockBytes))
	ded := &plot.BarChart{Title: fmt.Sprintf("compression and deduplication ratios per image; across all images: files %s, blocks %s (dashed)", times(gf), times(gb)),
		Categories: names, Series: []plot.Series{dz, df, db}, Y: plot.Axis{Label: "raw / compressed or deduplicated", Format: plot.Times},
		RefLines: []float64{gf, gb}, Width: 1000, Height: 420}
	sec.Figures = append(sec.Figures, eval.Figure{File: "analysis-dedup.svg", Title: "Compression and deduplication (paper Fig 7)", SVG: ded.SVG(),
		Caption: "gzip: uncompressed layer bytes over their gzip size; dedup: file bytes over the distinct file contents or distinct 4 KiB blocks, inside each image; dashed lines: the same over all images (each image counted with all its layers)."})
	sec.Tables = append(sec.Tables, eval.Table{Title: "Compression and deduplication across the corpus",
		Header: []string{"measure", "ours", "paper"},
		Rows: [][]string{
			{"gzip, per image (median)", times(stat.Median(gzr)), "2.3-2.7x"},
			{"file dedup, per image (median)", times(stat.Median(df.Y)), "poor (~1.1x)"},
			{"4 KiB block dedup, per image (median)", times(stat.Median(db.Y)), "poor (~1.2x)"},
			{"file dedup, all images", times(gf), "2.6x"},
			{"4 KiB block dedup, all images", times(gb), "2.8x"},
			{"gzip, all distinct layers", times(stat.Ratio(float64(c.TarBytes), float64(c.GzBytes))), "-"},
			{"layer sharing alone (file bytes of all images / of the distinct layers)", times(stat.Ratio(float64(c.RawBytes), float64(c.DistinctLayerBytes))), "-"},
		},
		Note: fmt.Sprintf("%d images, %d distinct layers; file bytes %s over all images, %s in distinct layers, %s of distinct files, %s of distinct 4 KiB blocks.",
			len(r.Images), c.DistinctLayers, plot.Bytes(float64(c.RawBytes)), plot.Bytes(float64(c.DistinctLayerBytes)), plot.Bytes(float64(c.UniqueFileBytes)), plot.Bytes(float64(c.UniqueBlockBytes)))})
	sec.Headlines = append(sec.Headlines, eval.Headline{Name: "4 KiB block dedup across all images vs gzip per image (median)",
		Value: fmt.Sprintf("%s vs %s", times(gb), times(stat.Median(gzr))), Paper: "2.8x vs 2.3-2.7x"})

	// Fig 12: data depth.
	maxDepth := 0
	for _, im := range r.Images {
		maxDepth = max(maxDepth, len(im.DepthBytes))
	}
	files, dirs, byts := make([]float64, maxDepth), make([]float64, maxDepth), make([]float64, maxDepth)
	var tf, td, tb float64
	for _, im := range r.Images {
		for d := range im.DepthBytes {
			files[d] += float64(im.DepthFiles[d])
			dirs[d] += float64(im.DepthDirs[d])
			byts[d] += float64(im.DepthBytes[d])
			tf, td, tb = tf+float64(im.DepthFiles[d]), td+float64(im.DepthDirs[d]), tb+float64(im.DepthBytes[d])
		}
	}
	depth := &plot.LineChart{Title: "share of files, directories and bytes by layer depth (Fig 12)", X: plot.Axis{Label: "layer depth (1 = top layer)"},
		Y: plot.Axis{Label: "share of the corpus", Format: plot.Percent}}
	dtbl := eval.Table{Title: "Data by layer depth (1 = top layer), over all images", Header: []string{"depth", "files", "directories", "bytes", "bytes at this depth or deeper"}}
	var xs []float64
	for d := range maxDepth {
		xs = append(xs, float64(d+1))
	}
	depth.Series = []plot.Series{
		{Name: "files", X: xs, Y: scale(files, tf), Points: true, Color: plot.Palette[2]},
		{Name: "directories", X: xs, Y: scale(dirs, td), Points: true, Color: plot.Palette[3]},
		{Name: "bytes", X: xs, Y: scale(byts, tb), Points: true, Color: plot.Palette[4]},
	}
	deeper := 0.0
	for d := maxDepth - 1; d >= 0; d-- {
		deeper += byts[d]
		dtbl.Rows = append([][]string{{fmt.Sprint(d + 1), pct(files[d] / tf), pct(dirs[d] / td), pct(byts[d] / tb), pct(deeper / tb)}}, dtbl.Rows...)
	}
	sec.Figures = append(sec.Figures, eval.Figure{File: "analysis-depth.svg", Title: "Data depth (paper Fig 12)", SVG: depth.SVG(),
		Caption: "Each image counts all of its layers, top layer at depth 1."})
	sec.Tables = append(sec.Tables, dtbl)

	// Fig 13: top, bottom and largest layer's share.
	share := &plot.LineChart{Title: "share of an image's bytes in its top, bottom and largest layer, CDF over images (Fig 13)",
		X: plot.Axis{Label: "share of the image's file bytes", Lo: 0, Hi: 1, Format: plot.Percent}, Y: plot.Axis{Label: "fraction of images", Lo: 0, Hi: 1, Format: plot.Percent}}
	var top, bottom, largest []float64
	for _, im := range r.Images {
		top, bottom, largest = append(top, im.TopShare()), append(bottom, im.BottomShare()), append(largest, im.LargestShare())
	}
	for i, s := range []struct {
		n string
		v []float64
	}{{"top layer", top}, {"bottom layer", bottom}, {"largest layer", largest}} {
		x, p := stat.CDF(s.v)
		share.Series = append(share.Series, plot.Series{Name: s.n, X: x, Y: p, Step: true, Color: plot.Palette[i+2]})
	}
	zeroTop := 0
	for _, v := range top {
		if v < 0.005 {
			zeroTop++
		}
	}
	sec.Figures = append(sec.Figures, eval.Figure{File: "analysis-layer-share.svg", Title: "Layer size relative to the image (paper Fig 13)", SVG: share.SVG(),
		Caption: fmt.Sprintf("Top layer under 0.5%% of the image: %d of %d images; mean share of the bottom layer %s, of the largest %s.",
			zeroTop, len(r.Images), pct(stat.Mean(bottom)), pct(stat.Mean(largest)))})

	// Fig 14: repeated I/O.
	if starts {
		st := &plot.BarChart{Title: "I/O of a second container of the same image, mean per workload by category (Fig 14)", Categories: append(append([]string(nil), cats...), "all"),
			Stacked: true, Y: plot.Axis{Label: "bytes", Format: plot.Bytes}}
		hit := plot.Series{Name: "reads a first run's cache would serve", Color: plot.Slacker}
		miss := plot.Series{Name: "other reads", Color: plot.Palette[2]}
		wr := plot.Series{Name: "writes", Color: plot.Baseline}
		rtbl := eval.Table{Title: "Second run: reads served by a cache of the first run", Header: []string{"category", "read", "of which hits", "hit rate", "written", "read / (read + written)"}}
		for _, c := range st.Categories {
			cc := c
			if c == "all" {
				cc = ""
			}
			h := r.catMean(cc, func(im Image) float64 { return im.median(func(s Start) float64 { return float64(s.HitBytes) }) })
			m := r.catMean(cc, func(im Image) float64 { return im.median(func(s Start) float64 { return float64(s.MissBytes) }) })
			w := r.catMean(cc, func(im Image) float64 { return im.median(func(s Start) float64 { return float64(s.WrittenBytes2) }) })
			hit.Y, miss.Y, wr.Y = append(hit.Y, h), append(miss.Y, m), append(wr.Y, w)
			rtbl.Rows = append(rtbl.Rows, []string{c, bytesCell(h + m), bytesCell(h), pct(stat.Ratio(h, h+m)), bytesCell(w), pct(stat.Ratio(h+m, h+m+w))})
			if c == "all" {
				sec.Headlines = append(sec.Headlines, eval.Headline{Name: "second-run reads a first run's cache would serve", Value: pct(stat.Ratio(h, h+m)), Paper: "up to 99%"})
			}
		}
		st.Series = []plot.Series{hit, miss, wr}
		sec.Figures = append(sec.Figures, eval.Figure{File: "analysis-repeat.svg", Title: "Repeated I/O (paper Fig 14)", SVG: st.SVG(),
			Caption: "A second container of the same image on the same node, after the first: its distinct blocks read from the image, split by whether the first container read them too, and its bytes written."})
		sec.Tables = append(sec.Tables, rtbl)
	}

	// Per-workload table.
	wt := eval.Table{Title: "Per workload", Header: []string{"workload", "category", "layers", "compressed", "uncompressed", "files", "read at start-up", "fetched by Slacker", "read / uncompressed", "second-run hit rate", "start s (cold)", "start s (second)"}}
	for _, im := range r.Images {
		h := im.median(func(s Start) float64 { return float64(s.HitBytes) })
		rd2 := im.median(func(s Start) float64 { return float64(s.ReadBytes2) })
		wt.Rows = append(wt.Rows, []string{im.Name, im.Category, fmt.Sprint(im.Layers), bytesCell(float64(im.GzBytes)), bytesCell(float64(im.TarBytes)),
			fmt.Sprint(im.Files), bytesCell(im.Read()), bytesCell(im.Fetched()), pct(stat.Ratio(im.Read(), float64(im.TarBytes))), pct(stat.Ratio(h, rd2)),
			secCell(im.median(func(s Start) float64 { return s.Seconds })), secCell(im.median(func(s Start) float64 { return s.Seconds2 }))})
	}
	sec.Tables = append(sec.Tables, wt)
	return sec
}

func scale(v []float64, total float64) []float64 {
	out := make([]float64, len(v))
	for i := range v {
		out[i] = stat.Ratio(v[i], total)
	}
	return out
}

// label is a bar's amplification label, empty when unknown.
func label(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return ""
	}
	return plot.Times(v)
}

func times(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return plot.Times(v)
}

func pct(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	return plot.Percent(v)
}

func bytesCell(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return plot.Bytes(v)
}

func secCell(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.2f", v)
}
