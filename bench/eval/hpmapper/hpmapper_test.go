package hpmapper

import (
	"strings"
	"testing"

	"github.com/slacker-dev/slacker/bench/eval"
)

func TestSection(t *testing.T) {
	r := &Results{Meta: eval.NewMeta("hpmapper"), Image: "prometheus", Containers: 64, Parallel: 64, Limits: []int64{0, 1 << 30}, Runs: 1}
	r.Samples = []Sample{
		{System: "overlayfs", Limit: 0, Ready: 64, Seconds: 20, PageCache: 100 << 20, DiskReadBytes: 80 << 20},
		{System: "slacker", Limit: 0, Ready: 64, Seconds: 10, PageCache: 300 << 20, DaemonCache: 60 << 20, StoreBytes: 50 << 20},
		{System: "overlayfs", Limit: 1 << 30, Ready: 0, Error: "all failed"},
		{System: "slacker", Limit: 1 << 30, Ready: 60, Seconds: 30, PageCache: 200 << 20, OOMKills: 4},
	}
	sec := r.Section()
	if len(sec.Figures) != 3 || len(sec.Tables[0].Rows) != 4 {
		t.Fatalf("%d figures, %d rows", len(sec.Figures), len(sec.Tables[0].Rows))
	}
	if row := sec.Tables[0].Rows[3]; row[2] != "60/64" || row[11] != "4" || row[3] != "30" {
		t.Fatalf("row %v", row)
	}
	if row := sec.Tables[0].Rows[2]; row[3] != "-" {
		t.Fatalf("a start where nothing became ready has no time: %v", row)
	}
	if len(sec.Headlines) != 4 || !strings.HasPrefix(sec.Headlines[0].Value, "2x") || !strings.HasPrefix(sec.Headlines[1].Value, "3.6x") {
		t.Fatalf("headlines %v", sec.Headlines)
	}
}

// TestSectionModes: with slacker-block beside slacker, every figure and table has
// both, the read breakdown counts both as Slacker systems, and each mode gets its
// time and memory headlines against overlayfs.
func TestSectionModes(t *testing.T) {
	r := &Results{Meta: eval.NewMeta("hpmapper"), Image: "prometheus", Containers: 64, Parallel: 64, Limits: []int64{0}, Runs: 1,
		RootModes: map[string]string{"slacker": "shared", "slacker-block": "block"}}
	r.Samples = []Sample{
		{System: "overlayfs", Ready: 64, Seconds: 10, PageCache: 100 << 20, MajorFaults: 80},
		{System: "slacker-block", Ready: 64, Seconds: 20, PageCache: 2000 << 20, DaemonCache: 64 << 20, MajorFaults: 20000, VolumeReadBytes: 2 << 30},
		{System: "slacker", Ready: 64, Seconds: 8, PageCache: 120 << 20, DaemonCache: 64 << 20, MajorFaults: 90, VolumeReadBytes: 40 << 20},
	}
	sec := r.Section()
	var sys []string
	for _, row := range sec.Tables[0].Rows {
		sys = append(sys, row[0])
	}
	if strings.Join(sys, ",") != "overlayfs,slacker,slacker-block" {
		t.Fatalf("rows of %v", sys)
	}
	bt := sec.Tables[1]
	if bt.Rows[0][4] != "-" || bt.Rows[1][4] == "-" || bt.Rows[2][4] == "-" || !strings.Contains(bt.Note, "slacker-block gives each container its own ext4") {
		t.Fatalf("breakdown %v; note %q", bt.Rows, bt.Note)
	}
	for _, f := range sec.Figures {
		if !strings.Contains(f.SVG, "slacker-block, limit none") {
			t.Errorf("figure %s lacks slacker-block", f.File)
		}
	}
	want := []string{
		"64 containers, memory limit none: time until all ready, overlayfs / Slacker = 1.25x (10 s vs 8 s)",
		"64 containers, memory limit none: page cache + daemon cache, Slacker / overlayfs = 1.84x (193MB vs 105MB)",
		"64 containers, memory limit none: time until all ready, overlayfs / Slacker block mode = 0.5x (10 s vs 20 s)",
		"64 containers, memory limit none: page cache + daemon cache, Slacker block mode / overlayfs = 20.6x (2.16GB vs 105MB)",
	}
	var got []string
	for _, h := range sec.Headlines {
		got = append(got, h.Name+" = "+h.Value)
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("headlines\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
