package docsgen

import (
	"math"
	"strings"
	"testing"
)

func TestFormats(t *testing.T) {
	for _, tt := range []struct {
		format string
		v      float64
		want   string
	}{
		{"x0", 359.6, "360x"},
		{"x1", 15.66, "15.7x"},
		{"x2", 0.4983, "0.50x"},
		{"xr", 5.2549, "5.25x"},
		{"xr", 12.09, "12.1x"},
		{"f2", 1.3, "1.30"},
		{"pct0", 0.453, "45%"},
		{"pct1", 0.0468, "4.7%"},
		{"ms0", 0.0367, "37 ms"},
		{"ms3", 0.0000731, "0.073 ms"},
		{"s2", 2.2949, "2.29 s"},
		{"us0", 0.0000694, "69 µs"},
		{"min1", 857, "14.3 min"},
		{"minsec", 211.02, "3 min 31 s"},
		{"dur", 575.96, "9m36s"},
		{"secs", 0.00007, "0.07 ms"},
		{"secs", 0.163, "163 ms"},
		{"secs", 2.57, "2.57 s"},
		{"secs", 0, "-"},
		{"hsecs", 0.042, "42 ms"},
		{"hsecs", 7.781, "7.78 s"},
		{"hsecs", 0.0042, "4.2 ms"},
		{"hsecs", 123.4, "123 s"},
		{"MB1", 5.7e6, "5.7 MB"},
		{"GB2", 2.031e9, "2.03 GB"},
		{"MiB1", 8.2 * (1 << 20), "8.2 MiB"},
		{"GiB1", 38.23 * (1 << 30), "38.2 GiB"},
		{"hbytes", 8.2 * (1 << 20), "8.2 MiB"},
		{"n", 319661, "319,661"},
		{"n", 88, "88"},
		{"n", 1234567, "1,234,567"},
		{"d", 159.6, "160"},
		{"k0", 18004, "18k"},
		{"k1", 4912, "4.9k"},
		{"k3", 2706.2, "2706"},
		{"k3", 82123, "82.1k"},
		{"k3", 148400, "148k"},
		{"MiB1_", 104.4 * (1 << 20), "104.4"},
		{"x1_", 2.04, "2.0"},
	} {
		got, err := formatValues(tt.format, []float64{tt.v})
		if err != nil || got != tt.want {
			t.Errorf("%s(%v) = %q, %v; want %q", tt.format, tt.v, got, err, tt.want)
		}
	}
}

// Several values render as their range, the unit once.
func TestFormatRanges(t *testing.T) {
	for _, tt := range []struct {
		format string
		vs     []float64
		want   string
	}{
		{"x1", []float64{0.72, 0.6}, "0.6–0.7x"},
		{"MB0", []float64{156.1e6, 165.6e6, 160e6}, "156–166 MB"},
		{"ms0", []float64{0.0553, 0.0694}, "55–69 ms"},
		{"s1", []float64{0.44, 0.38}, "0.4 s"}, // alike once rendered: one value
		{"d", []float64{37, 38}, "37–38"},
		{"hbytes", []float64{6.4 * (1 << 20), 8.2 * (1 << 20)}, "6.4–8.2 MiB"},
		{"secs", []float64{0.163, 2.57}, "163 ms–2.57 s"}, // different units: both kept
	} {
		got, err := formatValues(tt.format, tt.vs)
		if err != nil || got != tt.want {
			t.Errorf("%s(%v) = %q, %v; want %q", tt.format, tt.vs, got, err, tt.want)
		}
	}
}

func TestFormatErrors(t *testing.T) {
	for _, tt := range []struct {
		format string
		vs     []float64
		want   string
	}{
		{"x9", []float64{1}, "unknown format"},
		{"x1", nil, "no values"},
		{"x1", []float64{math.NaN()}, "no value"},
		{"s1", []float64{math.Inf(1)}, "no value"},
	} {
		if _, err := formatValues(tt.format, tt.vs); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s(%v): %v, want an error with %q", tt.format, tt.vs, err, tt.want)
		}
	}
}
