package micro

import (
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
