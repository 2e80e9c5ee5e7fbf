package stat

import (
	"math"
	"testing"
)

func near(a, b float64) bool {
	if math.IsNaN(a) || math.IsNaN(b) {
		return math.IsNaN(a) && math.IsNaN(b)
	}
	return math.Abs(a-b) < 1e-9
}

func TestQuantile(t *testing.T) {
	nan := math.NaN()
	for _, c := range []struct {
		v    []float64
		q    float64
		want float64
	}{
		{nil, 0.5, nan},
		{[]float64{3}, 0.9, 3},
		{[]float64{3, 1, 2}, 0.5, 2},
		{[]float64{4, 1, 3, 2}, 0.5, 2.5},
		{[]float64{1, 2, 3, 4, 5}, 0.25, 2},
		{[]float64{1, 2, 3, 4}, 0.9, 3.7},
		{[]float64{1, 2, 3, 4}, 0, 1},
		{[]float64{1, 2, 3, 4}, 1, 4},
		{[]float64{1, nan, 3}, 0.5, 2},
		{[]float64{1, 2}, 2, 2},
	} {
		if got := Quantile(c.v, c.q); !near(got, c.want) {
			t.Errorf("Quantile(%v, %v) = %v, want %v", c.v, c.q, got, c.want)
		}
	}
}

func TestSummaryAndNoise(t *testing.T) {
	s := Summarize([]float64{10, 10.5, 9.5, 10.2, 9.8})
	if s.N != 5 || s.Min != 9.5 || s.Max != 10.5 || !near(s.Median, 10) || s.Noisy() {
		t.Fatalf("tight samples: %+v noisy=%v", s, s.Noisy())
	}
	s = Summarize([]float64{1, 2, 5, 9})
	if !s.Noisy() {
		t.Fatalf("spread samples not noisy: %+v spread %v", s, s.Spread())
	}
	if Summarize([]float64{1, 5}).Noisy() {
		t.Fatal("two samples cannot be called noisy")
	}
	if e := Summarize(nil); e.N != 0 || !math.IsNaN(e.Median) {
		t.Fatalf("empty summary: %+v", e)
	}
}

func TestRatioMeanSumGeomean(t *testing.T) {
	if !math.IsNaN(Ratio(1, 0)) || Ratio(6, 3) != 2 || !math.IsNaN(Ratio(math.NaN(), 1)) {
		t.Fatal("Ratio")
	}
	if Mean([]float64{1, 2, math.NaN(), 3}) != 2 || !math.IsNaN(Mean(nil)) {
		t.Fatal("Mean")
	}
	if Sum([]float64{1, math.NaN(), 2}) != 3 {
		t.Fatal("Sum")
	}
	if g := Geomean([]float64{2, 8, 0, -1}); !near(g, 4) {
		t.Fatalf("Geomean = %v", g)
	}
}

func TestCDF(t *testing.T) {
	xs, ps := CDF([]float64{3, 1, math.NaN(), 2, 2})
	wantX := []float64{1, 2, 2, 3}
	wantP := []float64{0.25, 0.5, 0.75, 1}
	for i := range wantX {
		if xs[i] != wantX[i] || ps[i] != wantP[i] {
			t.Fatalf("CDF = %v %v", xs, ps)
		}
	}
}
