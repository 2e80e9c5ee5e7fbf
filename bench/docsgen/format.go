package docsgen

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/slacker-dev/slacker/bench/corpus"
)

// A format turns a number into the text the docs show. Its name is the last
// argument of most figures; the name says the unit and the decimals:
//
//	x0 x1 x2 x3     a ratio: 15.7x
//	xr              a ratio as HelloBench's report writes it: 2 decimals under 10 (5.25x), 1 above (12.1x)
//	f0 f1 f2 f3     a plain number: 0.84
//	pct0 pct1 pct2  a fraction as a percentage: 4.7%
//	ms0 ms1 ms2 ms3 seconds in milliseconds: 37 ms
//	s0 s1 s2 s3     seconds: 2.29 s
//	us0             seconds in microseconds: 70 µs
//	min1            seconds in minutes: 14.3 min
//	minsec          seconds in minutes and seconds: 3 min 31 s
//	dur             seconds as a Go duration to the second: 9m36s
//	secs            seconds as the core benchmark writes them: 0.07 ms, 37 ms, 2.29 s
//	hsecs           seconds as HelloBench's report writes them: 42 ms, 7.78 s
//	kB0 MB0 MB1 GB0 GB1 GB2   bytes, decimal units: 5.7 MB
//	KiB0 MiB0 MiB1 GiB1 GiB2   bytes, binary units: 8.2 MiB
//	hbytes          bytes as the corpus builder writes them: 8.2 MiB, 6.4 MiB
//	n               a whole number with thousands separated: 23,895
//	d               a whole number: 160
//	k0 k1           thousands: 18k, 4.9k
//	k3              IOPS as the evaluation writes them: whole under 10,000 (2706), else
//	                thousands, one decimal under 100k (82.1k) and none above (128k)
//
// A format name ending in _ renders the number without its unit (MiB1_: 104.4),
// for a table whose header names the unit.
type format func(float64) string

func fixed(decimals int, scale float64, suffix string) format {
	return func(v float64) string { return strconv.FormatFloat(v*scale, 'f', decimals, 64) + suffix }
}

var formats = map[string]format{
	"x0": fixed(0, 1, "x"), "x1": fixed(1, 1, "x"), "x2": fixed(2, 1, "x"), "x3": fixed(3, 1, "x"),
	"xr": func(v float64) string {
		if math.Abs(v) < 10 {
			return fixed(2, 1, "x")(v)
		}
		return fixed(1, 1, "x")(v)
	},
	"f0": fixed(0, 1, ""), "f1": fixed(1, 1, ""), "f2": fixed(2, 1, ""), "f3": fixed(3, 1, ""),
	"pct0": fixed(0, 100, "%"), "pct1": fixed(1, 100, "%"), "pct2": fixed(2, 100, "%"),
	"ms0": fixed(0, 1e3, " ms"), "ms1": fixed(1, 1e3, " ms"), "ms2": fixed(2, 1e3, " ms"), "ms3": fixed(3, 1e3, " ms"),
	"s0": fixed(0, 1, " s"), "s1": fixed(1, 1, " s"), "s2": fixed(2, 1, " s"), "s3": fixed(3, 1, " s"),
	"us0":  fixed(0, 1e6, " µs"),
	"min1": fixed(1, 1.0/60, " min"),
	"dur":  func(v float64) string { return (time.Duration(math.Round(v)) * time.Second).String() },
	"minsec": func(v float64) string {
		s := int64(math.Round(v))
		return fmt.Sprintf("%d min %d s", s/60, s%60)
	},
	"secs": func(v float64) string {
		switch {
		case v == 0:
			return "-"
		case v < 0.01:
			return fixed(2, 1e3, " ms")(v)
		case v < 1:
			return fixed(0, 1e3, " ms")(v)
		}
		return fixed(2, 1, " s")(v)
	},
	"hsecs": func(v float64) string {
		switch {
		case v < 0.01:
			return fixed(1, 1e3, " ms")(v)
		case v < 1:
			return fixed(0, 1e3, " ms")(v)
		case v < 100:
			return fixed(2, 1, " s")(v)
		}
		return fixed(0, 1, " s")(v)
	},
	"kB0": fixed(0, 1e-3, " kB"), "MB0": fixed(0, 1e-6, " MB"), "MB1": fixed(1, 1e-6, " MB"),
	"GB0": fixed(0, 1e-9, " GB"), "GB1": fixed(1, 1e-9, " GB"), "GB2": fixed(2, 1e-9, " GB"),
	"KiB0": fixed(0, 1.0/(1<<10), " KiB"), "MiB0": fixed(0, 1.0/(1<<20), " MiB"), "MiB1": fixed(1, 1.0/(1<<20), " MiB"),
	"GiB1": fixed(1, 1.0/(1<<30), " GiB"), "GiB2": fixed(2, 1.0/(1<<30), " GiB"),
	"hbytes": func(v float64) string { return corpus.HumanBytes(int64(v)) },
	"n":      thousands,
	"d":      func(v float64) string { return strconv.FormatFloat(math.Round(v), 'f', 0, 64) },
	"k3": func(v float64) string {
		if math.Abs(v) < 1e4 {
			return strconv.FormatFloat(math.Round(v), 'f', 0, 64)
		}
		k := v / 1e3
		switch {
		case math.Abs(k) < 100:
			return strconv.FormatFloat(k, 'f', 1, 64) + "k"
		}
		return strconv.FormatFloat(k, 'f', 0, 64) + "k"
	},
	"k0": fixed(0, 1e-3, "k"), "k1": fixed(1, 1e-3, "k"),
}

func thousands(v float64) string {
	s := strconv.FormatFloat(math.Round(math.Abs(v)), 'f', 0, 64)
	var b strings.Builder
	if v < 0 {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// formatValues renders one value, or several as their range: "0.6–0.7x",
// "156–166 MB" (the unit once, at the end), or one value when they all render
// alike.
func formatValues(name string, vs []float64) (string, error) {
	bare := strings.HasSuffix(name, "_")
	f, ok := formats[strings.TrimSuffix(name, "_")]
	if !ok {
		return "", fmt.Errorf("unknown format %q", name)
	}
	if bare {
		unitful := f
		f = func(v float64) string { s := unitful(v); return strings.TrimSuffix(s, unit(s)) }
	}
	if len(vs) == 0 {
		return "", fmt.Errorf("no values to format")
	}
	for _, v := range vs {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return "", fmt.Errorf("no value (%v)", v)
		}
	}
	lo, hi := f(slices.Min(vs)), f(slices.Max(vs))
	if lo == hi {
		return lo, nil
	}
	if u := unit(lo); u != "" && u == unit(hi) {
		lo = strings.TrimSuffix(lo, u)
	}
	return lo + "–" + hi, nil
}

// unit is what follows a rendered number: " ms", "x", "%".
func unit(s string) string {
	i := strings.LastIndexAny(s, "0123456789")
	return s[i+1:]
}
