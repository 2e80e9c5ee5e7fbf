package analysis

import (
	"math"
	"sort"
)

// Start is one cold start-up pair of a workload under Slacker: a first container on
// a cold node, then a second one of the same image on the same node.
type Start struct {
	Run int `json:"run"`
	// Seconds is the first container's time until ready; ReadBytes the distinct
	// bytes of the image it read (4 KiB blocks, each counted once), RawReadBytes
	// every base read (a block read twice counts twice), FetchedBytes what the node
	// fetched from the store for it, WrittenBytes what it wrote.
	Seconds      float64 `json:"s"`
	ReadBytes    int64   `json:"read_bytes"`
	RawReadBytes int64   `json:"raw_read_bytes"`
	FetchedBytes int64   `json:"fetched_bytes"`
	WrittenBytes int64   `json:"written_bytes"`
	// The second container: its time until ready, distinct bytes read, of which
	// HitBytes were also read by the first (a cache the first run filled would
	// serve them) and MissBytes were not, and bytes written.
	Seconds2      float64 `json:"s2"`
	ReadBytes2    int64   `json:"read_bytes2"`
	HitBytes      int64   `json:"hit_bytes"`
	MissBytes     int64   `json:"miss_bytes"`
	WrittenBytes2 int64   `json:"written_bytes2"`
	// Truncated is set when a container read so scattered a set of blocks that the
	// volume stopped recording them (the byte counts are then lower bounds).
	Truncated bool   `json:"truncated,omitempty"`
	Error     string `json:"error,omitempty"`
}

// Runs is a set of blocks as sorted, disjoint half-open runs [start, end), as
// volumes report the base blocks they read.
type Runs [][2]int64

// Normalize sorts and merges overlapping or adjacent runs and drops empty ones.
func (rs Runs) Normalize() Runs {
	s := make(Runs, 0, len(rs))
	for _, r := range rs {
		if r[1] > r[0] {
			s = append(s, r)
		}
	}
	sort.Slice(s, func(i, j int) bool { return s[i][0] < s[j][0] })
	out := s[:0]
	for _, r := range s {
		if n := len(out); n > 0 && r[0] <= out[n-1][1] {
			out[n-1][1] = max(out[n-1][1], r[1])
			continue
		}
		out = append(out, r)
	}
	return out
}

// Blocks is the number of blocks in the set (runs must be normalized).
func (rs Runs) Blocks() int64 {
	var n int64
	for _, r := range rs {
		n += r[1] - r[0]
	}
	return n
}

// Intersect is the number of blocks in both sets (both normalized).
func (rs Runs) Intersect(other Runs) int64 {
	var n int64
	i, j := 0, 0
	for i < len(rs) && j < len(other) {
		lo, hi := max(rs[i][0], other[j][0]), min(rs[i][1], other[j][1])
		if hi > lo {
			n += hi - lo
		}
		if rs[i][1] < other[j][1] {
			i++
		} else {
			j++
		}
	}
	return n
}

func nan() float64 { return math.NaN() }
