package scale

import (
	"fmt"
	"math"

	"github.com/slacker-dev/slacker/internal/eval"
	"github.com/slacker-dev/slacker/internal/eval/plot"
	"github.com/slacker-dev/slacker/internal/eval/stat"
)

// Summary summarizes the successful samples of one point.
func (r *Results) Summary(sys, op string, size int64, n int) stat.Summary {
	var v []float64
	for _, s := range r.Samples {
		if s.System == sys && s.Op == op && s.Size == size && s.Count == n && s.Error == "" {
			v = append(v, s.Seconds)
		}
	}
	return stat.Summarize(v)
}

// Section renders the results.
func (r *Results) Section() eval.Section {
	sec := eval.Section{Item: "scale", Title: "Push and pull scalability (Slacker Fig 10, 23)", Meta: r.Meta,
		Paper: "Pushing or pulling N random images at once (1 to 32 images of 1 MB to 1 GB each): with AUFS the time until all complete grows roughly linearly " +
			"with both the number and the size of the images (Fig 10). With Slacker, image size no longer matters; time still grows with the number of images, " +
			"but even 32 images push or pull in about 2 s at most (Fig 23)."}
	for _, op := range []string{"push", "pull"} {
		lc := &plot.LineChart{Title: fmt.Sprintf("%s of N images at once: time until all complete (median of %d)", op, r.Runs),
			X: plot.Axis{Label: "images at once", Log: true}, Y: plot.Axis{Label: "seconds", Log: true, Format: plot.Seconds}, Height: 420}
		for i, size := range r.Sizes {
			for _, sys := range []string{"overlayfs", "slacker"} {
				s := plot.Series{Name: fmt.Sprintf("%s %s", sys, plot.Bytes(float64(size))), Color: plot.Palette[(i+2)%len(plot.Palette)], Points: true, Dash: sys == "slacker"}
				for _, n := range r.Counts {
					s.X = append(s.X, float64(n))
					s.Y = append(s.Y, r.Summary(sys, op, size, n).Median)
				}
				lc.Series = append(lc.Series, s)
			}
		}
		sec.Figures = append(sec.Figures, eval.Figure{File: "scale-" + op + ".svg", Title: fmt.Sprintf("Concurrent %ss (paper Fig 10 and 23)", op), SVG: lc.SVG(),
			Caption: "Solid: containerd + overlayfs; dashed: Slacker; one colour per image size. Each trial starts from an empty registry; pulls start on a cold node."})
	}
	tbl := eval.Table{Title: "Time until all complete (median, seconds)", Header: []string{"images", "size", "push: overlayfs", "slacker", "ratio", "pull: overlayfs", "slacker", "ratio"}}
	for _, size := range r.Sizes {
		for _, n := range r.Counts {
			row := []string{fmt.Sprint(n), eval.HumanBytes(size)}
			for _, op := range []string{"push", "pull"} {
				o, s := r.Summary("overlayfs", op, size, n).Median, r.Summary("slacker", op, size, n).Median
				row = append(row, secs(o), secs(s), ratio(o, s))
			}
			tbl.Rows = append(tbl.Rows, row)
		}
	}
	var conv []string
	for _, size := range r.Sizes {
		var v []float64
		for _, c := range r.Convert {
			if c.Size == size {
				v = append(v, c.Seconds)
			}
		}
		conv = append(conv, fmt.Sprintf("%s %.2f s", eval.HumanBytes(size), stat.Median(v)))
	}
	tbl.Note = "Not in Slacker's push: converting an OCI image into a Slacker image once (clone, apply the layer, snapshot into the store), median per image: " + fmt.Sprint(conv) + "."
	sec.Tables = append(sec.Tables, tbl)
	if len(r.Sizes) > 0 && len(r.Counts) > 0 {
		size, n := r.Sizes[len(r.Sizes)-1], r.Counts[len(r.Counts)-1]
		for _, op := range []string{"push", "pull"} {
			o, s := r.Summary("overlayfs", op, size, n).Median, r.Summary("slacker", op, size, n).Median
			sec.Headlines = append(sec.Headlines, eval.Headline{Name: fmt.Sprintf("%d concurrent %ss of %s images, overlayfs vs Slacker", n, op, eval.HumanBytes(size)),
				Value: fmt.Sprintf("%s vs %s (%s)", secs(o)+" s", secs(s)+" s", ratio(o, s)), Paper: "Slacker ≤ ~2 s for 32 images"})
		}
	}
	return sec
}

func secs(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.3g", v)
}

func ratio(a, b float64) string {
	v := stat.Ratio(a, b)
	if math.IsNaN(v) {
		return "-"
	}
	return plot.Times(v)
}
