package multimake

import (
	"strings"
	"testing"

	"github.com/slacker-dev/slacker/bench/eval"
)

func TestCompilers(t *testing.T) {
	set, err := Compilers()
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Workloads) != 7 {
		t.Fatalf("%d compilers", len(set.Workloads))
	}
	for _, w := range set.Workloads {
		src := w.Files["/src/vec.c"]
		if !strings.Contains(src, "a[i] = b[i] + c[i] * 3") || !strings.HasPrefix(w.Name, "mm-") || compilerOf(w) != strings.TrimPrefix(w.Name, "mm-") {
			t.Fatalf("workload %s: cmd %v", w.Name, w.Cmd)
		}
		if w.Layers[0][0] != "libc6-dev" {
			t.Fatalf("%s does not share the libc6-dev layer", w.Name)
		}
	}
	cmd := compileCmd("clang-14")
	if cmd[0] != "sh" || !strings.Contains(cmd[2], "clang-14 -O2 -o /tmp/vec /src/vec.c >&2 && cat /tmp/vec") {
		t.Fatalf("compile command %v", cmd)
	}
}

func TestParseOutput(t *testing.T) {
	sum, s, err := ParseOutput("8768935 0.1606\n")
	if err != nil || sum != "8768935" || s != 0.1606 {
		t.Fatalf("%q %v %v", sum, s, err)
	}
	for _, bad := range []string{"", "1", "1 x", "1 2 3"} {
		if _, _, err := ParseOutput(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestSection(t *testing.T) {
	r := &Results{Meta: eval.NewMeta("multimake"), Compilers: []string{"mm-gcc-12", "mm-clang-14"}, Iterations: 100, Tests: 3, Runs: 1,
		ImageBytes: map[string]int64{"mm-gcc-12": 300 << 20}}
	for _, sys := range []string{"overlayfs", "slacker"} {
		for _, c := range r.Compilers {
			st := Step{System: sys, Compiler: c, Run: 1, Pull: 1, Compile: 0.5, Test: 0.2, Delete: 0.3, BinarySeconds: 0.1}
			if sys == "slacker" {
				st.Pull, st.Delete = 0.05, 0.01
			}
			r.Steps = append(r.Steps, st)
		}
	}
	r.Totals = []Total{{System: "overlayfs", Run: 1, Seconds: 4}, {System: "slacker", Run: 1, Seconds: 1.6}}
	sec := r.Section()
	if len(sec.Figures) != 2 || len(sec.Tables[0].Rows) != 2 {
		t.Fatalf("%d figures %d rows", len(sec.Figures), len(sec.Tables[0].Rows))
	}
	if row := sec.Tables[0].Rows[0]; row[4] != "1" || row[5] != "0.05" || row[9] != "0.01" {
		t.Fatalf("row %v", row)
	}
	if r.median("overlayfs", "", phases[0].f) != 2 {
		t.Fatal("pull summed over compilers")
	}
	if !strings.HasPrefix(sec.Headlines[0].Value, "2.5x") {
		t.Fatalf("headline %v", sec.Headlines)
	}
}
