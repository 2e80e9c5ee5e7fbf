package report

import (
	"fmt"

	"math"
	"strings"
)

// Drawing of the figures: a small SVG writer for line charts (CDFs, with vertical
// markers) and bar charts (grouped and stacked), with linear or log axes.

const fontCSS = `font-family="DejaVu Sans, Helvetica, Arial, sans-serif"`

// palette colours systems and measures; the first two are the baseline and Slacker.
var palette = []string{"#d95f02", "#1b9e77", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#666666"}

type svgb struct{ strings.Builder }

func (b *svgb) f(format string, args ...any) { fmt.Fprintf(&b.Builder, format, args...) }

// axis maps data values to pixels.
type axis struct {
	lo, hi   float64 // data range
	p0, p1   float64 // pixel range
	log      bool
	format   func(float64) string
	ticks    []float64
	minorLog bool
}

func (a *axis) px(v float64) float64 {
	lo, hi := a.lo, a.hi
	if a.log {
		v, lo, hi = math.Log10(math.Max(v, 1e-300)), math.Log10(lo), math.Log10(hi)
	}
	if hi == lo {
		return a.p0
	}
	t := (v - lo) / (hi - lo)
	return a.p0 + t*(a.p1-a.p0)
}

// setRange picks the range and ticks for values in [lo, hi].
func (a *axis) setRange(lo, hi float64) {
	if math.IsNaN(lo) || math.IsNaN(hi) || math.IsInf(lo, 0) || math.IsInf(hi, 0) {
		lo, hi = 0, 1
	}
	if a.log {
		lo, hi = math.Max(lo, 1e-9), math.Max(hi, 1e-9)
		l0, l1 := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
		if l1 <= l0 {
			l1 = l0 + 1
		}
		a.lo, a.hi = math.Pow(10, l0), math.Pow(10, l1)
		a.ticks = nil
		for e := l0; e <= l1; e++ {
			a.ticks = append(a.ticks, math.Pow(10, e))
		}
		return
	}
	if hi <= lo {
		hi = lo + 1
	}
	step := niceStep((hi - lo) / 5)
	a.lo = math.Floor(lo/step) * step
	a.hi = math.Ceil(hi/step) * step
	a.ticks = nil
	for v := a.lo; v <= a.hi+step/2; v += step {
		a.ticks = append(a.ticks, v)
	}
}

func niceStep(x float64) float64 {
	if x <= 0 {
		return 1
	}
	e := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*e >= x {
			return m * e
		}
	}
	return 10 * e
}

// Formats of axis labels.
func fmtSeconds(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v < 1e-3:
		return fmt.Sprintf("%gµs", roundSig(v*1e6))
	case v < 1:
		return fmt.Sprintf("%gms", roundSig(v*1e3))
	case v < 120:
		return fmt.Sprintf("%gs", roundSig(v))
	default:
		return fmt.Sprintf("%gmin", roundSig(v/60))
	}
}

func fmtBytes(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v < 1e3:
		return fmt.Sprintf("%gB", roundSig(v))
	case v < 1e6:
		return fmt.Sprintf("%gkB", roundSig(v/1e3))
	case v < 1e9:
		return fmt.Sprintf("%gMB", roundSig(v/1e6))
	default:
		return fmt.Sprintf("%gGB", roundSig(v/1e9))
	}
}

func fmtTimes(v float64) string { return fmt.Sprintf("%gx", roundSig(v)) }

func fmtFraction(v float64) string { return fmt.Sprintf("%g", roundSig(v)) }

func fmtPercent(v float64) string { return fmt.Sprintf("%g%%", roundSig(v*100)) }

func roundSig(v float64) float64 {
	if v == 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return v
	}
	p := math.Pow(10, 2-math.Floor(math.Log10(math.Abs(v))))
	return math.Round(v*p) / p
}

// lineSeries is one line of a chart.
type lineSeries struct {
	Name  string
	Color string
	Dash  string
	X, Y  []float64
	Step  bool // an empirical CDF: horizontal then vertical steps
}

// vmark is a vertical marker with a label.
type vmark struct {
	X     float64
	Label string
	Color string
}

// lineChart draws lines (CDFs) on linear or log x.
type lineChart struct {
	Title, XLabel, YLabel string
	W, H                  float64
	XLog                  bool
	XFormat, YFormat      func(float64) string
	YMin, YMax            float64 // default 0..1
	Series                []lineSeries
	Marks                 []vmark
	// XMin, XMax override the x range when set.
	XMin, XMax float64
}

func (c *lineChart) svg() string {
	if c.W == 0 {
		c.W, c.H = 560, 340
	}
	if c.YMax == 0 {
		c.YMax = 1
	}
	if c.XFormat == nil {
		c.XFormat = fmtFraction
	}
	if c.YFormat == nil {
		c.YFormat = fmtFraction
	}
	left, right, top, bottom := 58.0, 18.0, 34.0, 48.0
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range c.Series {
		for _, x := range s.X {
			if math.IsNaN(x) || (c.XLog && x <= 0) {
				continue
			}
			lo, hi = math.Min(lo, x), math.Max(hi, x)
		}
	}
	for _, m := range c.Marks {
		if !math.IsNaN(m.X) && (!c.XLog || m.X > 0) {
			lo, hi = math.Min(lo, m.X), math.Max(hi, m.X)
		}
	}
	if c.XMin != 0 {
		lo = c.XMin
	}
	if c.XMax != 0 {
		hi = c.XMax
	}
	if !c.XLog && lo > 0 {
		lo = 0
	}
	xa := &axis{p0: left, p1: c.W - right, log: c.XLog, format: c.XFormat}
	xa.setRange(lo, hi)
	ya := &axis{p0: c.H - bottom, p1: top, format: c.YFormat}
	ya.setRange(c.YMin, c.YMax)
	var b svgb
	b.f(`<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" viewBox="0 0 %g %g" %s font-size="11">`, c.W, c.H, c.W, c.H, fontCSS)
	b.f(`<rect width="100%%" height="100%%" fill="white"/>`)
	b.f(`<text x="%g" y="18" font-size="13" font-weight="bold">%s</text>`, left, esc(c.Title))
	drawGrid(&b, xa, ya)
	b.f(`<text x="%g" y="%g" text-anchor="middle">%s</text>`, (xa.p0+xa.p1)/2, c.H-10, esc(c.XLabel))
	b.f(`<text transform="translate(14 %g) rotate(-90)" text-anchor="middle">%s</text>`, (ya.p0+ya.p1)/2, esc(c.YLabel))
	b.f(`<g clip-path="none">`)
	for _, s := range c.Series {
		var pts []string
		prevY := ya.lo
		for i := range s.X {
			if math.IsNaN(s.X[i]) || (c.XLog && s.X[i] <= 0) {
				continue
			}
			x := xa.px(s.X[i])
			if s.Step {
				if len(pts) == 0 {
					pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, ya.px(0)))
				} else {
					pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, ya.px(prevY)))
				}
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, ya.px(s.Y[i])))
			prevY = s.Y[i]
		}
		if len(pts) == 0 {
			continue
		}
		dash := ""
		if s.Dash != "" {
			dash = fmt.Sprintf(` stroke-dasharray="%s"`, s.Dash)
		}
		b.f(`<polyline fill="none" stroke="%s" stroke-width="2"%s points="%s"/>`, s.Color, dash, strings.Join(pts, " "))
	}
	for i, m := range c.Marks {
		if math.IsNaN(m.X) || (c.XLog && m.X <= 0) {
			continue
		}
		x := xa.px(m.X)
		b.f(`<line x1="%.1f" y1="%g" x2="%.1f" y2="%g" stroke="%s" stroke-dasharray="4 3"/>`, x, ya.p0, x, ya.p1, m.Color)
		anchor, dx := "start", 3.0
		if x > (xa.p0+xa.p1)/2 {
			anchor, dx = "end", -3
		}
		b.f(`<text x="%.1f" y="%g" fill="%s" text-anchor="%s">%s</text>`, x+dx, ya.p1+12+float64(i%4)*12, m.Color, anchor, esc(m.Label))
	}
	b.f(`</g>`)
	drawLegend(&b, c.W-right, c.H-bottom-8, c.Series)
	b.f(`</svg>`)
	return b.String()
}

func drawGrid(b *svgb, xa, ya *axis) {
	b.f(`<g stroke="#ddd">`)
	for _, t := range xa.ticks {
		b.f(`<line x1="%.1f" y1="%g" x2="%.1f" y2="%g"/>`, xa.px(t), ya.p0, xa.px(t), ya.p1)
	}
	for _, t := range ya.ticks {
		b.f(`<line x1="%g" y1="%.1f" x2="%g" y2="%.1f"/>`, xa.p0, ya.px(t), xa.p1, ya.px(t))
	}
	b.f(`</g>`)
	if xa.log {
		b.f(`<g stroke="#f0f0f0">`)
		for _, t := range xa.ticks {
			for m := 2.0; m < 10; m++ {
				if v := t * m; v < xa.hi {
					b.f(`<line x1="%.1f" y1="%g" x2="%.1f" y2="%g"/>`, xa.px(v), ya.p0, xa.px(v), ya.p1)
				}
			}
		}
		b.f(`</g>`)
	}
	b.f(`<g stroke="#333"><line x1="%g" y1="%g" x2="%g" y2="%g"/><line x1="%g" y1="%g" x2="%g" y2="%g"/></g>`,
		xa.p0, ya.p0, xa.p1, ya.p0, xa.p0, ya.p0, xa.p0, ya.p1)
	for _, t := range xa.ticks {
		b.f(`<text x="%.1f" y="%g" text-anchor="middle">%s</text>`, xa.px(t), ya.p0+14, esc(xa.format(t)))
	}
	for _, t := range ya.ticks {
		b.f(`<text x="%g" y="%.1f" text-anchor="end">%s</text>`, xa.p0-4, ya.px(t)+4, esc(ya.format(t)))
	}
}

func drawLegend(b *svgb, right, bottom float64, series []lineSeries) {
	var named []lineSeries
	for _, s := range series {
		if s.Name != "" {
			named = append(named, s)
		}
	}
	y := bottom - float64(len(named)-1)*15
	for _, s := range named {
		w := 7*float64(len(s.Name)) + 30
		dash := ""
		if s.Dash != "" {
			dash = fmt.Sprintf(` stroke-dasharray="%s"`, s.Dash)
		}
		b.f(`<rect x="%.1f" y="%.1f" width="%.1f" height="14" fill="white" fill-opacity="0.85"/>`, right-w-4, y-10, w+4)
		b.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"%s/>`, right-w, y-3, right-w+20, y-3, s.Color, dash)
		b.f(`<text x="%.1f" y="%.1f">%s</text>`, right-w+25, y+1, esc(s.Name))
		y += 15
	}
}

// barChart draws groups of bars, each bar a stack of segments.
type barChart struct {
	Title, YLabel string
	W, H          float64
	YLog          bool
	YFormat       func(float64) string
	Groups        []string      // x categories
	Bars          []string      // bars per group (a short letter is drawn under each)
	BarLetters    []string      // under each bar; default the first letter of Bars
	Stacks        []string      // segment names (legend)
	Colors        []string      // per stack, or per bar when there is one stack
	Values        [][][]float64 // [group][bar][stack]
	Labels        [][]string    // [group][bar], drawn above the bar
}

func (c *barChart) svg() string {
	if c.W == 0 {
		c.W, c.H = 760, 360
	}
	if c.YFormat == nil {
		c.YFormat = fmtFraction
	}
	left, right, top, bottom := 62.0, 14.0, 34.0, 62.0
	hi, lo := 0.0, math.Inf(1)
	for _, g := range c.Values {
		for _, bar := range g {
			s := 0.0
			for _, v := range bar {
				if !math.IsNaN(v) {
					s += v
					if v > 0 {
						lo = math.Min(lo, v)
					}
				}
			}
			hi = math.Max(hi, s)
		}
	}
	ya := &axis{p0: c.H - bottom, p1: top, log: c.YLog, format: c.YFormat}
	if c.YLog {
		ya.setRange(lo, hi*1.2)
	} else {
		ya.setRange(0, hi*1.08)
	}
	xa := &axis{p0: left, p1: c.W - right, format: func(float64) string { return "" }}
	var b svgb
	b.f(`<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" viewBox="0 0 %g %g" %s font-size="11">`, c.W, c.H, c.W, c.H, fontCSS)
	b.f(`<rect width="100%%" height="100%%" fill="white"/>`)
	b.f(`<text x="%g" y="18" font-size="13" font-weight="bold">%s</text>`, left, esc(c.Title))
	b.f(`<g stroke="#ddd">`)
	for _, t := range ya.ticks {
		b.f(`<line x1="%g" y1="%.1f" x2="%g" y2="%.1f"/>`, xa.p0, ya.px(t), xa.p1, ya.px(t))
	}
	b.f(`</g>`)
	for _, t := range ya.ticks {
		b.f(`<text x="%g" y="%.1f" text-anchor="end">%s</text>`, xa.p0-4, ya.px(t)+4, esc(ya.format(t)))
	}
	b.f(`<text transform="translate(14 %g) rotate(-90)" text-anchor="middle">%s</text>`, (ya.p0+ya.p1)/2, esc(c.YLabel))
	gw := (xa.p1 - xa.p0) / float64(max(len(c.Groups), 1))
	bw := math.Min(28, gw*0.8/float64(max(len(c.Bars), 1)))
	base := ya.px(ya.lo)
	for gi, g := range c.Groups {
		gx := xa.p0 + gw*float64(gi) + (gw-bw*float64(len(c.Bars)))/2
		for bi := range c.Bars {
			x := gx + bw*float64(bi)
			acc := 0.0
			if c.YLog {
				acc = ya.lo
			}
			for si := range c.Stacks {
				v := c.Values[gi][bi][si]
				if math.IsNaN(v) || v <= 0 {
					continue
				}
				y0 := ya.px(acc)
				if c.YLog && acc == ya.lo {
					y0 = base
					acc = 0
				}
				acc += v
				y1 := ya.px(acc)
				color := c.Colors[si%len(c.Colors)]
				if len(c.Stacks) == 1 {
					color = c.Colors[bi%len(c.Colors)]
				}
				b.f(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" stroke="white" stroke-width="0.5"><title>%s %s %s: %s</title></rect>`,
					x, y1, bw-2, math.Max(y0-y1, 0.5), color, esc(g), esc(c.Bars[bi]), esc(c.Stacks[si]), esc(c.YFormat(v)))
			}
			if c.Labels != nil && c.Labels[gi][bi] != "" && acc > 0 {
				b.f(`<text x="%.1f" y="%.1f" text-anchor="middle" font-size="9">%s</text>`, x+bw/2-1, ya.px(acc)-3, esc(c.Labels[gi][bi]))
			}
			letter := ""
			if c.BarLetters != nil {
				letter = c.BarLetters[bi]
			} else if c.Bars[bi] != "" {
				letter = strings.ToUpper(c.Bars[bi][:1])
			}
			b.f(`<text x="%.1f" y="%.1f" text-anchor="middle" font-size="9">%s</text>`, x+bw/2-1, base+11, esc(letter))
		}
		b.f(`<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`, xa.p0+gw*(float64(gi)+0.5), base+26, esc(g))
	}
	b.f(`<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="#333"/>`, xa.p0, base, xa.p1, base)
	// Legend: stacks, or bars when there is one stack.
	names, colors := c.Stacks, c.Colors
	if len(c.Stacks) == 1 {
		names = c.Bars
	}
	x := xa.p0
	for i, n := range names {
		b.f(`<rect x="%.1f" y="%g" width="10" height="10" fill="%s"/>`, x, c.H-16, colors[i%len(colors)])
		label := n
		if len(c.Stacks) > 1 || c.BarLetters == nil {
			label = n
		} else {
			label = c.BarLetters[i] + " = " + n
		}
		b.f(`<text x="%.1f" y="%g">%s</text>`, x+14, c.H-7, esc(label))
		x += 7*float64(len(label)) + 30
	}
	b.f(`</svg>`)
	return b.String()
}
