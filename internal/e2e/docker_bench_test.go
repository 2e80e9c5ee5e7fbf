package e2e

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/slacker-dev/slacker/bench/e2ebench"
	"github.com/slacker-dev/slacker/internal/api"
	"github.com/slacker-dev/slacker/internal/testenv"
	"github.com/slacker-dev/slacker/internal/testenv/services"
	"github.com/slacker-dev/slacker/internal/testutil"
)

var (
	dockerBenchRuns   = flag.Int("docker-bench-runs", 5, "BenchmarkDockerPullRun: samples per image and system")
	dockerBenchImages = flag.String("docker-bench-images", "minbase,corpus:java",
		"BenchmarkDockerPullRun: images: minbase (debootstrap --variant=minbase) and corpus:NAME (the HelloBench corpus at /var/tmp/slacker-bench/corpus)")
	dockerBenchOut = flag.String("docker-bench-out", "", "BenchmarkDockerPullRun: write every sample as JSON here")
)

// BenchmarkDockerPullRun compares, side by side in one run, `docker pull` then
// `docker run --rm echo hello` on a cold node: dockerd 20.10 with the slacker graph
// driver pulling an image pushed by slacker push, and dockerd with overlay2 pulling
// the same image as an ordinary OCI image, from one local registry. Each sample starts
// a fresh dockerd (and for Slacker a fresh slackerd node on the shared store) and drops
// the page cache; the order of the systems is shuffled per sample. Not a test: run it
// with
//
//	go test -run '^$' -bench DockerPullRun -benchtime 1x -timeout 60m ./internal/e2e \
//	    -docker-bench-runs 5 -docker-bench-out docker-bench.json
func BenchmarkDockerPullRun(b *testing.B) {
	testutil.RequireTool(b, "dockerd", "docker", "docker-registry", "skopeo", "umoci")
	ctx := context.Background()
	work, err := os.MkdirTemp("/var/tmp", "slacker-docker-bench-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(work)
	keepRunDocker(b)
	type img struct{ name, layout, tag string }
	var imgs []img
	for _, n := range strings.Split(*dockerBenchImages, ",") {
		switch {
		case n == "minbase":
			imgs = append(imgs, img{"minbase", testenv.DebianOCI(b), "bookworm"})
		case strings.HasPrefix(n, "corpus:"):
			layout := "/var/tmp/slacker-bench/corpus/oci"
			if _, err := os.Stat(filepath.Join(layout, "index.json")); err != nil {
				b.Fatalf("%s: no HelloBench corpus at %s (slacker-bench corpus build)", n, layout)
			}
			imgs = append(imgs, img{strings.TrimPrefix(n, "corpus:"), layout, strings.TrimPrefix(n, "corpus:")})
		default:
			b.Fatalf("unknown image %q", n)
		}
	}
	reg, err := services.StartRegistry(ctx, services.RegistryOptions{Dir: filepath.Join(work, "registry")})
	if err != nil {
		b.Fatal(err)
	}
	defer reg.Stop()
	store := filepath.Join(work, "store")

	// Publish: slacker convert + push for Slacker, skopeo copy of the same OCI image
	// for overlay2.
	pub := testenv.StartProcess(b, filepath.Join(work, "publisher"), store)
	for _, im := range imgs {
		src := "oci:" + im.layout + ":" + im.tag
		if out, errOut, code := pub.CLI(b, "convert", "-q", src, "bench/"+im.name); code != 0 {
			b.Fatalf("convert %s: %s %s", im.name, out, errOut)
		}
		if out, errOut, code := pub.CLI(b, "push", "bench/"+im.name, reg.Addr+"/slacker/"+im.name+":latest"); code != 0 {
			b.Fatalf("push %s: %s %s", im.name, out, errOut)
		}
		testenv.Run(b, "skopeo", "copy", "-q", "--dest-tls-verify=false", src, "docker://"+reg.Addr+"/plain/"+im.name+":latest")
	}
	pub.Stop()

	var samples []e2ebench.DockerSample
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 11))
	for run := 1; run <= *dockerBenchRuns; run++ {
		for _, im := range imgs {
			systems := []string{"slacker", "overlay2"}
			rng.Shuffle(len(systems), func(i, j int) { systems[i], systems[j] = systems[j], systems[i] })
			for _, sys := range systems {
				dir := filepath.Join(work, fmt.Sprintf("%s-%s-%d", sys, im.name, run))
				s := e2ebench.DockerSample{System: sys, Image: im.name, Run: run}
				var d *services.Dockerd
				var node *testenv.Process
				if sys == "slacker" {
					driver := fmt.Sprintf("slacker-bench-%d", os.Getpid())
					node = testenv.StartProcess(b, filepath.Join(dir, "node"), store,
						"--graphdriver-socket", filepath.Join(pluginDir, driver+".sock"), "--log-level", "info")
					d, err = services.StartDockerd(ctx, services.DockerdOptions{Dir: filepath.Join(dir, "d"), StorageDriver: driver,
						Experimental: true, InsecureRegistries: []string{reg.Addr}})
				} else {
					d, err = services.StartDockerd(ctx, services.DockerdOptions{Dir: filepath.Join(dir, "d"), InsecureRegistries: []string{reg.Addr}})
				}
				if err != nil {
					b.Fatal(err)
				}
				dropCaches(b)
				ref := reg.Addr + "/plain/" + im.name + ":latest"
				if sys == "slacker" {
					ref = reg.Addr + "/slacker/" + im.name + ":latest"
				}
				start := time.Now()
				if _, err := d.Docker(ctx, "pull", "-q", ref); err != nil {
					b.Fatal(err)
				}
				s.PullS = time.Since(start).Seconds()
				start = time.Now()
				out, err := d.Docker(ctx, "run", "--rm", "--network", "none", ref, "echo", "hello")
				if err != nil || out != "hello\n" {
					b.Fatalf("run: %q %v", out, err)
				}
				s.RunS = time.Since(start).Seconds()
				if node != nil {
					if st, err := api.NewClient(node.Socket).Stats(ctx); err == nil {
						s.Fetched = st.Fetch.FetchedBytes
					}
				}
				if err := d.Stop(); err != nil {
					b.Fatal(err)
				}
				if node != nil {
					node.Stop()
				}
				os.RemoveAll(dir)
				samples = append(samples, s)
				b.Logf("%s %s run %d: pull %.3fs run %.3fs fetched %d", sys, im.name, run, s.PullS, s.RunS, s.Fetched)
			}
		}
	}
	b.Log("\n" + dockerBenchTable(samples, imgs[0].name, func() []string {
		var ns []string
		for _, im := range imgs {
			ns = append(ns, im.name)
		}
		return ns
	}()))
	if *dockerBenchOut != "" {
		commit, _ := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
		rep := e2ebench.DockerResults{Date: time.Now().UTC(), Machine: machineInfo(), Commit: strings.TrimSpace(string(commit)),
			Runs: *dockerBenchRuns, Samples: samples}
		js, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(*dockerBenchOut, js, 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

func dropCaches(t testing.TB) {
	exec.Command("sync").Run()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0o200); err != nil {
		t.Logf("drop caches: %v", err)
	}
}

func median(xs []float64) float64 { return e2ebench.Median(xs) }

// dockerBenchTable is the markdown table of medians.
func dockerBenchTable(samples []e2ebench.DockerSample, _ string, images []string) string {
	r := &e2ebench.DockerResults{Samples: samples}
	var b strings.Builder
	b.WriteString("| image | measure (median) | slacker graph driver | overlay2 | speedup |\n| --- | --- | --- | --- | --- |\n")
	for _, im := range images {
		for _, m := range []struct {
			name string
			f    e2ebench.DockerMetric
		}{
			{"docker pull", e2ebench.DockerPull},
			{"docker run echo hello", e2ebench.DockerRun},
			{"pull + run", e2ebench.DockerPullRun},
		} {
			sl, ov := r.Median(e2ebench.DockerSlacker, im, m.f), r.Median(e2ebench.DockerOverlay2, im, m.f)
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %.1fx |\n", im, m.name, secs(sl), secs(ov), ov/sl)
		}
		fetched := r.Median(e2ebench.DockerSlacker, im, e2ebench.DockerFetched)
		fmt.Fprintf(&b, "| %s | bytes read from the store (Slacker) | %.1f MB | - | - |\n", im, fetched/1e6)
	}
	return b.String()
}

func secs(s float64) string {
	if s < 1 {
		return fmt.Sprintf("%.0f ms", s*1000)
	}
	return fmt.Sprintf("%.2f s", s)
}

func machineInfo() string {
	var u strings.Builder
	if out, err := exec.Command("uname", "-r").Output(); err == nil {
		u.WriteString("Linux " + strings.TrimSpace(string(out)))
	}
	fmt.Fprintf(&u, ", %d CPUs", runtime.NumCPU())
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				u.WriteString(", " + strings.TrimSpace(strings.SplitN(l, ":", 2)[1]))
				break
			}
		}
	}
	return u.String()
}
