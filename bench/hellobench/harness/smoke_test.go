package harness_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slacker-dev/slacker/bench/hellobench/harness"
	"github.com/slacker-dev/slacker/bench/hellobench/report"
	"github.com/slacker-dev/slacker/internal/testenv"
	"github.com/slacker-dev/slacker/internal/testutil"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// smokeWorkloads is one tiny workload: busybox-static on an empty base (the
// corpus downloads the one package with apt, no debootstrap), run to exit 0.
const smokeWorkloads = `
[[workload]]
name = "busybox"
category = "distro"
base = "scratch"
layers = [["busybox-static"]]
files = { "/etc/motd" = "hellobench smoke\n" }
cmd = ["/bin/busybox", "cat", "/etc/motd"]
ready = { exit = 0 }
timeout_s = 60
`

// TestSmoke runs the real harness end to end on one tiny workload: corpus build,
// a registry, containerd + overlayfs and Slacker (slackerd and the CLI built for the
// test), results.json and the report; then checks that both systems ran the
// workload to the same output and that nothing the run started is left: mounts,
// loop devices, network namespaces, processes. On loopback it runs both cycles;
// behind an emulated 1 Gbit/s link (registry and Slacker's chunks across it), the
// deployment cycle, with Slacker through containerd and stargz beside, every image
// optimized (stargz's from a recorded run).
func TestSmoke(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "apt-get", "dpkg-deb", "umoci", "docker-registry", "containerd", "ctr", "runc", "skopeo", "ip")
	testutil.RequireFile(t, "/dev/fuse")
	testutil.RequireFile(t, "/dev/loop-control")
	testutil.RequireFile(t, "/dev/net/tun")
	slacker, slackerd := testenv.Binaries(t)
	tmp := t.TempDir()
	wl := filepath.Join(tmp, "workloads.toml")
	if err := os.WriteFile(wl, []byte(smokeWorkloads), 0o644); err != nil {
		t.Fatal(err)
	}
	corpusDir := filepath.Join(tmp, "corpus") // built by the first case, reused

	for _, tc := range []struct {
		profile string
		cycles  []string
		// optimize: warm up, then lay the Slacker images out for start-up and
		// publish them again (the store behind the link compresses its chunks).
		optimize bool
		systems  []string
	}{
		{"loopback", []string{harness.Deployment, harness.Development}, false, []string{"overlayfs", "slacker"}},
		{"1gbit", []string{harness.Deployment}, true, []string{"overlayfs", "slacker", "slacker-containerd", "stargz"}},
	} {
		t.Run(tc.profile, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
			defer cancel()
			dir, out := filepath.Join(tmp, "w-"+tc.profile), filepath.Join(tmp, "out-"+tc.profile)
			t.Cleanup(func() { leftBehind(t, dir) })
			var progress bytes.Buffer
			res, err := harness.Run(ctx, harness.Options{
				WorkloadsFile: wl, Systems: tc.systems, Profile: tc.profile, Runs: 1, Cycles: tc.cycles,
				Dir: dir, CorpusDir: corpusDir, Slacker: slacker, Slackerd: slackerd, Stargz: testenv.StargzBinary(t),
				Results: filepath.Join(out, "results.json"), Seed: 7, Progress: &progress,
				Warmup: tc.optimize, Optimize: tc.optimize,
			})
			if err != nil {
				t.Fatalf("harness: %v\n%s", err, progress.String())
			}
			t.Logf("harness:\n%s", progress.String())
			leftBehind(t, dir)

			// One sample per system and cycle, all ready by the rule, the same output.
			want := map[string]bool{}
			for _, sys := range tc.systems {
				for _, c := range tc.cycles {
					want[sys+"/"+c] = true
				}
			}
			if len(res.Samples) != len(want) {
				t.Fatalf("%d samples, want %d", len(res.Samples), len(want))
			}
			for _, s := range res.Samples {
				if !want[s.System+"/"+s.Cycle] {
					t.Errorf("unexpected or repeated sample %s %s", s.System, s.Cycle)
				}
				delete(want, s.System+"/"+s.Cycle)
				if !s.OK {
					t.Errorf("%s %s failed at %s: %s", s.System, s.Cycle, s.Stage, s.Failure)
					continue
				}
				if s.Ready != "exit 0" || s.ExitCode == nil || *s.ExitCode != 0 || s.Output != "hellobench smoke\n" {
					t.Errorf("%s %s: ready %q, exit %v, output %q", s.System, s.Cycle, s.Ready, s.ExitCode, s.Output)
				}
				if s.Pull <= 0 || s.RunTime <= 0 || s.Total < s.Pull+s.RunTime {
					t.Errorf("%s %s: times pull %v run %v total %v", s.System, s.Cycle, s.Pull, s.RunTime, s.Total)
				}
				if s.Fetched() <= 0 {
					t.Errorf("%s %s: moved no bytes", s.System, s.Cycle)
				}
				if tc.profile != "loopback" && s.LinkBytes <= 0 {
					t.Errorf("%s %s: nothing crossed the link", s.System, s.Cycle)
				}
				if s.Cycle == harness.Development && (s.Push <= 0 || s.PushBytes <= 0) {
					t.Errorf("%s development: push %v s, %d bytes", s.System, s.Push, s.PushBytes)
				}
				if s.System == "slacker" && s.ReadBytes <= 0 {
					t.Errorf("slacker %s: read %d bytes of the image", s.Cycle, s.ReadBytes)
				}
				// Without a warm-up a deployment is a first run, whether or not the
				// development cycle (whose change container runs on the publishing
				// node) came before it; after one, it replays the warm-up's trace.
				if s.System == "slacker" && s.Cycle == harness.Deployment {
					switch {
					case s.TracesReplayed == nil:
						t.Errorf("slacker deployment: the sample does not say whether it replayed a trace")
					case !tc.optimize && *s.TracesReplayed != 0:
						t.Errorf("slacker deployment without a warm-up replayed %d traces", *s.TracesReplayed)
					case tc.optimize && *s.TracesReplayed == 0:
						t.Errorf("slacker deployment after the warm-up replayed no trace")
					}
				}
			}
			published, optimized := 0, 0
			for _, p := range res.Publish {
				switch {
				case !p.OK:
					t.Errorf("publish %+v failed", p)
				case p.Optimize && p.System == "stargz" && (p.RecordedFiles == 0 || p.RecordNote != ""):
					t.Errorf("stargz optimize: a recorded run that read %d files, note %q", p.RecordedFiles, p.RecordNote)
				case p.Optimize && p.System != "stargz" && (p.System == "overlayfs" || p.Layout == nil || p.Layout.ReadBytes <= 0 || p.Layout.FetchAfter > p.Layout.FetchBefore):
					t.Errorf("optimize: %+v, layout %+v", p, p.Layout)
				case p.Optimize:
					optimized++
				default:
					published++
				}
			}
			if published != len(tc.systems) || optimized != map[bool]int{true: len(tc.systems) - 1}[tc.optimize] {
				t.Errorf("publish: %+v", res.Publish)
			}
			if fp := res.Footprint.Store("slacker"); fp == nil || fp.Objects == 0 || fp.ContentBytes <= 0 ||
				(tc.profile != "loopback" && (fp.Compressed == 0 || fp.StoredBytes >= fp.ContentBytes)) {
				t.Errorf("footprint %+v: want the store's objects, compressed behind the link", res.Footprint)
			}

			// results.json, rewritten after every sample, has everything; the report
			// renders it.
			back, err := harness.ReadResults(filepath.Join(out, "results.json"))
			if err != nil {
				t.Fatal(err)
			}
			if len(back.Samples) != len(res.Samples) || len(back.Systems) != len(tc.systems) || back.Systems[0].Name != "overlayfs" ||
				back.Systems[1].Name != "slacker" || len(back.Workloads) != 1 || back.Workloads[0].Layers != 2 ||
				back.Profile.Name != tc.profile || back.Profile.Registry == "" {
				t.Fatalf("results.json: %d samples, systems %+v, workloads %+v, profile %+v", len(back.Samples), back.Systems, back.Workloads, back.Profile)
			}
			if tc.profile != "loopback" && (back.Profile.RateBits != 1e9 || !back.Profile.StoreRemote || len(back.Notes) > 0) {
				t.Errorf("profile %+v, notes %q: want 1 Gbit/s with Slacker's store across the link", back.Profile, back.Notes)
			}
			if err := report.Write(out, []*harness.Results{back}); err != nil {
				t.Fatal(err)
			}
			page, err := os.ReadFile(filepath.Join(out, "index.html"))
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{fmt.Sprintf(`<img src="%s-speedup.svg"`, tc.profile), "<h3>slacker against overlayfs</h3>",
				"No failed runs.", "printed the same standard output on every system"} {
				if !bytes.Contains(page, []byte(want)) {
					t.Errorf("index.html lacks %q", want)
				}
			}
		})
	}
}

// leftBehind fails t if anything under dir is still mounted or backs a loop device,
// if a process still runs with dir in its command line, or if this process still
// has an emulated link's network namespace.
func leftBehind(t *testing.T, dir string) {
	t.Helper()
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil && bytes.Contains(b, []byte(dir)) {
		t.Errorf("mounts left under %s:\n%s", dir, grepLines(string(b), dir))
	}
	if b, err := exec.Command("losetup", "-a").Output(); err == nil && bytes.Contains(b, []byte(dir)) {
		t.Errorf("loop devices left on files under %s:\n%s", dir, grepLines(string(b), dir))
	}
	if _, err := os.Stat(fmt.Sprintf("/run/netns/slacker-hb-%d", os.Getpid())); err == nil {
		t.Errorf("network namespace slacker-hb-%d left", os.Getpid())
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(cmd, []byte(dir)) {
			t.Errorf("process %d left: %s", pid, bytes.ReplaceAll(cmd, []byte{0}, []byte{' '}))
		}
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
