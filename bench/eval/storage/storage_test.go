package storage

import (
	"math"
	"os"
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
