package runs

import "github.com/google/btree"

// Run is a half-open range of block numbers [Start, End).
type Run struct{ Start, End int64 }

// Set is a set of block numbers stored as maximal disjoint runs.
type Set struct {
	t      *btree.BTreeG[Run]
	blocks int64
}

// New returns an empty set.
func New() *Set {
	return &Set{t: btree.NewG(32, func(a, b Run) bool { return a.Start < b.Start })}
}

// Add inserts [start, end), merging with overlapping and adjacent runs. It returns
// the number of blocks that were not in the set before.
func (s *Set) Add(start, end int64) int64 {
	if start >= end {
		return 0
	}
	merged := Run{start, end}
	var drop []Run
	// A run that starts before start and reaches it.
	s.t.DescendLessOrEqual(Run{Start: start}, func(r Run) bool {
		if r.End >= start {
			drop = append(drop, r)
		}
		return false
	})
	s.t.AscendGreaterOrEqual(Run{Start: start + 1}, func(r Run) bool {
		if r.Start > end {
			return false
		}
		drop = append(drop, r)
		return true
	})
	var covered int64
	for _, r := range drop {
		s.t.Delete(r)
		lo, hi := max(r.Start, start), min(r.End, end)
		if hi > lo {
			covered += hi - lo
		}
		merged.Start = min(merged.Start, r.Start)
		merged.End = max(merged.End, r.End)
		s.blocks -= r.End - r.Start
	}
	s.t.ReplaceOrInsert(merged)
	s.blocks += merged.End - merged.Start
	return (end - start) - covered
}

// Contains reports whether block b is in the set.
func (s *Set) Contains(b int64) bool {
	found := false
	s.t.DescendLessOrEqual(Run{Start: b}, func(r Run) bool {
		found = b < r.End
		return false
	})
	return found
}

// Touches reports whether a run of the set overlaps or adjoins [start, end), so that
// adding it would not make a new run.
func (s *Set) Touches(start, end int64) bool {
	found := false
	s.t.DescendLessOrEqual(Run{Start: end}, func(r Run) bool {
		found = r.End >= start
		return false
	})
	return found
}

// Segments calls fn for consecutive segments covering [start, end), each either
// inside the set (in=true) or outside it.
func (s *Set) Segments(start, end int64, fn func(start, end int64, in bool)) {
	pos := start
	visit := func(r Run) bool {
		if r.Start >= end {
			return false
		}
		lo, hi := max(r.Start, pos), min(r.End, end)
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
	var first *Run
	s.t.DescendLessOrEqual(Run{Start: start}, func(r Run) bool {
		first = &r
		return false
	})
	if first != nil {
		visit(*first)
	}
	s.t.AscendGreaterOrEqual(Run{Start: start + 1}, visit)
	if pos < end {
		fn(pos, end, false)
	}
}

// Runs returns every run in order.
func (s *Set) Runs() []Run {
	out := make([]Run, 0, s.t.Len())
	s.t.Ascend(func(r Run) bool { out = append(out, r); return true })
	return out
}

// Len returns the number of runs.
func (s *Set) Len() int { return s.t.Len() }

// Count returns the number of blocks.
func (s *Set) Count() int64 { return s.blocks }
