package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	cri "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/slacker-dev/slacker/bench/corpus"
	"github.com/slacker-dev/slacker/bench/e2ebench"
	"github.com/slacker-dev/slacker/bench/rig"
	"github.com/slacker-dev/slacker/internal/api"
	"github.com/slacker-dev/slacker/internal/testenv"
	"github.com/slacker-dev/slacker/internal/testenv/services"
	"github.com/slacker-dev/slacker/internal/testutil"
)

// BenchmarkDeployAttached measures deployment through containerd's CRI service,
// as the kubelet pulls (PullImage), then `ctr run` of `echo hello` on the image
// CRI pulled, of the core benchmark's images three ways, from a cold node each
// time, in one run and in shuffled order:
//
//   - ordinary-name: the ordinary image's name, its Slacker descriptor attached to
//     it (`slacker push --attach`), on containerd with the Slacker snapshotter;
//   - slacker-name: the same image under its dedicated Slacker name (`slacker
//     push`), on the same containerd;
//   - overlayfs: the ordinary name on stock containerd (overlayfs), for reference.
//
// It asserts nothing; it prints a table and, with SLACKER_BENCH_RESULTS=FILE,
// writes every sample as JSON (e2ebench.AttachedResults). Run it with
//
//	go test -run '^$' -bench BenchmarkDeployAttached -benchtime 1x -timeout 2h ./internal/e2e/
//
// Environment: SLACKER_BENCH_IMAGES (minbase,big), SLACKER_BENCH_RUNS (5),
// SLACKER_BENCH_CORPUS (the corpus of `slacker-bench core`,
// /var/lib/slacker-bench/corpus), SLACKER_BENCH_DIR (work directory, removed after;
// /var/tmp/slacker-attached/bench).
func BenchmarkDeployAttached(b *testing.B) {
	testutil.RequireTool(b, "runc", "docker-registry", "containerd", "ctr", "skopeo")
	images := strings.Split(envOr("SLACKER_BENCH_IMAGES", "minbase,big"), ",")
	runs, _ := strconv.Atoi(envOr("SLACKER_BENCH_RUNS", "5"))
	work := envOr("SLACKER_BENCH_DIR", "/var/tmp/slacker-attached/bench")
	ctx := context.Background()
	if err := os.RemoveAll(work); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(work) })
	imgs := buildCoreImages(b, images)
	reg, err := services.StartRegistry(ctx, services.RegistryOptions{Dir: filepath.Join(work, "registry")})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { reg.Stop() })
	store := filepath.Join(work, "store")

	// What a CI pipeline publishes: the ordinary image, converted from the registry,
	// its descriptor attached to it and pushed under a name of its own as well.
	refs := map[string]map[string]string{e2ebench.AttachedOrdinary: {}, e2ebench.AttachedSlacker: {}, e2ebench.AttachedStock: {}}
	pub := testenv.StartProcess(b, filepath.Join(work, "publisher"), store)
	mustCLI := func(args ...string) {
		if _, errOut, code := pub.CLI(b, append([]string{"--insecure-registry"}, args...)...); code != 0 {
			b.Fatalf("slacker %s: exit %d: %s", strings.Join(args, " "), code, errOut)
		}
	}
	for _, name := range images {
		img := imgs[name]
		ordinary := reg.Addr + "/app/" + name + ":v1"
		testenv.Run(b, "skopeo", "copy", "--quiet", "--dest-tls-verify=false", "oci:"+img.Layout+":"+img.Tag, "docker://"+ordinary)
		mustCLI("convert", "-q", ordinary, name+":v1")
		mustCLI("push", "--attach", name+":v1", ordinary)
		dedicated := reg.Addr + "/slacker/" + name + ":v1"
		mustCLI("push", name+":v1", dedicated)
		refs[e2ebench.AttachedOrdinary][name], refs[e2ebench.AttachedStock][name] = ordinary, ordinary
		refs[e2ebench.AttachedSlacker][name] = dedicated
	}
	pub.Stop()

	results := &e2ebench.AttachedResults{Runs: runs, Images: images}
	add := func(sys, img, metric string, v float64, run int) {
		results.Samples = append(results.Samples, e2ebench.StoresSample{System: sys, Image: img, Metric: metric, Value: v, Run: run})
	}
	systems := []string{e2ebench.AttachedOrdinary, e2ebench.AttachedSlacker, e2ebench.AttachedStock}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 15))
	sample := 0
	for run := 1; run <= runs; run++ {
		for _, name := range images {
			order := slices.Clone(systems)
			rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			for _, sys := range order {
				sample++
				d := deployThroughCRI(b, filepath.Join(work, "node"), store, reg.Addr, sys, refs[sys][name], sample)
				fetched := d.fetched
				if sys == e2ebench.AttachedStock {
					fetched = imgs[name].CompressedBytes // containerd downloads every layer
				}
				add(sys, name, e2ebench.StoresPull, d.pull.Seconds(), run)
				add(sys, name, e2ebench.StoresRun, d.run.Seconds(), run)
				add(sys, name, e2ebench.StoresPullRun, (d.pull + d.run).Seconds(), run)
				add(sys, name, e2ebench.StoresFetched, float64(fetched), run)
				fmt.Fprintf(os.Stderr, "run %d %-13s %-8s pull %.3fs run %.3fs moved %s\n", run, sys, name,
					d.pull.Seconds(), d.run.Seconds(), corpus.HumanBytes(fetched))
			}
		}
	}
	var table strings.Builder
	fmt.Fprintf(&table, "| image | name, system | pull | run echo hello | pull + run | vs the Slacker name | moved |\n| --- | --- | --- | --- | --- | --- | --- |\n")
	for _, name := range images {
		ref := results.Median(e2ebench.AttachedSlacker, name, e2ebench.StoresPullRun)
		for _, sys := range systems {
			pr := results.Median(sys, name, e2ebench.StoresPullRun)
			fmt.Fprintf(&table, "| %s | %s | %.0f ms | %.0f ms | %.0f ms | %.2fx | %s |\n", name, sys,
				1000*results.Median(sys, name, e2ebench.StoresPull), 1000*results.Median(sys, name, e2ebench.StoresRun), 1000*pr, pr/ref,
				corpus.HumanBytes(int64(results.Median(sys, name, e2ebench.StoresFetched))))
		}
	}
	reportDeploy(b, results, table.String())
}

// deployment is one cold deployment's measurements.
type deployment struct {
	pull, run time.Duration
	fetched   int64 // what slackerd moved from the store (0 on overlayfs)
}

// deployThroughCRI deploys ref on a cold node: the page cache dropped, a fresh
// slackerd on store (for the Slacker systems) and a fresh containerd with CRI on
// the system's snapshotter; CRI pulls ref, then ctr runs `echo hello` on it in
// CRI's namespace. Everything is stopped and removed after.
func deployThroughCRI(b *testing.B, dir, store, registry, sys, ref string, sample int) deployment {
	b.Helper()
	ctx := context.Background()
	if err := os.RemoveAll(dir); err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	snapshotter := "slacker"
	var node *testenv.Process
	opts := services.ContainerdOptions{Dir: filepath.Join(dir, "containerd")}
	if sys == e2ebench.AttachedStock {
		snapshotter = "overlayfs"
	} else {
		node = testenv.StartProcess(b, filepath.Join(dir, "slackerd"), store)
		defer node.Stop()
		opts.ProxySnapshotters = map[string]string{"slacker": filepath.Join(node.Root, "snapshotter.sock")}
	}
	// No pod runs here: the sandbox image is never pulled.
	opts.CRI = &services.CRIOptions{Snapshotter: snapshotter, SandboxImage: registry + "/unused/pause:none", PlainHTTP: []string{registry}}
	if err := rig.DropCaches(); err != nil {
		b.Fatal(err)
	}
	c, err := services.StartContainerd(ctx, opts)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Stop()
	_, is := criClients(b, c.Socket)
	var before int64
	if node != nil {
		before = fetchedOf(b, node)
	}
	start := time.Now()
	if _, err := is.PullImage(ctx, &cri.PullImageRequest{Image: &cri.ImageSpec{Image: ref}}); err != nil {
		b.Fatalf("%s: CRI PullImage %s: %v", sys, ref, err)
	}
	var d deployment
	d.pull = time.Since(start)
	start = time.Now()
	out, err := c.Ctr(ctx, "-n", "k8s.io", "run", "--rm", "--snapshotter", snapshotter, ref, fmt.Sprintf("deploy-%d", sample), "echo", "hello")
	d.run = time.Since(start)
	if err != nil || out != "hello\n" {
		b.Fatalf("%s: ctr run %s: %q %v", sys, ref, out, err)
	}
	if node != nil {
		d.fetched = fetchedOf(b, node) - before
		if sys == e2ebench.AttachedOrdinary && !strings.Contains(node.Log(), `"via":"attached"`) {
			b.Fatalf("%s: the pull of %s did not take the attached descriptor:\n%s", sys, ref, tailString(node.Log(), 3000))
		}
	}
	return d
}

// fetchedOf is what the node has moved from its store.
func fetchedOf(b *testing.B, p *testenv.Process) int64 {
	st, err := api.NewClient(p.Socket).Stats(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	return st.Fetch.FetchedBytes
}
