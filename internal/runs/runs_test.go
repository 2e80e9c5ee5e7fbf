package runs

import (
	"math/rand/v2"
	"testing"
)

func TestSetModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const n = 500
	for trial := 0; trial < 50; trial++ {
		s := New()
		var model [n]bool
		for op := 0; op < 100; op++ {
			a := rng.Int64N(n)
			b := a + rng.Int64N(min(40, n-a)+1)
			var fresh int64
			for i := a; i < b; i++ {
				if !model[i] {
					fresh++
				}
				model[i] = true
			}
			if a < b {
				// touches: [a, b) overlaps or adjoins a run iff adding it makes no new run.
				before, touched := s.Len(), s.Touches(a, b)
				clone := New()
				for _, r := range s.Runs() {
					clone.Add(r.Start, r.End)
				}
				clone.Add(a, b)
				if touched != (clone.Len() <= before) {
					t.Fatalf("touches(%d,%d) = %v with runs %v", a, b, touched, s.Runs())
				}
			}
			if got := s.Add(a, b); got != fresh {
				t.Fatalf("add(%d,%d) = %d new blocks, want %d", a, b, got, fresh)
			}
			// runs are maximal and disjoint and match the model
			var count int64
			prev := int64(-1)
			for _, r := range s.Runs() {
				if r.Start <= prev {
					t.Fatalf("runs not maximal/disjoint: %v", s.Runs())
				}
				for i := r.Start; i < r.End; i++ {
					if !model[i] {
						t.Fatalf("block %d in set, not in model", i)
					}
				}
				count += r.End - r.Start
				prev = r.End
			}
			var want int64
			for i := range model {
				if model[i] {
					want++
				}
				if s.Contains(int64(i)) != model[i] {
					t.Fatalf("contains(%d) = %v", i, !model[i])
				}
			}
			if count != want || s.Count() != want {
				t.Fatalf("count %d / %d, want %d", count, s.Count(), want)
			}
			// segments cover a random window exactly and agree with the model
			lo := rng.Int64N(n)
			hi := lo + rng.Int64N(n-lo+1)
			pos := lo
			s.Segments(lo, hi, func(a, b int64, in bool) {
				if a != pos || b <= a {
					t.Fatalf("segment [%d,%d) at pos %d", a, b, pos)
				}
				for i := a; i < b; i++ {
					if model[i] != in {
						t.Fatalf("segment [%d,%d) in=%v disagrees at %d", a, b, in, i)
					}
				}
				pos = b
			})
			if pos != hi {
				t.Fatalf("segments stop at %d, want %d", pos, hi)
			}
		}
	}
}
