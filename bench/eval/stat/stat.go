package stat

import (
	"math"
	"slices"
	"sort"
)

// Quantile returns the q-quantile (0 ≤ q ≤ 1) of v, interpolating linearly between
// order statistics (Hyndman and Fan's type 7, the default of R and NumPy); NaN for
// no values. NaNs in v are ignored.
func Quantile(v []float64, q float64) float64 {
	s := clean(v)
	if len(s) == 0 || math.IsNaN(q) {
		return math.NaN()
	}
	sort.Float64s(s)
	q = min(max(q, 0), 1)
	h := q * float64(len(s)-1)
	lo := int(math.Floor(h))
	hi := min(lo+1, len(s)-1)
	return s[lo] + (h-float64(lo))*(s[hi]-s[lo])
}

// clean returns a copy of v without NaNs.
func clean(v []float64) []float64 {
	out := make([]float64, 0, len(v))
	for _, x := range v {
		if !math.IsNaN(x) {
			out = append(out, x)
		}
	}
	return out
}

// Median is Quantile(v, 0.5).
func Median(v []float64) float64 { return Quantile(v, 0.5) }

// Mean is the arithmetic mean of v without NaNs (NaN for none).
func Mean(v []float64) float64 {
	s := clean(v)
	if len(s) == 0 {
		return math.NaN()
	}
	t := 0.0
	for _, x := range s {
		t += x
	}
	return t / float64(len(s))
}

// Sum adds v, NaNs ignored.
func Sum(v []float64) float64 {
	t := 0.0
	for _, x := range v {
		if !math.IsNaN(x) {
			t += x
		}
	}
	return t
}

// Ratio is a / b, NaN when b is zero or either is NaN.
func Ratio(a, b float64) float64 {
	if b == 0 || math.IsNaN(a) || math.IsNaN(b) {
		return math.NaN()
	}
	return a / b
}

// CDF returns v sorted (NaNs dropped) and, for each value, the fraction of values at
// or below it, (i+1)/n: the steps of an empirical CDF.
func CDF(v []float64) (xs, ps []float64) {
	xs = clean(v)
	sort.Float64s(xs)
	ps = make([]float64, len(xs))
	for i := range xs {
		ps[i] = float64(i+1) / float64(len(xs))
	}
	return xs, ps
}

// Summary describes samples of one measurement.
type Summary struct {
	N      int     `json:"n"`
	Min    float64 `json:"min"`
	P25    float64 `json:"p25"`
	Median float64 `json:"median"`
	P75    float64 `json:"p75"`
	Max    float64 `json:"max"`
	Mean   float64 `json:"mean"`
}

// NoisyIQR is the relative spread (interquartile range over median) above which a
// Summary is Noisy.
const NoisyIQR = 0.25

// Summarize summarizes v (NaNs dropped).
func Summarize(v []float64) Summary {
	s := clean(v)
	if len(s) == 0 {
		nan := math.NaN()
		return Summary{Min: nan, P25: nan, Median: nan, P75: nan, Max: nan, Mean: nan}
	}
	return Summary{N: len(s), Min: slices.Min(s), P25: Quantile(s, 0.25), Median: Quantile(s, 0.5),
		P75: Quantile(s, 0.75), Max: slices.Max(s), Mean: Mean(s)}
}

// Spread is the interquartile range relative to the median (NaN for a zero median).
func (s Summary) Spread() float64 { return Ratio(s.P75-s.P25, math.Abs(s.Median)) }

// Noisy reports whether the samples are spread enough (Spread > NoisyIQR) that the
// median should be quoted with care.
func (s Summary) Noisy() bool { return s.N >= 3 && s.Spread() > NoisyIQR }

// Geomean is the geometric mean of the positive values of v (NaN for none): the mean
// of ratios.
func Geomean(v []float64) float64 {
	t, n := 0.0, 0
	for _, x := range v {
		if x > 0 && !math.IsInf(x, 0) {
			t += math.Log(x)
			n++
		}
	}
	if n == 0 {
		return math.NaN()
	}
	return math.Exp(t / float64(n))
}
