package cli

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/slacker-dev/slacker/bench/hellobench/harness"
)

func TestSplitList(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"overlayfs,slacker", []string{"overlayfs", "slacker"}},
		{" overlayfs , slacker ,", []string{"overlayfs", "slacker"}},
		{"", nil},
		{",,", nil},
		{"stargz=/run/s.sock", []string{"stargz=/run/s.sock"}},
	}
	for _, tt := range tests {
		if got := splitList(tt.in); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("splitList(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestHelloErrors: bad options are refused by `slacker-bench hello` with the harness's
// message, before anything is started or emptied.
func TestHelloErrors(t *testing.T) {
	tmp := t.TempDir()
	wl := filepath.Join(tmp, "w.toml")
	doc := "[[workload]]\nname = \"mine\"\ncategory = \"other\"\nbase = \"minbase\"\ncmd = [\"true\"]\nready = { exit = 0 }\ntimeout_s = 10\n"
	if err := os.WriteFile(wl, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(tmp, "work")
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "keep"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	common := []string{"hello", "--workloads", wl, "--dir", work, "--corpus", filepath.Join(tmp, "corpus"),
		"--slacker", "/bin/true", "--slackerd", "/bin/true", "--out", filepath.Join(tmp, "out")}
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"hello"}, "--workloads FILE is required"},
		{append(common, "--profile", "10gbps"), `unknown profile "10gbps"`},
		{append(common, "--profile", "0mbit"), "the rate must be"},
		{append(common, "--systems", "overlayfs,zfs"), `unknown system "zfs"`},
		{append(common, "--systems", "Stargz=/run/s.sock"), "not a usable snapshotter name"},
		{append(common, "--systems", ""), "no systems given"},
		{append(common, "--cycles", "deployment,deploy"), `unknown cycle "deploy"`},
		{append(common, "--only", "nginx"), `no workload named "nginx"`},
		{append(common, "--quick"), "none of the quick workloads"}, // mine is not one
		{append(common, "--dir", tmp), "holds the corpus"},
		{append(common, "--dir", tmp, "--corpus", "/nonexistent-corpus"), "holds the workloads file"},
	}
	// Under a cancelled context, so that options wrongly accepted fail fast
	// instead of starting a real run (the work directory check still sees it).
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tt := range tests {
		cmd := NewCommand()
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		cmd.SetArgs(tt.args)
		err := cmd.ExecuteContext(ctx)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: error %v, want %q", tt.args[1:], err, tt.want)
		}
	}
	if _, err := os.Stat(filepath.Join(work, "keep")); err != nil {
		t.Errorf("the work directory was emptied: %v", err)
	}
	if _, err := os.Stat(filepath.Join(tmp, "out")); !os.IsNotExist(err) {
		t.Errorf("an output directory was made: %v", err)
	}
}

func testResults(profile string, rate int64) *harness.Results {
	return &harness.Results{Version: harness.ResultsVersion, Date: time.Date(2026, 11, 22, 5, 0, 0, 0, time.UTC), Runs: 1,
		Profile:   harness.Profile{Name: profile, RateBits: rate},
		Workloads: []harness.WorkloadInfo{{Name: "redis", Category: "database", CompressedBytes: 40e6, DataBytes: 100e6}},
		Systems:   []harness.SystemInfo{{Name: "overlayfs"}, {Name: "slacker"}},
		Samples: []harness.Sample{
			{Workload: "redis", Category: "database", System: "overlayfs", Cycle: harness.Deployment, OK: true, Pull: 4, RunTime: 1, Total: 5, RegistryBytes: 40e6, ReadBytes: -1},
			{Workload: "redis", Category: "database", System: "slacker", Cycle: harness.Deployment, OK: true, Pull: 0.2, RunTime: 0.3, Total: 0.5, StoreBytes: 5e6, ReadBytes: 2e6},
			{Workload: "redis", Category: "database", System: "slacker", Cycle: harness.Development, Stage: "push", Failure: "boom", ReadBytes: -1},
		}}
}

// TestReport: `slacker-bench report` reads the results.json files the harness writes
// (one per profile) and renders the page and the summaries.
func TestReport(t *testing.T) {
	tmp := t.TempDir()
	loop, link := filepath.Join(tmp, "loop", "results.json"), filepath.Join(tmp, "link", "results.json")
	if err := testResults("loopback", 0).WriteJSON(loop); err != nil {
		t.Fatal(err)
	}
	if err := testResults("1gbit", 1e9).WriteJSON(link); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(tmp, "report")
	stdout, _, err := run(t, "report", "--out", out, loop, link)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"slacker vs overlayfs, profile loopback: deployment 10.0x median",
		"slacker vs overlayfs, profile 1gbit: deployment 10.0x median",
		"1 of 2 samples failed (overlayfs: 0)",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("report output lacks %q:\n%s", want, stdout)
		}
	}
	page, err := os.ReadFile(filepath.Join(out, "index.html"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`<h2 id="loopback">`, `<h2 id="1gbit">`, `<img src="1gbit-speedup.svg"`, "Failed runs (1)"} {
		if !strings.Contains(string(page), want) {
			t.Errorf("index.html lacks %q", want)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "loopback-speedup.svg")); err != nil {
		t.Error(err)
	}

	stdout, _, err = run(t, "report", "--markdown", loop)
	if err != nil || !strings.Contains(stdout, "| loopback | slacker vs overlayfs | 10.0x (10.0x) | – (–) |") {
		t.Errorf("markdown: %v\n%s", err, stdout)
	}

	bad := filepath.Join(tmp, "bad.json")
	os.WriteFile(bad, []byte(`{"version": 99}`), 0o644)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"report"}, "requires at least 1 arg"},
		{[]string{"report", filepath.Join(tmp, "missing.json")}, "no such file"},
		{[]string{"report", loop, bad}, "results version 99"},
	} {
		if _, _, err := run(t, tt.args...); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: %v, want %q", tt.args, err, tt.want)
		}
	}
}
