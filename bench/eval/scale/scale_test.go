package scale

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slacker-dev/slacker/bench/eval"
	"github.com/slacker-dev/slacker/bench/rig"
)

func TestParallel(t *testing.T) {
	var n atomic.Int32
	took, err := parallel(8, func(i int) error {
		n.Add(1)
		time.Sleep(20 * time.Millisecond)
		if i == 3 {
			return errors.New("three")
		}
		return nil
	})
	if n.Load() != 8 || err == nil || err.Error() != "three" {
		t.Fatalf("ran %d, err %v", n.Load(), err)
	}
	if took < 20*time.Millisecond {
		t.Fatalf("returned before all finished: %v", took)
	}
	if check(rig.RunResult{ExitCode: 2, Stderr: "no"}, nil) == nil || check(rig.RunResult{}, nil) != nil {
		t.Fatal("check")
	}
}

func TestSection(t *testing.T) {
	r := &Results{Meta: eval.NewMeta("scale"), Sizes: []int64{1 << 20, 100 << 20}, Counts: []int{1, 32}, Runs: 1,
		Convert: []Convert{{Size: 1 << 20, Seconds: 0.5}}}
	for _, size := range r.Sizes {
		for _, n := range r.Counts {
			r.Samples = append(r.Samples,
				Sample{System: "overlayfs", Op: "pull", Size: size, Count: n, Seconds: float64(n) * float64(size) / 1e8},
				Sample{System: "slacker", Op: "pull", Size: size, Count: n, Seconds: 0.1 * float64(n)},
				Sample{System: "slacker", Op: "push", Size: size, Count: n, Error: "boom", Seconds: 1})
		}
	}
	sec := r.Section()
	if len(sec.Figures) != 2 || len(sec.Tables[0].Rows) != 4 {
		t.Fatalf("%d figures, %d rows", len(sec.Figures), len(sec.Tables[0].Rows))
	}
	last := sec.Tables[0].Rows[3]
	if last[0] != "32" || last[3] != "-" || last[5] != "33.6" || last[6] != "3.2" || last[7] != "10.5x" {
		t.Fatalf("row %v", last)
	}
	if len(sec.Headlines) != 2 {
		t.Fatalf("headlines %v", sec.Headlines)
	}
}

func TestMaxBytes(t *testing.T) {
	const gib = 1 << 30
	o := Options{MaxBytes: 4 * gib}
	for _, c := range []struct {
		n    int
		size int64
		want bool
	}{{32, 100 << 20, true}, {4, gib, true}, {8, gib, false}, {1, 5 * gib, false}} {
		if got := o.within(c.n, c.size); got != c.want {
			t.Errorf("within(%d, %d) = %v", c.n, c.size, got)
		}
	}
	if !(Options{}).within(1000, 1000*gib) {
		t.Error("no limit: everything is within")
	}
	// 1 GiB images only up to 4 at once: rows and headlines of the points run.
	r := &Results{Meta: eval.NewMeta("scale"), Sizes: []int64{100 << 20, gib}, Counts: []int{1, 4, 32}, MaxBytes: 4 * gib, Runs: 1}
	for _, size := range r.Sizes {
		for _, n := range r.Counts {
			if o.within(n, size) {
				r.Samples = append(r.Samples, Sample{System: "overlayfs", Op: "pull", Size: size, Count: n, Seconds: 1},
					Sample{System: "slacker", Op: "pull", Size: size, Count: n, Seconds: 0.5})
			}
		}
	}
	sec := r.Section()
	if rows := len(sec.Tables[0].Rows); rows != 5 {
		t.Fatalf("%d rows, want 5", rows)
	}
	got := r.headlinePoints()
	if len(got) != 2 || got[0] != (point{100 << 20, 32}) || got[1] != (point{gib, 4}) {
		t.Fatalf("headline points %v", got)
	}
	if len(sec.Headlines) != 4 {
		t.Fatalf("%d headlines", len(sec.Headlines))
	}
}
