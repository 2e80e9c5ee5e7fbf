package storage

import (
	"math"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/slacker-dev/slacker/bench/eval"
)

func TestJobFile(t *testing.T) {
	j := JobSpec{RW: "randwrite", BS: 4096, Jobs: 3, Depth: 32, Runtime: 10, Files: []string{"a/0.bin", "b:1.bin"}, Dir: "/mnt/x", FileSize: 16 << 20, Direct: true}
	s := j.JobFile()
	for _, want := range []string{"[global]\n", "ioengine=libaio\n", "direct=1\n", "rw=randwrite\n", "bs=4096\n", "iodepth=32\n",
		"runtime=10\n", "time_based=1\n", "size=16777216\n", "directory=/mnt/x\n", "allow_file_create=0\n",
		"[job0]\nfilename=a/0.bin\n", "[job1]\nfilename=b\\:1.bin\n", "[job2]\nfilename=a/0.bin\n"} {
		if !strings.Contains(s, want) {
			t.Errorf("job file lacks %q:\n%s", want, s)
		}
	}
	if strings.Count(s, "[job") != 3 {
		t.Errorf("want 3 job sections:\n%s", s)
	}
}

func TestParseFio(t *testing.T) {
	b, err := os.ReadFile("testdata/fio-randread.json")
	if err != nil {
		t.Fatal(err)
	}
	// fio may print warnings before its JSON.
	r, err := ParseFio(append([]byte("fio: warning: something\n"), b...), "read")
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(r.IOPS-52475.524476) > 1e-6 || r.IOs != 52528 || r.RuntimeS != 1.001 || r.BWBytes != 214939748 {
		t.Fatalf("parsed %+v", r)
	}
	if r.P50Us <= 0 || r.P99Us < r.P50Us || r.P999Us < r.P99Us || r.MeanLatUs <= 0 {
		t.Fatalf("latencies %+v", r)
	}
	w, err := ParseFio(b, "write")
	if err != nil || w.IOPS != 0 {
		t.Fatalf("write side of a read job: %+v %v", w, err)
	}
	if _, err := ParseFio([]byte("not json"), "read"); err == nil {
		t.Fatal("garbage parsed")
	}
	if _, err := ParseFio([]byte(`{"jobs":[]}`), "read"); err == nil {
		t.Fatal("no jobs parsed")
	}
}

func TestSection(t *testing.T) {
	r := &Results{Meta: eval.NewMeta("storage"), Config: Config{Jobs: 32, Depth: 32, FileSize: 16 << 20, Runtime: 5, Runs: 2, SweepBS: []int64{4096, 65536}},
		Targets: map[string]string{"ext4": "a", "btrfs-loop": "b", "btrfs-nodatacow": "c", "slacker": "d"}}
	for run := 1; run <= 2; run++ {
		for _, tg := range []string{"ext4", "btrfs-loop", "btrfs-nodatacow", "slacker"} {
			for _, rw := range []string{"randread", "randwrite"} {
				for _, ph := range []string{"cold", "warm"} {
					r.Samples = append(r.Samples, Sample{Target: tg, RW: rw, BS: 4096, Phase: ph, Run: run, Result: Result{IOPS: float64(1000 * run), P50Us: 100, P99Us: 900, BWBytes: 4e6}})
				}
			}
			r.Samples = append(r.Samples, Sample{Target: tg, RW: "randread", BS: 65536, Phase: "warm", Run: run, Result: Result{IOPS: 500, BWBytes: 32e6}})
		}
	}
	sec := r.Section()
	if len(sec.Figures) != 2 || len(sec.Tables) != 2 || len(sec.Tables[0].Rows) != 4 {
		t.Fatalf("section: %d figures, %d tables", len(sec.Figures), len(sec.Tables))
	}
	if got := sec.Tables[0].Rows[0][1]; got != "1500" {
		t.Fatalf("median IOPS cell = %q, want 1500", got)
	}
	var cow string
	for _, h := range sec.Headlines {
		if strings.HasPrefix(h.Name, "btrfs random-write") {
			cow = h.Value
		}
	}
	if cow != "1x" {
		t.Fatalf("btrfs headline %q", cow)
	}
}

// TestSectionReadStates: with slacker-block beside slacker and both measured with
// the data on the node and only in the store, the main table has a row for each,
// and a table and figure of their own give each state's IOPS, what slackerd's cache
// held, and the ratios to overlayfs's warm random reads, with a headline per
// system and state.
func TestSectionReadStates(t *testing.T) {
	r := &Results{Meta: eval.NewMeta("storage"), Config: Config{Jobs: 4, Depth: 8, FileSize: 16 << 20, Runtime: 5, Runs: 1},
		Targets: map[string]string{"overlayfs": "a", "slacker": "b", "slacker-block": "c"}}
	add := func(tg, rw, phase string, v float64, cached int64) {
		r.Samples = append(r.Samples, Sample{Target: tg, RW: rw, BS: 4096, Phase: phase, Run: 1, Result: Result{IOPS: v, P50Us: 100, P99Us: 900}, CachedBytes: cached})
	}
	for _, tg := range []string{"overlayfs", "slacker", "slacker-block"} {
		for _, rw := range []string{"randread", "randwrite"} {
			add(tg, rw, "cold", 1000, 0)
			add(tg, rw, "warm", 80000, 0)
		}
	}
	add("slacker", "randread", PhaseNode, 40000, 64<<20)
	add("slacker", "randread", PhaseStore, 2000, 0)
	add("slacker-block", "randread", PhaseNode, 20000, 64<<20)
	add("slacker-block", "randread", PhaseStore, 4000, 0)
	sec := r.Section()
	if len(sec.Tables) != 2 || len(sec.Figures) != 2 {
		t.Fatalf("%d tables, %d figures", len(sec.Tables), len(sec.Figures))
	}
	var rows []string
	for _, row := range sec.Tables[0].Rows {
		rows = append(rows, row[0])
	}
	if strings.Join(rows, ",") != "overlayfs,slacker,slacker-block" {
		t.Fatalf("main table rows %v", rows)
	}
	st := sec.Tables[1]
	if len(st.Rows) != 2 {
		t.Fatalf("read states %v", st.Rows)
	}
	if got := strings.Join(st.Rows[0], "|"); got != "slacker|40k|100µs / 900µs|67.1MB / 0 of 67.1MB|2000|100µs / 900µs|0.5x|0.025x" {
		t.Fatalf("slacker row %s", got)
	}
	if got := strings.Join(st.Rows[1], "|"); got != "slacker-block|20k|100µs / 900µs|67.1MB / 0 of 67.1MB|4000|100µs / 900µs|0.25x|0.05x" {
		t.Fatalf("slacker-block row %s", got)
	}
	if f := sec.Figures[1]; f.File != "storage-read-states.svg" || !strings.Contains(f.SVG, "slacker-block") || !strings.Contains(f.SVG, "chunks in the local store, not in the cache") {
		t.Fatalf("figure %s", f.File)
	}
	hl := map[string]string{}
	for _, h := range sec.Headlines {
		hl[h.Name] = h.Value
	}
	for name, want := range map[string]string{
		"fio random read IOPS, data on the node, slacker":                                  "40k (0.5x overlayfs's warm 80k)",
		"fio random read IOPS, chunks in the local store, not in the cache, slacker-block": "4000 (0.05x overlayfs's warm 80k)",
		"fio random read, warm IOPS, slacker-block":                                        "80k",
	} {
		if hl[name] != want {
			t.Errorf("headline %q = %q, want %q", name, hl[name], want)
		}
	}
}

// TestTargets: every target has a description, and the default targets measure
// Slacker in both modes.
func TestTargets(t *testing.T) {
	for _, n := range AllTargets {
		if targetDesc[n] == "" {
			t.Errorf("target %s has no description", n)
		}
	}
	if !slices.Contains(AllTargets, "slacker") || !slices.Contains(AllTargets, "slacker-block") {
		t.Fatalf("default targets %v", AllTargets)
	}
}
