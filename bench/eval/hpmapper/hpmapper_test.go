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
