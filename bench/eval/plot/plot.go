package plot

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// Palette colours series in order; Baseline and Slacker are the first two.
var Palette = []string{"#d95f02", "#1b9e77", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#666666", "#1f78b4", "#b15928"}

// Colours of the systems compared everywhere.
const (
	Baseline     = "#d95f02" // containerd + overlayfs
	Slacker      = "#1b9e77" // Slacker's default mode (shared roots)
	SlackerBlock = "#386cb0" // Slacker's block mode (block clones)
)

const font = `font-family="DejaVu Sans, Helvetica, Arial, sans-serif"`

// Axis describes one axis.
type Axis struct {
	Label string
	Log   bool
	// Lo and Hi fix the range when Hi > Lo; otherwise it fits the data (from 0 for a
	// linear bar axis).
	Lo, Hi float64
	// Format renders tick labels (default: Number).
	Format func(float64) string
}

// Series is one line or one set of bars.
type Series struct {
	Name  string
	Color string // default: Palette by position
	// X and Y are a line's points (Y only, for bars: one value per category).
	X, Y []float64
	// Labels, for bars, are drawn above each bar (e.g. "15x"); for lines, beside
	// each point.
	Labels []string
	Dash   bool // dashed line
	Step   bool // draw as steps (an empirical CDF)
	Points bool // mark each point
}

// Mark is a vertical line at X with a label (a median, a percentile).
type Mark struct {
	X     float64
	Label string
	Color string
}

// LineChart is an x-y chart.
type LineChart struct {
	Title  string
	X, Y   Axis
	Series []Series
	Marks  []Mark
	// Width and Height in pixels (default 640 x 380).
	Width, Height int
}

// BarChart draws one group of bars per category: side by side, or stacked when
// Stacked is set.
type BarChart struct {
	Title      string
	Categories []string
	Y          Axis
	Series     []Series
	Stacked    bool
	// Horizontal lines (e.g. 1x for a ratio).
	RefLines      []float64
	Width, Height int
}

type canvas struct{ strings.Builder }

func (c *canvas) f(format string, args ...any) { fmt.Fprintf(&c.Builder, format, args...) }

func esc(s string) string { return html.EscapeString(s) }

func color(s Series, i int) string {
	if s.Color != "" {
		return s.Color
	}
	return Palette[i%len(Palette)]
}

// scale maps data values to pixels.
type scale struct {
	lo, hi float64
	p0, p1 float64
	log    bool
	ticks  []float64
}

func (s *scale) px(v float64) float64 {
	lo, hi := s.lo, s.hi
	if s.log {
		v, lo, hi = math.Log10(math.Max(v, 1e-300)), math.Log10(lo), math.Log10(hi)
	}
	if hi == lo {
		return s.p0
	}
	return s.p0 + (v-lo)/(hi-lo)*(s.p1-s.p0)
}

// fit sets the range and ticks for data in [lo, hi].
func (s *scale) fit(a Axis, lo, hi float64) {
	if a.Hi > a.Lo {
		lo, hi = a.Lo, a.Hi
	}
	if math.IsNaN(lo) || math.IsNaN(hi) || math.IsInf(lo, 0) || math.IsInf(hi, 0) {
		lo, hi = 0, 1
	}
	s.log = a.Log
	if a.Log {
		lo, hi = math.Max(lo, 1e-12), math.Max(hi, 1e-12)
		l0, l1 := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
		if l1 <= l0 {
			l1 = l0 + 1
		}
		s.lo, s.hi, s.ticks = math.Pow(10, l0), math.Pow(10, l1), nil
		for e := l0; e <= l1; e++ {
			s.ticks = append(s.ticks, math.Pow(10, e))
		}
		return
	}
	if hi <= lo {
		hi = lo + 1
	}
	step := niceStep((hi - lo) / 5)
	s.lo, s.hi, s.ticks = math.Floor(lo/step)*step, math.Ceil(hi/step)*step, nil
	for v := s.lo; v <= s.hi+step/2; v += step {
		s.ticks = append(s.ticks, math.Round(v/step)*step)
	}
}

func niceStep(x float64) float64 {
	if x <= 0 || math.IsNaN(x) {
		return 1
	}
	e := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*e >= x*0.999 {
			return m * e
		}
	}
	return 10 * e
}

func orNumber(f func(float64) string) func(float64) string {
	if f == nil {
		return Number
	}
	return f
}

func size(w, h int) (int, int) {
	if w <= 0 {
		w = 640
	}
	if h <= 0 {
		h = 380
	}
	return w, h
}

func header(c *canvas, w, h int, title string) {
	c.f(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" %s font-size="12">`+"\n", w, h, w, h, font)
	c.f(`<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	// Shrink a long title to fit the width (bold glyphs are about 0.6 em wide).
	fs := math.Min(14, float64(w-16)/(0.6*float64(max(len([]rune(title)), 1))))
	c.f(`<text x="%d" y="18" text-anchor="middle" font-size="%.1f" font-weight="bold">%s</text>`+"\n", w/2, fs, esc(title))
}

// legendWidth is the width a series' legend entry takes.
func legendWidth(s Series) float64 { return 22 + 7*float64(len([]rune(s.Name))) + 18 }

// legendRows is how many rows the legend takes between x0 and x1.
func legendRows(series []Series, x0, x1 float64) int {
	rows, x := 0, x0
	for _, s := range series {
		if s.Name == "" {
			continue
		}
		if rows == 0 || (x+legendWidth(s) > x1 && x > x0) {
			rows, x = rows+1, x0
		}
		x += legendWidth(s)
	}
	return rows
}

// legend draws the series names in rows under the title, from y.
func legend(c *canvas, x0, x1, y float64, series []Series) {
	x := x0
	for i, s := range series {
		if s.Name == "" {
			continue
		}
		if x+legendWidth(s) > x1 && x > x0 {
			x, y = x0, y+16
		}
		dash := ""
		if s.Dash {
			dash = ` stroke-dasharray="5,3"`
		}
		c.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="3"%s/>`, x, y-4, x+18, y-4, color(s, i), dash)
		c.f(`<text x="%.1f" y="%.1f">%s</text>`+"\n", x+22, y, esc(s.Name))
		x += legendWidth(s)
	}
}

// yAxis draws horizontal grid lines, ticks and the label.
func yAxis(c *canvas, s *scale, a Axis, left, right float64) {
	format := orNumber(a.Format)
	for _, t := range s.ticks {
		y := s.px(t)
		c.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`, left, y, right, y)
		c.f(`<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", left-5, y+4, esc(format(t)))
	}
	mid := (s.p0 + s.p1) / 2
	c.f(`<text x="14" y="%.1f" text-anchor="middle" transform="rotate(-90 14 %.1f)">%s</text>`+"\n", mid, mid, esc(a.Label))
}

// SVG renders the chart.
func (ch *LineChart) SVG() string {
	w, h := size(ch.Width, ch.Height)
	left, right, bottom := 70.0, float64(w)-20, float64(h)-48
	top := 32 + 16*float64(max(legendRows(ch.Series, left, right), 1))
	xlo, xhi, ylo, yhi := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for _, s := range ch.Series {
		for i, x := range s.X {
			if i >= len(s.Y) || math.IsNaN(x) || math.IsNaN(s.Y[i]) || (ch.X.Log && x <= 0) || (ch.Y.Log && s.Y[i] <= 0) {
				continue
			}
			xlo, xhi = math.Min(xlo, x), math.Max(xhi, x)
			ylo, yhi = math.Min(ylo, s.Y[i]), math.Max(yhi, s.Y[i])
		}
	}
	if !ch.Y.Log && ylo > 0 {
		ylo = 0
	}
	xs := &scale{p0: left, p1: right}
	xs.fit(ch.X, xlo, xhi)
	ys := &scale{p0: bottom, p1: top}
	ys.fit(ch.Y, ylo, yhi)
	var c canvas
	header(&c, w, h, ch.Title)
	legend(&c, left, right, 36, ch.Series)
	yAxis(&c, ys, ch.Y, left, right)
	xf := orNumber(ch.X.Format)
	for _, t := range xs.ticks {
		x := xs.px(t)
		c.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/>`, x, top, x, bottom)
		c.f(`<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x, bottom+16, esc(xf(t)))
	}
	c.f(`<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", (left+right)/2, float64(h)-10, esc(ch.X.Label))
	c.f(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#888"/>`+"\n", left, top, right-left, bottom-top)
	for i, s := range ch.Series {
		col := color(s, i)
		var pts []string
		var px, py []float64
		prevY := math.NaN()
		for j, x := range s.X {
			if j >= len(s.Y) {
				break
			}
			y := s.Y[j]
			if math.IsNaN(x) || math.IsNaN(y) || (ch.X.Log && x <= 0) || (ch.Y.Log && y <= 0) {
				continue
			}
			X, Y := xs.px(x), ys.px(y)
			if s.Step && !math.IsNaN(prevY) {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", X, prevY))
			}
			if s.Step && math.IsNaN(prevY) && ch.Y.Lo == 0 && !ch.Y.Log {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", X, ys.px(0)))
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", X, Y))
			px, py = append(px, X), append(py, Y)
			prevY = Y
		}
		dash := ""
		if s.Dash {
			dash = ` stroke-dasharray="6,4"`
		}
		if len(pts) > 1 {
			c.f(`<polyline fill="none" stroke="%s" stroke-width="2"%s points="%s"/>`+"\n", col, dash, strings.Join(pts, " "))
		}
		if s.Points || len(pts) == 1 {
			for k := range px {
				c.f(`<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`, px[k], py[k], col)
			}
			c.f("\n")
		}
		for k, l := range s.Labels {
			if k < len(px) && l != "" {
				c.f(`<text x="%.1f" y="%.1f" font-size="10" fill="%s">%s</text>`+"\n", px[k]+4, py[k]-4, col, esc(l))
			}
		}
	}
	for i, m := range ch.Marks {
		if math.IsNaN(m.X) || (ch.X.Log && m.X <= 0) {
			continue
		}
		col := m.Color
		if col == "" {
			col = "#444"
		}
		x := xs.px(m.X)
		c.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-dasharray="3,3"/>`, x, top, x, bottom, col)
		c.f(`<text x="%.1f" y="%.1f" font-size="10" fill="%s">%s</text>`+"\n", x+3, top+12+float64(i%4)*12, col, esc(m.Label))
	}
	c.f("</svg>\n")
	return c.String()
}

// SVG renders the chart.
func (ch *BarChart) SVG() string {
	w, h := size(ch.Width, ch.Height)
	maxLabel := 0
	for _, cat := range ch.Categories {
		maxLabel = max(maxLabel, len([]rune(cat)))
	}
	// Rotate the category labels when they would not fit side by side.
	rot := 7*float64(maxLabel) > (float64(w)-90)/float64(max(len(ch.Categories), 1))
	left, right, bottom := 70.0, float64(w)-20, float64(h)-44
	top := 32 + 16*float64(max(legendRows(ch.Series, left, right), 1))
	if rot {
		bottom = float64(h) - 20 - math.Min(6.5*float64(maxLabel), 120)
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for k := range ch.Categories {
		stack := 0.0
		for _, s := range ch.Series {
			if k >= len(s.Y) || math.IsNaN(s.Y[k]) {
				continue
			}
			v := s.Y[k]
			if ch.Stacked {
				stack += v
				v = stack
			}
			if !ch.Y.Log || v > 0 {
				lo, hi = math.Min(lo, v), math.Max(hi, v)
			}
		}
	}
	for _, r := range ch.RefLines {
		lo, hi = math.Min(lo, r), math.Max(hi, r)
	}
	if !ch.Y.Log {
		lo = math.Min(lo, 0)
	}
	if ch.Y.Log && !math.IsInf(hi, 0) {
		hi *= 1.5 // room for labels
	} else if !math.IsInf(hi, 0) {
		hi *= 1.08
	}
	ys := &scale{p0: bottom, p1: top}
	ys.fit(ch.Y, lo, hi)
	var c canvas
	header(&c, w, h, ch.Title)
	legend(&c, left, right, 36, ch.Series)
	yAxis(&c, ys, ch.Y, left, right)
	n := max(len(ch.Categories), 1)
	slot := (right - left) / float64(n)
	nb := len(ch.Series)
	if ch.Stacked || nb == 0 {
		nb = 1
	}
	bw := slot * 0.8 / float64(nb)
	base := ys.px(math.Max(ys.lo, 0))
	if ch.Y.Log {
		base = ys.px(ys.lo)
	}
	for k, cat := range ch.Categories {
		x0 := left + float64(k)*slot + slot*0.1
		stack := 0.0
		for i, s := range ch.Series {
			if k >= len(s.Y) || math.IsNaN(s.Y[k]) {
				continue
			}
			v := s.Y[k]
			x := x0 + float64(i)*bw
			yb := base
			if ch.Stacked {
				x = x0
				yb = ys.px(stack)
				if ch.Y.Log && stack <= 0 {
					yb = base
				}
				stack += v
				v = stack
			}
			if ch.Y.Log && v <= 0 {
				continue
			}
			yt := ys.px(v)
			top, hgt := math.Min(yt, yb), math.Abs(yb-yt)
			c.f(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s: %s</title></rect>`,
				x, top, math.Max(bw-1, 1), hgt, color(s, i), esc(cat+" "+s.Name), esc(orNumber(ch.Y.Format)(s.Y[k])))
			if k < len(s.Labels) && s.Labels[k] != "" {
				lx, ly := x+bw/2, top-3
				if ch.Stacked {
					ly = top + hgt/2 + 4
				}
				c.f(`<text x="%.1f" y="%.1f" text-anchor="middle" font-size="9">%s</text>`, lx, ly, esc(s.Labels[k]))
			}
			c.f("\n")
		}
		cx := left + float64(k)*slot + slot/2
		if rot {
			c.f(`<text x="%.1f" y="%.1f" text-anchor="end" transform="rotate(-45 %.1f %.1f)">%s</text>`+"\n", cx, bottom+12, cx, bottom+12, esc(cat))
		} else {
			c.f(`<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", cx, bottom+16, esc(cat))
		}
	}
	for _, r := range ch.RefLines {
		y := ys.px(r)
		c.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333" stroke-dasharray="4,3"/>`+"\n", left, y, right, y)
	}
	c.f(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#888"/>`+"\n", left, top, right-left, bottom-top)
	c.f("</svg>\n")
	return c.String()
}

// Number renders v with at most 3 significant digits and an SI suffix (k, M, G).
func Number(v float64) string {
	a := math.Abs(v)
	switch {
	case v == 0:
		return "0"
	case a >= 1e9:
		return sig(v/1e9) + "G"
	case a >= 1e6:
		return sig(v/1e6) + "M"
	case a >= 1e4:
		return sig(v/1e3) + "k"
	default:
		return sig(v)
	}
}

// Seconds renders a duration in seconds with a unit (µs, ms, s, min).
func Seconds(v float64) string {
	a := math.Abs(v)
	switch {
	case v == 0:
		return "0"
	case a < 1e-3:
		return sig(v*1e6) + "µs"
	case a < 1:
		return sig(v*1e3) + "ms"
	case a < 120:
		return sig(v) + "s"
	default:
		return sig(v/60) + "min"
	}
}

// Bytes renders a byte count in decimal units (B, kB, MB, GB).
func Bytes(v float64) string {
	a := math.Abs(v)
	switch {
	case v == 0:
		return "0"
	case a < 1e3:
		return sig(v) + "B"
	case a < 1e6:
		return sig(v/1e3) + "kB"
	case a < 1e9:
		return sig(v/1e6) + "MB"
	default:
		return sig(v/1e9) + "GB"
	}
}

// Times renders a ratio ("2.5x").
func Times(v float64) string { return sig(v) + "x" }

// Percent renders a fraction as a percentage.
func Percent(v float64) string { return sig(v*100) + "%" }

// sig rounds to 3 significant digits (never dropping integer digits) and drops
// trailing zeros.
func sig(v float64) string {
	if v == 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return fmt.Sprint(v)
	}
	d := max(3-int(math.Floor(math.Log10(math.Abs(v))))-1, 0)
	p := math.Pow(10, float64(d))
	r := math.Round(v*p) / p
	if d <= 0 {
		return fmt.Sprintf("%.0f", r)
	}
	s := fmt.Sprintf("%.*f", d, r)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}
