package harness

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func intp(v int) *int { return &v }

// fullResults sets every field, so a field that does not survive JSON shows.
func fullResults() *Results {
	start := time.Date(2026, 11, 22, 5, 0, 0, 123456789, time.UTC)
	return &Results{
		Version: ResultsVersion, Date: start, Commit: "abc1234-dirty",
		Machine: Machine{Hostname: "node", Kernel: "6.1.0", CPU: "Some CPU", CPUs: 2, Memory: "24 GiB", OS: "Debian 12"},
		Command: []string{"slacker", "bench", "hello", "--runs", "1"},
		Profile: Profile{Name: "1gbit", RateBits: 1e9, RTTMillis: 1.5, Registry: "10.213.1.2:5000",
			Store: "registry://10.213.1.2:5000/slacker/chunks", StoreRemote: true},
		Runs: 2, Seed: 1<<63 + 5, WorkloadsFile: "/work/shared/hellobench/workloads.toml",
		Workloads: []WorkloadInfo{{Name: "redis", Category: "database", Ready: "{ tcp = 6379 }", Timeout: 60, Layers: 3,
			CompressedBytes: 40 << 20, DataBytes: 120 << 20}},
		Systems: []SystemInfo{{Name: "overlayfs", Detail: "containerd"}, {Name: "slacker", Detail: "slackerd"}},
		Publish: []PublishSample{{Workload: "redis", System: "slacker", OK: true, Push: 0.2, Total: 3.5},
			{Workload: "redis", System: "overlayfs", OK: false, Failure: "skopeo: boom", Push: 0, Total: 0.1}},
		Samples: []Sample{
			{Workload: "redis", Category: "database", System: "slacker", Cycle: Development, Run: 1, Seq: 3, Start: start.Add(time.Minute),
				OK: true, Push: 0.25, PushParts: map[string]float64{"commit": 0.1, "push": 0.15}, PushBytes: 4096, PushLinkBytes: 9000,
				Pull: 0.1, RunTime: 0.4, Total: 0.75, Ready: "tcp 6379", RegistryBytes: 2000, StoreBytes: 3 << 20, LinkBytes: 4 << 20, ReadBytes: 2 << 20},
			{Workload: "redis", Category: "database", System: "overlayfs", Cycle: Deployment, Run: 2, Seq: 0, Start: start.Add(2 * time.Minute),
				OK: false, Stage: "ready", Failure: "exited with status 1 before it was ready", Pull: 2, RunTime: 0.3, Total: 2.3,
				ExitCode: intp(1), Output: "boom\n", RegistryBytes: 40 << 20, ReadBytes: -1},
		},
		Elapsed: 123.5, Interrupted: true, Notes: []string{"a note"},
	}
}

func TestResultsRoundTrip(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out", "results.json") // the directory is made
	r := fullResults()
	if err := r.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("temporary file left: %v", err)
	}
	back, err := ReadResults(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, r) {
		t.Fatalf("round trip changed the results:\n got %+v\nwant %+v", back, r)
	}
	if w := back.Workload("redis"); w == nil || w.Layers != 3 {
		t.Errorf("Workload(redis) = %+v", w)
	}
	if back.Workload("nginx") != nil {
		t.Error("Workload(nginx) found")
	}
	if got := back.Samples[0].Fetched(); got != 2000+3<<20 {
		t.Errorf("Fetched = %d", got)
	}

	// Rewritten in place (as after every sample), the file holds the new content.
	r.Samples = r.Samples[:1]
	r.Interrupted = false
	if err := r.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	if back, err = ReadResults(path); err != nil || len(back.Samples) != 1 || back.Interrupted {
		t.Fatalf("after rewrite: %v, %+v", err, back)
	}
}

// TestResultsFormat reads a results.json written by hand with the documented keys:
// renaming a key would make `slacker-bench report` misread older files.
func TestResultsFormat(t *testing.T) {
	const doc = `{"version": 1, "date": "2026-11-22T05:00:00Z", "commit": "c0ffee0",
 "machine": {"hostname": "h", "kernel": "k", "cpu": "c", "cpus": 2, "memory": "m", "os": "o"},
 "profile": {"name": "1gbit", "rate_bits": 1000000000, "rtt_ms": 1, "registry": "r:5000", "store": "s", "store_remote": true},
 "runs": 3, "seed": 9, "workloads_file": "w.toml",
 "workloads": [{"name": "redis", "category": "database", "ready": "{ tcp = 6379 }", "timeout_s": 60, "layers": 2, "compressed_bytes": 10, "data_bytes": 20}],
 "systems": [{"name": "overlayfs", "detail": "d"}],
 "publish": [{"workload": "redis", "system": "overlayfs", "ok": true, "push_s": 1.5, "total_s": 2}],
 "samples": [{"workload": "redis", "category": "database", "system": "overlayfs", "cycle": "development", "run": 1, "seq": 2,
   "start": "2026-11-22T05:01:00Z", "ok": true, "push_s": 0.5, "push_parts_s": {"push": 0.5}, "push_bytes": 7, "push_link_bytes": 8,
   "pull_s": 1, "run_s": 2, "total_s": 3.5, "ready": "tcp 6379", "exit_code": 0, "output": "o",
   "registry_bytes": 11, "store_bytes": 12, "link_bytes": 13, "read_bytes": -1}],
 "elapsed_s": 60, "interrupted": true, "notes": ["n"]}`
	path := filepath.Join(t.TempDir(), "results.json")
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := ReadResults(path)
	if err != nil {
		t.Fatal(err)
	}
	s := r.Samples[0]
	p := r.Profile
	w := r.Workloads[0]
	if r.Commit != "c0ffee0" || r.Machine.CPUs != 2 || r.Runs != 3 || r.Seed != 9 || r.Elapsed != 60 || !r.Interrupted || r.Notes[0] != "n" ||
		p.RateBits != 1e9 || p.RTTMillis != 1 || !p.StoreRemote || p.Store != "s" ||
		w.Timeout != 60 || w.Layers != 2 || w.CompressedBytes != 10 || w.DataBytes != 20 ||
		r.Publish[0].Push != 1.5 || r.Publish[0].Total != 2 ||
		s.Cycle != Development || s.Seq != 2 || s.Push != 0.5 || s.PushParts["push"] != 0.5 || s.PushBytes != 7 || s.PushLinkBytes != 8 ||
		s.Pull != 1 || s.RunTime != 2 || s.Total != 3.5 || s.ExitCode == nil || *s.ExitCode != 0 || s.Output != "o" ||
		s.RegistryBytes != 11 || s.StoreBytes != 12 || s.LinkBytes != 13 || s.ReadBytes != -1 {
		t.Fatalf("misread: %+v", r)
	}
}

func TestReadResultsErrors(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, content, err string
	}{
		{"future.json", `{"version": 2}`, "results version 2, this program reads 1"},
		{"none.json", `{"samples": []}`, "results version 0"},
		{"broken.json", `{"version": 1, "samples": [`, "broken.json"},
		{"wrongtype.json", `{"version": 1, "runs": "three"}`, "wrongtype.json"},
	}
	for _, tt := range tests {
		path := filepath.Join(dir, tt.name)
		if err := os.WriteFile(path, []byte(tt.content), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadResults(path); err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("%s: %v, want an error with %q", tt.name, err, tt.err)
		}
	}
	if _, err := ReadResults(filepath.Join(dir, "missing.json")); !os.IsNotExist(err) {
		t.Errorf("missing file: %v", err)
	}
}
