package plot

import (
	"encoding/xml"
	"io"
	"math"
	"strings"
	"testing"
)

// wellFormed parses svg as XML and counts elements by name.
func wellFormed(t *testing.T, svg string) map[string]int {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(svg))
	n := map[string]int{}
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return n
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, svg)
		}
		if se, ok := tok.(xml.StartElement); ok {
			n[se.Name.Local]++
		}
	}
}

func TestFormats(t *testing.T) {
	for _, c := range []struct {
		f    func(float64) string
		v    float64
		want string
	}{
		{Number, 0, "0"}, {Number, 1234, "1234"}, {Number, 12345, "12.3k"}, {Number, 2.5e6, "2.5M"}, {Number, 0.0123, "0.0123"},
		{Seconds, 0.00005, "50µs"}, {Seconds, 0.0617, "61.7ms"}, {Seconds, 1.5, "1.5s"}, {Seconds, 300, "5min"},
		{Bytes, 512, "512B"}, {Bytes, 27e6, "27MB"}, {Bytes, 3.86e9, "3.86GB"},
		{Times, 108.4, "108x"}, {Times, 2.345, "2.35x"}, {Percent, 0.064, "6.4%"},
	} {
		if got := c.f(c.v); got != c.want {
			t.Errorf("format(%v) = %q, want %q", c.v, got, c.want)
		}
	}
}

func TestScale(t *testing.T) {
	s := &scale{p0: 0, p1: 100}
	s.fit(Axis{Log: true}, 0.003, 42)
	if s.lo != 0.001 || s.hi != 100 || len(s.ticks) != 6 {
		t.Fatalf("log scale: lo %v hi %v ticks %v", s.lo, s.hi, s.ticks)
	}
	if got := s.px(1); math.Abs(got-60) > 1e-9 {
		t.Fatalf("px(1) = %v on a 1e-3..1e2 log scale over 100px", got)
	}
	s.fit(Axis{}, 0, 9.3)
	if s.lo != 0 || s.hi != 10 || s.ticks[1] != 2 {
		t.Fatalf("linear scale: %v..%v ticks %v", s.lo, s.hi, s.ticks)
	}
	s.fit(Axis{Lo: 0, Hi: 1}, 5, 50)
	if s.lo != 0 || s.hi != 1 {
		t.Fatalf("fixed range ignored: %v..%v", s.lo, s.hi)
	}
	s.fit(Axis{}, math.NaN(), math.Inf(1))
	if s.lo != 0 || s.hi != 1 {
		t.Fatalf("no data: %v..%v", s.lo, s.hi)
	}
}

func TestLineChart(t *testing.T) {
	ch := &LineChart{Title: "open latency <by> depth", X: Axis{Label: "depth"}, Y: Axis{Label: "latency", Log: true, Format: Seconds},
		Series: []Series{
			{Name: "overlayfs", Color: Baseline, X: []float64{1, 2, 3}, Y: []float64{1e-4, 2e-4, math.NaN()}, Points: true, Labels: []string{"a", "", "c"}},
			{Name: "slacker", X: []float64{1, 2, 3}, Y: []float64{5e-5, 0, 5e-5}, Step: true, Dash: true},
		},
		Marks: []Mark{{X: 2, Label: "median"}, {X: math.NaN()}}}
	svg := ch.SVG()
	n := wellFormed(t, svg)
	if n["polyline"] != 2 || n["circle"] != 2 {
		t.Fatalf("want 2 lines and 2 points (NaN and non-positive log values dropped), got %v", n)
	}
	if !strings.Contains(svg, "open latency &lt;by&gt; depth") {
		t.Fatal("title not escaped")
	}
}

func TestBarChart(t *testing.T) {
	cats := []string{"distro", "language", "database"}
	ch := &BarChart{Title: "sizes", Categories: cats, Y: Axis{Log: true, Format: Bytes}, RefLines: []float64{1},
		Series: []Series{
			{Name: "compressed", Y: []float64{50e6, 150e6, 100e6}, Labels: []string{"30x", "10x", "5x"}},
			{Name: "read", Y: []float64{2e6, 0, math.NaN()}},
		}}
	n := wellFormed(t, ch.SVG())
	if n["rect"] != 2+4 { // background + frame + 3 + 1 drawable bars
		t.Fatalf("grouped bars: %v", n)
	}
	st := &BarChart{Title: "stacked", Categories: cats, Stacked: true,
		Series: []Series{{Name: "hits", Y: []float64{1, 2, 3}}, {Name: "misses", Y: []float64{1, 1, 1}}}}
	if n := wellFormed(t, st.SVG()); n["rect"] != 2+6 {
		t.Fatalf("stacked bars: %v", n)
	}
	many := &BarChart{Title: "rotated", Categories: strings.Split("debian-standard,web-framework,prometheus,hello-world,c,d,e,f,g,h", ","), Series: []Series{{Y: make([]float64, 10)}}}
	if svg := many.SVG(); !strings.Contains(svg, "rotate(-45") {
		t.Fatal("many categories should rotate their labels")
	}
	empty := &BarChart{Title: "empty"}
	wellFormed(t, empty.SVG())
}

func TestShortLabelsStayLevel(t *testing.T) {
	ch := &BarChart{Title: "level", Categories: []string{"a", "b", "c"}, Series: []Series{{Y: []float64{1, 2, 3}}}}
	if strings.Contains(ch.SVG(), "rotate(-45") {
		t.Fatal("three short labels rotated")
	}
}
