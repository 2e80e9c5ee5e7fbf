package e2ebench

import "slices"

// Median is the median of v: the middle value, or the mean of the two middle
// values of an even count; 0 for none (as the benchmarks' tables print it).
func Median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
