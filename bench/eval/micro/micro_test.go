package micro

import (
	"slices"
	"strings"
	"testing"

	"github.com/slacker-dev/slacker/bench/eval"
)

func TestNames(t *testing.T) {
	if fileName(3, 42) != "l03-00042" || sizeFile(16<<20) != "big/16mib.bin" || sizeFile(4096) != "big/4kib.bin" {
		t.Fatal(fileName(3, 42), sizeFile(16<<20))
	}
}

func TestSection(t *testing.T) {
	r := &Results{Meta: eval.NewMeta("micro"), Config: Config{Layers: 2, FilesPerLayer: 10, OpensPerLayer: 2, Sizes: []int64{4096, 16 << 20}, Runs: 2}}
	for run := 1; run <= 2; run++ {
		for d := 1; d <= 2; d++ {
			r.Open = append(r.Open, OpenSample{System: "overlayfs", Depth: d, Run: run, Seconds: float64(d) * 1e-3},
				OpenSample{System: "slacker", Depth: d, Run: run, Seconds: 5e-4})
		}
		r.Append = append(r.Append, AppendSample{System: "overlayfs", Size: 16 << 20, Run: run, Seconds: 0.02, FsyncSeconds: 0.021},
			AppendSample{System: "slacker", Size: 16 << 20, Run: run, Seconds: 0.0001, FsyncSeconds: 0.002},
			AppendSample{System: "overlayfs", Size: 4096, Run: run, Seconds: 0.001, FsyncSeconds: 0.0011})
	}
	sec := r.Section()
	if len(sec.Figures) != 2 || len(sec.Tables) != 2 {
		t.Fatalf("%d figures, %d tables", len(sec.Figures), len(sec.Tables))
	}
	if got := sec.Tables[0].Rows[1]; strings.Join(got, ",") != "2,2,0.5,4x" {
		t.Fatalf("depth 2 row %v", got)
	}
	row := sec.Tables[1].Rows[1] // 16 MiB
	if row[1] != "20" || row[2] != "0.1" || row[3] != "200x" || row[6] != "61.7" {
		t.Fatalf("16 MiB row %v", row)
	}
	if sec.Tables[1].Rows[0][2] != "-" {
		t.Fatalf("missing slacker sample should render as -: %v", sec.Tables[1].Rows[0])
	}
	if len(sec.Headlines) != 1 || !strings.HasPrefix(sec.Headlines[0].Value, "200x") {
		t.Fatalf("headlines %v", sec.Headlines)
	}
}

// TestSectionModes: results with slacker-block beside slacker render the
// copy-on-write table by file size with a column per system, named by how each
// copies on write, ratios of both against overlayfs, and a headline for each
// mode; the open table and the second run get slacker-block too.
func TestSectionModes(t *testing.T) {
	r := &Results{Meta: eval.NewMeta("micro"), Config: Config{Layers: 1, FilesPerLayer: 10, OpensPerLayer: 2, Sizes: []int64{4096, 16 << 20}, Runs: 1},
		RootModes: map[string]string{"slacker": "shared", "slacker-block": "block"}}
	r.Open = []OpenSample{{System: "overlayfs", Depth: 1, Seconds: 2e-3}, {System: "slacker", Depth: 1, Seconds: 1e-3}, {System: "slacker-block", Depth: 1, Seconds: 5e-4}}
	for _, s := range []struct {
		sys       string
		small, mb float64
	}{{"overlayfs", 0.002, 0.02}, {"slacker", 0.001, 0.016}, {"slacker-block", 0.0001, 0.0001}} {
		r.Append = append(r.Append, AppendSample{System: s.sys, Size: 4096, Seconds: s.small, FsyncSeconds: 2 * s.small},
			AppendSample{System: s.sys, Size: 16 << 20, Seconds: s.mb, FsyncSeconds: 2 * s.mb})
	}
	r.Rerun = []RerunSample{{System: "overlayfs", Workload: "nginx", First: 2, Second: 1}, {System: "slacker", Workload: "nginx", First: 1, Second: 0.5},
		{System: "slacker-block", Workload: "nginx", First: 1, Second: 0.8}}
	sec := r.Section()
	if len(sec.Tables) != 3 {
		t.Fatalf("%d tables", len(sec.Tables))
	}
	open := sec.Tables[0]
	if strings.Join(open.Header, ",") != "depth,overlayfs,slacker,slacker-block,overlayfs / slacker,overlayfs / slacker-block" ||
		strings.Join(open.Rows[0], ",") != "1,2,1,0.5,2x,4x" {
		t.Fatalf("open table %v %v", open.Header, open.Rows)
	}
	cow := sec.Tables[1]
	if !strings.HasPrefix(cow.Title, "Copy-on-write latency by file size") {
		t.Fatalf("title %q", cow.Title)
	}
	want := "file size,overlayfs,slacker (shared: whole-file copy-up),slacker-block (4 KiB copy-on-write),overlayfs / slacker,overlayfs / slacker-block," +
		"with fsync: overlayfs,slacker,slacker-block,paper overlay2,paper HP-Mapper"
	if strings.Join(cow.Header, ",") != want {
		t.Fatalf("header %q", cow.Header)
	}
	if got := strings.Join(cow.Rows[1], ","); got != "16.0 MiB,20,16,0.1,1.25x,200x,40,32,0.2,61.7,0.57" {
		t.Fatalf("16 MiB row %s", got)
	}
	var names []string
	for _, h := range sec.Headlines {
		names = append(names, h.Name+" = "+h.Value)
	}
	for _, w := range []string{"copy-on-write latency at 16 MiB, overlayfs / Slacker = 1.25x (20 ms vs 16 ms)",
		"copy-on-write latency at 16 MiB, overlayfs / Slacker block mode = 200x (20 ms vs 0.1 ms)",
		"second-run time, median over workloads, Slacker vs overlayfs = 0.5 s vs 1 s",
		"second-run time, median over workloads, Slacker block mode vs overlayfs = 0.8 s vs 1 s"} {
		if !slices.Contains(names, w) {
			t.Errorf("no headline %q in %q", w, names)
		}
	}
	if rows := sec.Tables[2].Rows; len(rows) != 3 || rows[2][0] != "slacker-block" {
		t.Fatalf("second-run rows %v", rows)
	}
	for _, f := range sec.Figures {
		if !strings.Contains(f.SVG, "slacker-block") {
			t.Errorf("figure %s has no slacker-block series", f.File)
		}
	}
}
