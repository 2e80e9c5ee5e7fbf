package scale

import (
	"fmt"
	"math"

	"github.com/slacker-dev/slacker/bench/eval"
	"github.com/slacker-dev/slacker/bench/eval/plot"
	"github.com/slacker-dev/slacker/bench/eval/stat"
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
					if m := r.Summary(sys, op, size, n).Median; !math.IsNaN(m) {
						s.X, s.Y = append(s.X, float64(n)), append(s.Y, m)
					}
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
			if !r.has(size, n) {
				continue
			}
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
	if r.MaxBytes > 0 {
		tbl.Note = fmt.Sprintf("Trials moving more than %s at once (count x size) were not run. ", eval.HumanBytes(r.MaxBytes))
	}
	tbl.Note += "Not in Slacker's push: converting an OCI image into a Slacker image once (clone, apply the layer, snapshot into the store), median per image: " + fmt.Sprint(conv) + "."
	sec.Tables = append(sec.Tables, tbl)
	for _, p := range r.headlinePoints() {
		size, n := p.size, p.n
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

// has says whether any sample is of n images of size.
func (r *Results) has(size int64, n int) bool {
	for _, s := range r.Samples {
		if s.Size == size && s.Count == n {
			return true
		}
	}
	return false
}

type point struct {
	size int64
	n    int
}

// headlinePoints are the most images at once of the largest size that has them,
// and the largest size's most images at once when that is another point.
func (r *Results) headlinePoints() []point {
	var out []point
	if len(r.Counts) == 0 {
		return nil
	}
	maxN := r.Counts[len(r.Counts)-1]
	for i := len(r.Sizes) - 1; i >= 0; i-- {
		if r.has(r.Sizes[i], maxN) {
			out = append(out, point{r.Sizes[i], maxN})
			break
		}
	}
	if len(r.Sizes) > 0 {
		big := r.Sizes[len(r.Sizes)-1]
		for j := len(r.Counts) - 1; j >= 0; j-- {
			if r.has(big, r.Counts[j]) {
				if len(out) == 0 || out[0] != (point{big, r.Counts[j]}) {
					out = append(out, point{big, r.Counts[j]})
				}
				break
			}
		}
	}
	return out
}
