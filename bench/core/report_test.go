package core

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/slacker-dev/slacker/bench/rig"
)

// handReport has samples whose medians, ratios and shares are worked out by hand
// in the tests below.
func handReport() *Report {
	r := &Report{
		Date:    time.Date(2026, 11, 22, 7, 47, 0, 0, time.UTC),
		Machine: Machine{Kernel: "6.18.44", CPU: "AMD EPYC", CPUs: 2, Memory: "24684084 kB"},
		Commit:  "ff0ed5c",
		Runs:    3,
		Images: []ImageInfo{
			{Name: "minbase", DataBytes: 100e6, CompressedBytes: 40e6, Layers: 1},
			{Name: "big", DataBytes: 700e6, CompressedBytes: 300e6, Layers: 3}, // no samples: no rows
		},
		Failed: []string{"overlayfs pull big: boom", "slacker cold start: no"},
	}
	add := func(sys, img, metric string, vs ...float64) {
		for i, v := range vs {
			r.Samples = append(r.Samples, Sample{System: sys, Image: img, Metric: metric, Value: v, Run: i + 1})
		}
	}
	add("slacker", "minbase", "pull_s", 0.05, 0.03, 0.04)            // median 0.04
	add("overlayfs", "minbase", "pull_s", 3.0, 2.0, 2.5)             // median 2.5: 62.5x
	add("slacker", "minbase", "run_s", 0.12, 0.10)                   // even: (0.10+0.12)/2 = 0.11
	add("overlayfs", "minbase", "run_s", 0.5, 0.3)                   // 0.4: 0.4/0.11 = 3.64x
	add("slacker", "minbase", "pull_run_s", 0.16, 0.14, 0.15)        // 0.15
	add("overlayfs", "minbase", "pull_run_s", 2.5)                   // 2.5/0.15 = 16.67x
	add("slacker", "minbase", "fetched_bytes", 7e6, 5e6, 6e6)        // 6 MB, 6% of 100 MB
	add("overlayfs", "minbase", "fetched_bytes", 40e6, 40e6, 40e6)   // 40/6 = 6.67x
	add("slacker", "minbase", "peak_rss_bytes", 30e6, 50e6, 40e6)    // the largest: 50 MB
	add("slacker", "minbase", "seqread_cold_s", 1.5, 1.0, 2.0)       // 1.5
	add("overlayfs", "minbase", "seqread_cold_s", 0.75)              // 0.75/1.5 = 0.5x (slower)
	add("slacker", "append16", "append_s", 0.00007)                  // 0.07 ms
	add("overlayfs", "append16", "append_s", 0.025)                  // 25 ms: 357.1x
	add("overlayfs", "append16", "append_s_fsync", 0.02, 0.04, 0.03) // Slacker has none: "-"
	add("slacker", "append16", "publish_total_s", 9)                 // not a row
	add("overlayfs", "minbase", "peak_rss_bytes", 1e9)               // only Slacker's RSS is shown
	return r
}

func TestMedianAndMax(t *testing.T) {
	r := handReport()
	tests := []struct {
		sys, img, metric string
		want             float64
		n                int
	}{
		{"slacker", "minbase", "pull_s", 0.04, 3},
		{"overlayfs", "minbase", "pull_s", 2.5, 3},
		{"slacker", "minbase", "run_s", 0.11, 2},
		{"overlayfs", "minbase", "pull_run_s", 2.5, 1},
		{"slacker", "minbase", "fetched_bytes", 6e6, 3},
		{"slacker", "append16", "append_s_fsync", 0, 0},
		{"slacker", "big", "pull_s", 0, 0},
	}
	for _, tt := range tests {
		got, n := r.Median(tt.sys, tt.img, tt.metric)
		if n != tt.n || got < tt.want-1e-12 || got > tt.want+1e-12 {
			t.Errorf("Median(%s, %s, %s) = %v, %d; want %v, %d", tt.sys, tt.img, tt.metric, got, n, tt.want, tt.n)
		}
	}
	if got := r.Max("slacker", "minbase", "peak_rss_bytes"); got != 50e6 {
		t.Errorf("Max peak RSS = %v, want 50e6", got)
	}
	if got := r.Max("slacker", "big", "peak_rss_bytes"); got != 0 {
		t.Errorf("Max of nothing = %v, want 0", got)
	}
}

func TestFormats(t *testing.T) {
	for _, tt := range []struct{ got, want string }{
		{secs(0), "-"},
		{secs(0.00007), "0.07 ms"},
		{secs(0.0099), "9.90 ms"},
		{secs(0.01), "10 ms"},
		{secs(0.1234), "123 ms"},
		{secs(0.9996), "1000 ms"},
		{secs(1), "1.00 s"},
		{secs(9.994), "9.99 s"},
		{mb(0), "-"},
		{mb(156.1e6), "156.1 MB"},
		{ratio(0.04, 2.5), "62.5x"},
		{ratio(1.5, 0.75), "0.5x"},
		{ratio(0, 2.5), "-"},
		{ratio(2.5, 0), "-"},
	} {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}

// wantRows are handReport's summary rows, worked out by hand.
var wantRows = [][]string{
	{"minbase", "pull", "40 ms", "2.50 s", "62.5x"},
	{"minbase", "run echo hello", "110 ms", "400 ms", "3.6x"},
	{"minbase", "pull + run", "150 ms", "2.50 s", "16.7x"},
	{"minbase", "bytes moved for pull + run", "6.0 MB (6.0% of 100.0 MB)", "40.0 MB (gzip)", "6.7x"},
	{"minbase", "read every file, cold", "1.50 s", "750 ms", "0.5x"},
	{"minbase", "slackerd peak RSS", "50.0 MB", "-", "-"},
	{"append16", "1-byte append to a 16 MiB file, cold (open+write)", "0.07 ms", "25 ms", "357.1x"},
	{"append16", "same, with fsync", "-", "30 ms", "-"},
}

func TestWriteMarkdown(t *testing.T) {
	var b bytes.Buffer
	handReport().WriteMarkdown(&b)
	want := "Measured 2026-11-22 on AMD EPYC (2 CPUs, 24684084 kB, kernel 6.18.44), commit ff0ed5c, 3 cold runs per cell.\n\n" +
		"| image | measure (median) | Slacker | containerd + overlayfs | speedup |\n" +
		"| --- | --- | --- | --- | --- |\n"
	for _, r := range wantRows {
		want += "| " + strings.Join(r, " | ") + " |\n"
	}
	want += "\nFailed runs: overlayfs pull big: boom; slacker cold start: no\n"
	if b.String() != want {
		t.Errorf("markdown:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestWriteTable(t *testing.T) {
	var b bytes.Buffer
	handReport().WriteTable(&b)
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 1+len(wantRows)+2 {
		t.Fatalf("%d lines:\n%s", len(lines), b.String())
	}
	cells := regexp.MustCompile(`\s{2,}`)
	if got := cells.Split(strings.TrimSpace(lines[0]), -1); strings.Join(got, "|") != "IMAGE|MEASURE (median of 3)|SLACKER|CONTAINERD+OVERLAYFS|SPEEDUP" {
		t.Errorf("header %q", got)
	}
	for i, want := range wantRows {
		if got := cells.Split(strings.TrimSpace(lines[1+i]), -1); strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("row %d: %q, want %q", i, got, want)
		}
	}
	// Columns line up: every row's second cell starts where the header's does.
	col := strings.Index(lines[0], "MEASURE")
	for _, l := range lines[1 : 1+len(wantRows)] {
		if l[col-2:col] != "  " || l[col] == ' ' {
			t.Errorf("misaligned row %q (column at %d)", l, col)
		}
	}
	if lines[len(lines)-2] != "FAILED: overlayfs pull big: boom" || lines[len(lines)-1] != "FAILED: slacker cold start: no" {
		t.Errorf("failures: %q", lines[len(lines)-2:])
	}
}

// TestCommittedResults: the core benchmark's JSON in docs/bench still reads and
// renders the figures docs/BENCHMARKS.md quotes from it.
func TestCommittedResults(t *testing.T) {
	for _, tt := range []struct {
		file string
		rows []string
	}{
		{"core-2026-11-22b.json", []string{
			"| minbase | pull + run | 163 ms | 2.57 s | 15.7x |",
			"| minbase | bytes moved for pull + run | 5.7 MB (4.7% of 121.4 MB) | 51.1 MB (gzip) | 8.9x |",
			"| big | pull + run | 167 ms | 9.99 s | 59.7x |",
			"| append16 | 1-byte append after a stat (copy-on-write alone) | 0.07 ms | 25 ms | 360.0x |",
		}},
		{"core-2026-11-22.json", []string{"| minbase | pull + run |", "17.8x |", "| big | pull + run |", "56.3x |"}},
	} {
		var r Report
		if err := rig.ReadJSON("../../docs/bench/"+tt.file, &r); err != nil {
			t.Fatal(err)
		}
		if r.Runs != 5 || len(r.Images) != 2 || len(r.Samples) == 0 || r.Machine.CPUs != 2 || r.Commit == "" {
			t.Errorf("%s: runs %d, %d images, %d samples, machine %+v, commit %q", tt.file, r.Runs, len(r.Images), len(r.Samples), r.Machine, r.Commit)
		}
		var b bytes.Buffer
		r.WriteMarkdown(&b)
		for _, row := range tt.rows {
			if !strings.Contains(b.String(), row) {
				t.Errorf("%s: the summary lacks %q:\n%s", tt.file, row, b.String())
			}
		}
	}
}
