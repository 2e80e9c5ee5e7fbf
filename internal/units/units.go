package units

import (
	"fmt"
	"strconv"
	"strings"
)

var suffixes = []struct {
	s string
	m float64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
	{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"t", 1 << 40}, {"b", 1},
}

// ParseBytes parses a size: a number with an optional suffix (K, M, G, T = powers of
// 1024, KB.. = powers of 1000, KiB.. = powers of 1024, B).
func ParseBytes(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	mult := 1.0
	for _, x := range suffixes {
		if strings.HasSuffix(t, x.s) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, x.s)), x.m
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("size %q: want a number with an optional unit such as 512KiB or 10GiB", s)
	}
	return int64(v * mult), nil
}

// Bytes formats n with a binary unit, e.g. 1.5 GiB.
func Bytes(n int64) string {
	const unit = 1024
	if n < unit && n > -unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit || m <= -unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
