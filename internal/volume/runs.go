package volume

import "github.com/google/btree"

// run is a half-open range of block numbers [start, end).
type run struct{ start, end int64 }

// runSet is a set of block numbers stored as maximal disjoint runs, so its memory is
// proportional to the number of runs written, not to the data. Not safe for
// concurrent use; Volume guards it.
type runSet struct {
	t      *btree.BTreeG[run]
	blocks int64
}

func newRunSet() *runSet {
	return &runSet{t: btree.NewG(32, func(a, b run) bool { return a.start < b.start })}
}

// add inserts [start, end), merging with overlapping and adjacent runs. It returns
// the number of blocks that were not in the set before.
func (s *runSet) add(start, end int64) int64 {
	if start >= end {
		return 0
	}
	merged := run{start, end}
	var drop []run
	// A run that starts before start and reaches it.
	s.t.DescendLessOrEqual(run{start: start}, func(r run) bool {
		if r.end >= start {
			drop = append(drop, r)
		}
		return false
	})
	s.t.AscendGreaterOrEqual(run{start: start + 1}, func(r run) bool {
		if r.start > end {
			return false
		}
		drop = append(drop, r)
		return true
	})
	var covered int64
	for _, r := range drop {
		s.t.Delete(r)
		lo, hi := max(r.start, start), min(r.end, end)
		if hi > lo {
			covered += hi - lo
		}
		merged.start = min(merged.start, r.start)
		merged.end = max(merged.end, r.end)
		s.blocks -= r.end - r.start
	}
	s.t.ReplaceOrInsert(merged)
	s.blocks += merged.end - merged.start
	return (end - start) - covered
}

// contains reports whether block b is in the set.
func (s *runSet) contains(b int64) bool {
	found := false
	s.t.DescendLessOrEqual(run{start: b}, func(r run) bool {
		found = b < r.end
		return false
	})
	return found
}

// touches reports whether a run of the set overlaps or adjoins [start, end), so that
// adding it would not make a new run.
func (s *runSet) touches(start, end int64) bool {
	found := false
	s.t.DescendLessOrEqual(run{start: end}, func(r run) bool {
		found = r.end >= start
		return false
	})
	return found
}

// segments calls fn for consecutive segments covering [start, end), each either
// inside the set (in=true) or outside it.
func (s *runSet) segments(start, end int64, fn func(start, end int64, in bool)) {
	pos := start
	visit := func(r run) bool {
		if r.start >= end {
			return false
		}
		lo, hi := max(r.start, pos), min(r.end, end)
		if hi <= lo {
			return true
		}
		if lo > pos {
			fn(pos, lo, false)
		}
		fn(lo, hi, true)
		pos = hi
		return true
	}
	var first *run
	s.t.DescendLessOrEqual(run{start: start}, func(r run) bool {
		first = &r
		return false
	})
	if first != nil {
		visit(*first)
	}
	s.t.AscendGreaterOrEqual(run{start: start + 1}, visit)
	if pos < end {
		fn(pos, end, false)
	}
}

// runs returns every run in order.
func (s *runSet) runs() []run {
	out := make([]run, 0, s.t.Len())
	s.t.Ascend(func(r run) bool { out = append(out, r); return true })
	return out
}

// len returns the number of runs; count the number of blocks.
func (s *runSet) len() int     { return s.t.Len() }
func (s *runSet) count() int64 { return s.blocks }
