package docsgen

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/slacker-dev/slacker/bench/core"
	"github.com/slacker-dev/slacker/bench/e2ebench"
	"github.com/slacker-dev/slacker/bench/hellobench/harness"
	"github.com/slacker-dev/slacker/bench/rig"
)

// fixture is a repository of small results files whose figures are worked out by
// hand in the tests below.
func fixture(t *testing.T) *Data {
	t.Helper()
	root := t.TempDir()
	write := func(rel string, v any) {
		t.Helper()
		if err := rig.WriteJSON(filepath.Join(root, rel), v); err != nil {
			t.Fatal(err)
		}
	}
	raw := func(rel, s string) {
		t.Helper()
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// The core benchmark: medians by hand in the comments.
	cr := &core.Report{Runs: 3, Images: []core.ImageInfo{
		{Name: "minbase", DataBytes: 100e6, CompressedBytes: 40e6, Layers: 1},
		{Name: "big", DataBytes: 700e6, CompressedBytes: 300e6, Layers: 3},
	}}
	add := func(sys, img, metric string, vs ...float64) {
		for i, v := range vs {
			cr.Samples = append(cr.Samples, core.Sample{System: sys, Image: img, Metric: metric, Value: v, Run: i + 1})
		}
	}
	add("slacker", "minbase", "pull_run_s", 0.16, 0.14, 0.15) // 0.15
	add("overlayfs", "minbase", "pull_run_s", 2.5, 3.5, 3.0)  // 3.0: 20x
	add("slacker", "big", "pull_run_s", 0.2, 0.4)             // 0.3
	add("overlayfs", "big", "pull_run_s", 9, 12)              // 10.5: 35x
	add("slacker", "minbase", "fetched_bytes", 5e6, 6e6, 7e6) // 6 MB of 100: 6%
	add("overlayfs", "minbase", "fetched_bytes", 40e6)        // 40/6: 6.7x
	add("slacker", "big", "fetched_bytes", 7e6)               // 7 MB of 700: 1%
	add("slacker", "minbase", "peak_rss_bytes", 30e6, 150e6)  // max 150 MB
	add("slacker", "big", "peak_rss_bytes", 160e6)            // max 160 MB
	add("slacker", "append16", "cow_s", 0.00007, 0.00009)     // 0.08 ms
	add("slacker", "append16", "append_s", 0.003, 0.0032)     // 3.1 ms: 3.02 over cow_s
	add("overlayfs", "append16", "cow_s", 0.025)              // 25 ms: 312.5x
	write("docs/bench/core-test.json", cr)

	// HelloBench at 1 Gbit/s, two workloads.
	hr := &harness.Results{Version: harness.ResultsVersion, Runs: 1, Elapsed: 630,
		Profile: harness.Profile{Name: "1gbit", RateBits: 1e9, RTTMillis: 1},
		Systems: []harness.SystemInfo{{Name: "overlayfs"}, {Name: "slacker"}},
		Workloads: []harness.WorkloadInfo{
			{Name: "w1", Category: "distro", Ready: "{ exit = 0 }", Layers: 1, CompressedBytes: 40 << 20, DataBytes: 100e6},
			{Name: "w2", Category: "database", Ready: "{ tcp = 1 }", Layers: 3, CompressedBytes: 80 << 20, DataBytes: 200e6},
		},
		Publish: []harness.PublishSample{{Workload: "w1", System: "slacker", OK: true, Total: 3}, {Workload: "w2", System: "slacker", OK: true, Total: 4}},
	}
	sample := func(w, sys, cycle string, push, pull, run float64, store, read int64) {
		hr.Samples = append(hr.Samples, harness.Sample{Workload: w, System: sys, Cycle: cycle, Run: 1, OK: true,
			Push: push, Pull: pull, RunTime: run, Total: push + pull + run, StoreBytes: store, ReadBytes: read})
	}
	// Deployment: overlayfs 5 s and 10 s, Slacker 1 s and 1 s: speedups 5 and 10,
	// median 7.5, p90 5 + 0.9*5 = 9.5. Slacker pulls in 0.04 and 0.08 s (p90
	// 0.076), runs 0.96 and 0.92 s (median 0.94; run ratios 0.96 and 0.46, median
	// 0.71) against overlayfs's 1 and 2 s (1.5). Fetched 10 and 30 MB of 100 and
	// 200 MB: 10% and 15%, median 12.5%; 20 MB: 0.16 s at 1 Gbit/s; read 5 and 20
	// MB: moved/read 2 and 1.5, median 1.75.
	sample("w1", "overlayfs", harness.Deployment, 0, 4, 1, 0, -1)
	sample("w2", "overlayfs", harness.Deployment, 0, 8, 2, 0, -1)
	sample("w1", "slacker", harness.Deployment, 0, 0.04, 0.96, 10e6, 5e6)
	sample("w2", "slacker", harness.Deployment, 0, 0.08, 0.92, 30e6, 20e6)
	// Development: overlayfs 6 and 12 s, Slacker 2 and 3 s: speedups 3 and 4.
	sample("w1", "overlayfs", harness.Development, 0.5, 4.5, 1, 0, -1)
	sample("w2", "overlayfs", harness.Development, 1, 9, 2, 0, -1)
	sample("w1", "slacker", harness.Development, 0.5, 0.5, 1, 1e6, 1e6)
	sample("w2", "slacker", harness.Development, 1, 0.5, 1.5, 1e6, 1e6)
	write("docs/hellobench/results-test.json", hr)
	// The same with smaller chunks: Slacker's runs 0.9 (faster) and 1.0 (slower),
	// and a publish of 10.5 s (1.5x).
	hr.Samples[2].RunTime, hr.Samples[3].RunTime = 0.9, 1.0
	hr.Publish[1].Total = 7.5
	write("docs/hellobench/results-test-small.json", hr)
	// With block mode beside: w1 in 2.5 s (2x overlayfs's 5), w2 in 2 s (5x):
	// median 3.5x; fetched 20 MB of both images, 20% and 10%: median 15%.
	hr.Systems = append(hr.Systems, harness.SystemInfo{Name: "slacker-block"})
	sample("w1", "slacker-block", harness.Deployment, 0, 0.5, 2, 20e6, 5e6)
	sample("w2", "slacker-block", harness.Deployment, 0, 0.5, 1.5, 20e6, 20e6)
	write("docs/hellobench/results-test-modes.json", hr)
	// Slacker alone (a before-and-after of its own binaries), and overlayfs alone.
	alone := func(sys string) *harness.Results {
		r := *hr
		r.Systems = []harness.SystemInfo{{Name: sys}}
		r.Samples = nil
		for _, x := range hr.Samples {
			if x.System == sys {
				r.Samples = append(r.Samples, x)
			}
		}
		return &r
	}
	write("docs/hellobench/results-test-alone.json", alone("slacker"))
	write("docs/hellobench/results-test-baseline.json", alone("overlayfs"))

	// BenchmarkDockerPullRun.
	dr := &e2ebench.DockerResults{Runs: 3}
	for i, v := range [][4]float64{{0.2, 0.8, 4, 0.5}, {0.3, 0.9, 5, 0.6}, {0.4, 1.0, 6, 0.7}} {
		dr.Samples = append(dr.Samples,
			e2ebench.DockerSample{System: "slacker", Image: "minbase", Run: i + 1, PullS: v[0], RunS: v[1], Fetched: int64(7e6 + 1e6*float64(i))},
			e2ebench.DockerSample{System: "overlay2", Image: "minbase", Run: i + 1, PullS: v[2], RunS: v[3]})
	}
	write("docs/bench/docker-test.json", dr)

	// BenchmarkDeployStores: pull, run, pull + run, fetched for each store.
	sr := &e2ebench.StoresResults{Runs: 1, Images: []string{"minbase"}}
	for i, sys := range []string{"local", "s3", "registry", "s3-1gbit", "registry-1gbit"} {
		f := float64(i + 1)
		for _, m := range []struct {
			metric string
			v      float64
		}{{"pull_s", 0.05 * f}, {"run_s", 0.2 * f}, {"pull_run_s", 0.25 * f}, {"fetched_bytes", 8 << 20}, {"publish_s", 4 * f}} {
			sr.Samples = append(sr.Samples, e2ebench.StoresSample{System: sys, Image: "minbase", Metric: m.metric, Value: m.v, Run: 1})
		}
	}
	write("docs/bench/stores-test.json", sr)

	raw("README.md", "# A repository\n")

	// Evaluation items: records of any shape.
	raw("docs/eval/micro.json", `{"meta": {"item": "micro", "elapsed_s": 576, "machine": {"load": "11.10"}},
 "containers": 64,
 "image_bytes": {"mm-gcc-11": 307466240},
 "append": [
  {"system": "overlayfs", "size": 4096, "run": 1, "s": 0.001, "fsync_s": 0.0013},
  {"system": "overlayfs", "size": 4096, "run": 2, "s": 0.003, "fsync_s": 0.0013},
  {"system": "slacker", "size": 4096, "run": 1, "s": 0.00004, "fsync_s": 0.0034},
  {"system": "slacker", "size": 4096, "run": 2, "s": 0.00006, "fsync_s": 0.0036},
  {"system": "slacker", "size": 65536, "run": 1, "s": 0.00003, "fsync_s": null}
 ],
 "rerun": [
  {"system": "slacker", "workload": "a", "category": "x", "run": 1, "first_s": 1, "second_s": 0.5},
  {"system": "slacker", "workload": "b", "category": "x", "run": 1, "first_s": 2, "second_s": 0.7},
  {"system": "overlayfs", "workload": "a", "category": "x", "run": 1, "first_s": 1, "second_s": 0.4},
  {"system": "overlayfs", "workload": "b", "category": "x", "run": 1, "first_s": 0, "second_s": 0, "error": "did not start"},
  {"system": "slacker-block", "workload": "a", "category": "x", "run": 1, "first_s": 1, "second_s": 0.8},
  {"system": "slacker-block", "workload": "b", "category": "x", "run": 1, "first_s": 2, "second_s": 1.2}
 ]}`)
	raw("docs/eval/breakdown/micro-before.json", `{"meta": {"item": "micro"}, "append": [
  {"system": "slacker", "size": 4096, "run": 1, "s": 0.0001, "fsync_s": 0.007}]}`)
	raw("docs/eval/analysis.json", `{"meta": {"item": "analysis"}, "corpus": {"raw_bytes": 300, "unique_block_bytes": 100},
 "images": [
  {"name": "a", "category": "distro", "layers": 1, "gz_bytes": 50, "tar_bytes": 200, "file_bytes": 100,
   "depth_bytes": [100], "starts": [{"run": 1, "read_bytes": 20, "fetched_bytes": 40, "hit_bytes": 20, "read_bytes2": 20}]},
  {"name": "b", "category": "database", "layers": 3, "gz_bytes": 100, "tar_bytes": 300, "file_bytes": 200,
   "depth_bytes": [20, 80, 100], "starts": [{"run": 1, "read_bytes": 30, "fetched_bytes": 60, "hit_bytes": 10, "read_bytes2": 20}]},
  {"name": "c", "category": "database", "layers": 2, "gz_bytes": 10, "tar_bytes": 20, "file_bytes": 10,
   "depth_bytes": [5, 5], "starts": [{"run": 1, "error": "never ready"}]}
 ]}`)
	return New(root)
}

func TestFigures(t *testing.T) {
	d := fixture(t)
	for _, tt := range []struct{ spec, want string }{
		// core
		{"core-test median slacker minbase pull_run_s ms0", "150 ms"},
		{"core-test ratio minbase pull_run_s x1", "20.0x"},
		{"core-test ratio minbase,big pull_run_s x0", "20–35x"},
		{"core-test share minbase pct1", "6.0%"},
		{"core-test share minbase,big pct0", "1–6%"},
		{"core-test max slacker minbase,big peak_rss_bytes MB0", "150–160 MB"},
		{"core-test samples slacker minbase peak_rss_bytes MB0", "30–150 MB"},
		{"core-test diff slacker append16 append_s cow_s ms2", "3.02 ms"},
		{"core-test median slacker append16 cow_s us0", "80 µs"},
		{"core-test size big compressed MB0", "300 MB"},
		{"core-test layers minbase,big d", "1–3"},
		{"core-test runs d", "3"},
		// HelloBench
		{"results-test deploy median xr", "7.50x"},
		{"results-test deploy p90 xr", "9.50x"},
		{"results-test develop median xr", "3.50x"},
		{"results-test pull-p90 overlayfs s1", "7.6 s"},
		{"results-test fetched-share pct1", "12.5%"},
		{"results-test-modes sys-deploy slacker-block median xr", "3.50x"},
		{"results-test-modes sys-deploy slacker median xr", "7.50x"},
		// slacker (1 s and 1 s) over slacker-block (2.5 s and 2 s): 2.5 and 2,
		// median 2.25, p90 2.45; runs (changed above) 0.9/2 and 1.0/1.5: median 0.56.
		{"results-test-modes vs-deploy slacker slacker-block median xr", "2.25x"},
		{"results-test-modes vs-deploy slacker slacker-block p90 xr", "2.45x"},
		{"results-test-modes vs-run-ratio slacker slacker-block f2", "0.56"},
		{"results-test-modes vs-failed slacker slacker-block d", "0"},
		{"results-test-modes sys-develop slacker median xr", "3.50x"},
		{"results-test-modes sys-fetched-share slacker-block pct1", "15.0%"},
		{"results-test read-share pct1", "7.5%"},
		{"results-test moved-read f2", "1.75"},
		{"results-test fetched MB1", "20.0 MB"},
		{"results-test link-time s2", "0.16 s"},
		{"results-test run-ratio f3", "0.710"},
		{"results-test run-gap s2", "-0.56 s"},
		{"results-test latency s2", "-0.72 s"},
		{"results-test pull-p90 slacker ms0", "76 ms"},
		{"results-test step slacker deployment run s2", "0.94 s"},
		{"results-test-alone step slacker deployment pull ms0", "60 ms"},
		{"results-test-alone own-share slacker fetched pct1", "12.5%"},
		{"results-test-alone own-share slacker read pct1", "7.5%"},
		{"results-test-alone workloads d", "2"},
		{"results-test-alone faster results-test d", "1"}, // its runs are results-test-small's
		{"results-test step overlayfs deployment,development pull s1", "6.0–6.8 s"},
		{"results-test ceiling x1", "5.0x"},
		{"results-test dev-ceiling x1", "7.0x"}, // 6/1 and 12/1.5 = 8: median 7
		{"results-test samples d", "8"},
		{"results-test succeeded d", "8"},
		{"results-test failed d", "0"},
		{"results-test workloads d", "2"},
		{"results-test oneshot d", "1"},
		{"results-test elapsed min1", "10.5 min"},
		{"results-test publish slacker s0", "7 s"},
		{"results-test-small publish-vs results-test slacker x1", "1.5x"},
		{"results-test-small faster results-test d", "1"},
		{"results-test image w2 compressed MiB1_", "80.0"},
		{"results-test images sum data MB0", "300 MB"},
		{"results-test,results-test-small step slacker deployment run s3", "0.940–0.950 s"},
		// BenchmarkDockerPullRun
		{"docker-test median slacker minbase pull-run s1", "1.2 s"},
		{"docker-test ratio minbase pull-run x1", "4.7x"},
		{"docker-test median slacker minbase fetched MB0", "8 MB"},
		{"docker-test fetched-vs minbase 64e6 x0", "8x"},
		// BenchmarkDeployStores
		{"stores-test median local,s3 minbase pull_run_s ms0", "250–500 ms"},
		{"stores-test vs-local registry-1gbit minbase x2", "5.00x"},
		{"stores-test over-local s3 minbase run_s ms0", "200 ms"},
		{"stores-test median registry minbase publish_s s0", "12 s"},
		// evaluation items
		{"micro median append system=slacker,size=4096 s ms2", "0.05 ms"},
		{"micro ratio median append system=overlayfs,size=4096 s system=slacker,size=4096 . x0", "40x"},
		{"micro diff median append system=slacker,size=4096 fsync_s system=overlayfs,size=4096 . ms1", "2.2 ms"},
		{"micro each:median@size append system=slacker s us0", "30–50 µs"},
		{"micro sum:max@run append system=overlayfs s ms0", "4 ms"},
		{"micro count append s<0.001 - d", "3"},
		{"micro count append fsync_s=NaN - d", "1"},
		{"micro median append system!=slacker fsync_s*1000 f1", "1.3"},
		{"micro vs micro-before median append system=slacker,size=4096 fsync_s x1", "0.5x"},
		{"micro median meta - elapsed_s dur", "9m36s"},
		{"micro median meta - machine.load f0", "11"},
		{"micro max containers - containers d", "64"},
		{"micro max image_bytes - mm-gcc-11 MiB0", "293 MiB"},
		{"micro median rerun-medians system=slacker second s1", "0.6 s"},
		{"micro median rerun-medians system=slacker-block second s1", "1.0 s"},
		{"micro each:count@system rerun-medians second!=NaN - d", "1–2"},
		{"analysis median images - read f0", "25"},
		{"analysis count images read!=NaN - d", "2"},
		{"analysis ratio sum images read!=NaN read read!=NaN tar_bytes pct0", "10%"},
		{"analysis median images - gzip x1", "3.0x"},
		{"analysis median images layers>1 top_share pct0", "30%"},
		{"analysis ratio sum images - depth3 - file_bytes pct0", "32%"},
		{"analysis ratio mean images - hit - read2 pct0", "75%"},
		{"analysis median corpus - raw_bytes/unique_block_bytes x0", "3x"},
	} {
		got, err := d.Figure(tt.spec)
		if err != nil || got != tt.want {
			t.Errorf("%s = %q, %v; want %q", tt.spec, got, err, tt.want)
		}
	}
}

func TestTables(t *testing.T) {
	d := fixture(t)
	for _, tt := range []struct{ spec, want string }{
		{"core-test table", `
| image | measure (median of 3) | Slacker | containerd + overlayfs | speedup |
| --- | --- | --- | --- | --- |
| minbase | pull + run | 150 ms | 3.00 s | 20.0x |
| minbase | bytes moved for pull + run | 6.0 MB (6.0% of 100.0 MB) | 40.0 MB (gzip) | 6.7x |
| minbase | slackerd peak RSS | 150.0 MB | - | - |
| big | pull + run | 300 ms | 10.50 s | 35.0x |
| big | bytes moved for pull + run | 7.0 MB (1.0% of 700.0 MB) | - (gzip) | - |
| big | slackerd peak RSS | 160.0 MB | - | - |
| append16 | 1-byte append to a 16 MiB file, cold (open+write) | 3.10 ms | - | - |
| append16 | 1-byte append after a stat (copy-on-write alone) | 0.08 ms | 25 ms | 312.5x |
`},
		{"results-test summary-table", `
| profile | deployment speedup, median (p90) | development speedup, median (p90) | pull p90, slacker vs overlayfs | run time ratio | fetched / image (median) | failed |
| --- | --- | --- | --- | --- | --- | --- |
| 1 Gbit/s | 7.50x (9.50x) | 3.50x (3.90x) | 76 ms vs 7.60 s | 0.71 | 12.5% | 0 of 8 |
`},
		{"results-test profile-table", `
| profile | system vs overlayfs | deployment speedup, median (p90) | development speedup, median (p90) | pull p90 | run time ratio (median) | fetched / image (median) |
| --- | --- | --- | --- | --- | --- | --- |
| 1 Gbit/s, 1 ms | slacker | **7.50x** (9.50x) | 3.50x (3.90x) | 76 ms vs 7.60 s | 0.71 | 12.5% |
`},
		{"results-test steps-table", `
| profile | system | cycle | push | pull | run until ready | total |
| --- | --- | --- | --- | --- | --- | --- |
| 1gbit | overlayfs | deployment | – | 6.00 s | 1.50 s | 7.50 s |
| 1gbit | slacker | deployment | – | 0.06 s | 0.94 s | 1.00 s |
| 1gbit | overlayfs | development | 0.75 s | 6.75 s | 1.50 s | 9.00 s |
| 1gbit | slacker | development | 0.75 s | 0.50 s | 1.25 s | 2.50 s |
`},
		{"stores-test table", `
| image | store | pull | run echo hello | pull + run | vs local | fetched |
| --- | --- | --- | --- | --- | --- | --- |
| minbase | local | 50 ms | 200 ms | 250 ms | 1.00x | 8.0 MiB |
| | S3 | 100 ms | 400 ms | 500 ms | 2.00x | 8.0 MiB |
| | registry | 150 ms | 600 ms | 750 ms | 3.00x | 8.0 MiB |
| | S3, 1 Gbit/s | 200 ms | 800 ms | 1000 ms | 4.00x | 8.0 MiB |
| | registry, 1 Gbit/s | 250 ms | 1000 ms | 1250 ms | 5.00x | 8.0 MiB |
`},
	} {
		got, err := d.Figure(tt.spec)
		if err != nil || got != tt.want {
			t.Errorf("%s = %v\n%s\nwant:\n%s", tt.spec, err, got, tt.want)
		}
	}
}

func TestFigureErrors(t *testing.T) {
	d := fixture(t)
	for _, tt := range []struct{ spec, want string }{
		{"core-test", "SOURCE FUNC ARG"},
		{"nothing median x", `no nothing.json`},
		{"../core-test median", "base name"},
		{"core-test nonesuch", `core results have no figure "nonesuch" (they have diff, layers, max, median, ratio, runs, samples, share, size, table)`},
		{"core-test median slacker minbase pull_run_s", "takes 3 arguments and a format"},
		{"core-test median slacker minbase nonesuch s1", "no samples of slacker minbase nonesuch"},
		{"core-test median slacker minbase pull_run_s q7", `unknown format "q7"`},
		{"core-test,results-test runs d", "one figure reads one kind"},
		{"results-test step slacker nocycle run s1", `cycle "nocycle"`},
		{"results-test pull-p90 native s1", `system "native"`},
		{"results-test vs-deploy slacker stargz median xr", `no system "stargz"`},
		{"results-test-alone deploy median xr", "the docs compare a Slacker system with overlayfs"},
		{"results-test-alone own-share slacker link pct1", "no deployment of slacker recorded link bytes"},
		{"results-test-alone own-share slacker disk pct1", `own-share "disk"`},
		{"results-test-baseline step overlayfs deployment pull s1", "the docs measure a Slacker system"},
		{"docker-test median slacker nonesuch pull s1", "no samples of slacker nonesuch"},
		{"micro median append system=nobody s s1", "no append records match system=nobody"},
		{"micro median nonesuch - s s1", `no array "nonesuch"`},
		{"micro median append - nonesuch s1", `no field "nonesuch"`},
		{"micro median append size~1 s s1", "KEY=VALUE"},
		{"micro median:sum append - s s1", "OUTER:INNER@KEY"},
		{"micro mode append - s s1", `eval results have no figure "mode"`},
		{"micro vs core-test median append - s s1", "vs core-test: not an evaluation item's results"},
	} {
		_, err := d.Figure(tt.spec)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error with %q", tt.spec, err, tt.want)
		}
	}
}

// Write renders a doc's figures again: a figure edited by hand is put back, the
// rest of the file is left byte for byte, and Check then finds nothing.
func TestWriteAndCheck(t *testing.T) {
	d := fixture(t)
	doc := "# Results\n\nPull + run <!-- fig core-test ratio minbase pull_run_s x1 -->21.0x<!-- /fig --> faster.\n\n" +
		"<!-- fig stores-test table -->\n| stale |\n<!-- /fig -->\n\nThe end: `<!-- fig not a figure -->`.\n"
	p := filepath.Join(d.Root, "docs", "RESULTS.md")
	if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := d.Check()
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Diffs) != 2 || res.Diffs[0].Have != "21.0x" || res.Diffs[0].Want != "20.0x" || res.Diffs[0].Line != 3 || res.Figures["docs/RESULTS.md"] != 2 {
		t.Fatalf("check: %+v", res)
	}
	if b, _ := os.ReadFile(p); string(b) != doc {
		t.Fatal("Check changed the doc")
	}
	if _, err := d.Write(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	table, _ := d.Figure("stores-test table")
	want := strings.Replace(strings.Replace(doc, "21.0x", "20.0x", 1), "\n| stale |\n", table, 1)
	if string(b) != want {
		t.Errorf("written:\n%s\nwant:\n%s", b, want)
	}
	if res, err := d.Check(); err != nil || len(res.Diffs) != 0 {
		t.Errorf("after Write, Check: %+v, %v", res.Diffs, err)
	}
	// A figure that cannot render is an error naming its file and line, and
	// nothing is written.
	bad := "ok <!-- fig core-test runs d -->1<!-- /fig -->\n<!-- fig core-test nonesuch -->1<!-- /fig -->\n"
	if err := os.WriteFile(p, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Write(); err == nil || !strings.Contains(err.Error(), "docs/RESULTS.md:2:") {
		t.Errorf("Write of a bad figure: %v", err)
	}
	if b, _ := os.ReadFile(p); string(b) != bad {
		t.Errorf("a doc with a bad figure was rewritten:\n%s", b)
	}
}
