package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slacker-dev/slacker/bench/corpus"
	"github.com/slacker-dev/slacker/bench/e2ebench"
	"github.com/slacker-dev/slacker/bench/rig"
	"github.com/slacker-dev/slacker/bench/workload"
	"github.com/slacker-dev/slacker/internal/faultproxy"
	"github.com/slacker-dev/slacker/internal/testenv"
	"github.com/slacker-dev/slacker/internal/testenv/services"
)

// BenchmarkDeployStores measures deployment (cold pull + run of `echo hello`) of
// the core benchmark's images with each chunk store side by side, in one run and
// in shuffled order: the local directory store, MinIO (S3), and the registry
// backend, each remote store on loopback and behind the fault proxy as a 1 Gbit/s
// link with a 1 ms round trip. It asserts nothing; it prints a table and, with
// SLACKER_BENCH_RESULTS=FILE, writes every sample as JSON. Run it with
//
//	go test -run '^$' -bench BenchmarkDeployStores -benchtime 1x -timeout 2h ./internal/e2e/
//
// Environment: SLACKER_BENCH_IMAGES (minbase,big), SLACKER_BENCH_RUNS (5),
// SLACKER_BENCH_CORPUS (the corpus of `slacker-bench core`,
// /var/lib/slacker-bench/corpus), SLACKER_BENCH_DIR (work directory, removed after;
// /var/tmp/slacker-stores/bench).
func BenchmarkDeployStores(b *testing.B) {
	images := strings.Split(envOr("SLACKER_BENCH_IMAGES", "minbase,big"), ",")
	runs, _ := strconv.Atoi(envOr("SLACKER_BENCH_RUNS", "5"))
	work := envOr("SLACKER_BENCH_DIR", "/var/tmp/slacker-stores/bench")
	ctx := context.Background()
	slacker, slackerd := testenv.Binaries(b)
	if err := os.RemoveAll(work); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(work) })
	imgs := buildCoreImages(b, images)

	names, err := services.StartRegistry(ctx, services.RegistryOptions{Dir: filepath.Join(work, "names")})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { names.Stop() })
	chunks, err := services.StartRegistry(ctx, services.RegistryOptions{Dir: filepath.Join(work, "chunks")})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { chunks.Stop() })
	minio, err := services.StartMinIO(ctx, services.MinIOOptions{Dir: filepath.Join(work, "minio")})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { minio.Stop() })
	link := func(target string) string {
		p, err := faultproxy.Start(faultproxy.Options{Target: target})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { p.Close() })
		p.SetBandwidth(125_000_000) // 1 Gbit/s, both ways
		p.SetLatency(time.Millisecond)
		return p.Addr()
	}
	s3At := func(addr string) string {
		return fmt.Sprintf("s3://%s:%s@%s/bench?insecure=1&create=1", minio.AccessKey, minio.SecretKey, addr)
	}
	type sys struct {
		name, store, publisher string // publisher: the system whose published refs it pulls
		s                      *rig.Slacker
	}
	systems := []*sys{
		{name: "local", store: filepath.Join(work, "local", "store")},
		{name: "s3", store: s3At(minio.Addr)},
		{name: "registry", store: "registry://" + chunks.Addr + "/slacker/chunks"},
		{name: "s3-1gbit", store: s3At(link(minio.Addr)), publisher: "s3"},
		{name: "registry-1gbit", store: "registry://" + link(chunks.Addr) + "/slacker/chunks", publisher: "registry"},
	}
	for _, s := range systems {
		s.s, err = rig.NewSlacker(rig.SlackerOptions{Dir: filepath.Join(work, s.name), Slacker: slacker, Slackerd: slackerd,
			DaemonArgs: []string{"--store=" + s.store}})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.s.Close() })
	}
	refs := map[string]map[string]string{}
	results := &e2ebench.StoresResults{Runs: runs, Images: images}
	add := func(sys, img, metric string, v float64, run int) {
		results.Samples = append(results.Samples, e2ebench.StoresSample{System: sys, Image: img, Metric: metric, Value: v, Run: run})
	}
	for _, s := range systems {
		if s.publisher != "" {
			continue
		}
		refs[s.name] = map[string]string{}
		for _, name := range images {
			start := time.Now()
			ref, _, err := s.s.Publish(ctx, imgs[name], names.Addr+"/"+s.name)
			if err != nil {
				b.Fatalf("publish %s with the %s store: %v", name, s.name, err)
			}
			refs[s.name][name] = ref
			add(s.name, name, e2ebench.StoresPublish, time.Since(start).Seconds(), 0)
			fmt.Fprintf(os.Stderr, "%s: converted and pushed %s in %.1fs\n", s.name, name, time.Since(start).Seconds())
		}
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 5))
	for run := 1; run <= runs; run++ {
		for _, name := range images {
			order := slices.Clone(systems)
			rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			for _, s := range order {
				pub := s.name
				if s.publisher != "" {
					pub = s.publisher
				}
				ref := refs[pub][name]
				if err := s.s.Cold(ctx); err != nil {
					b.Fatalf("%s cold: %v", s.name, err)
				}
				pull, err := s.s.Pull(ctx, ref)
				if err != nil {
					b.Fatalf("%s pull %s: %v", s.name, name, err)
				}
				res, err := s.s.Run(ctx, ref, []string{"echo", "hello"}, nil)
				if err != nil || res.ExitCode != 0 || res.Stdout != "hello\n" {
					b.Fatalf("%s run %s: exit %d, %q, %v %s", s.name, name, res.ExitCode, res.Stdout, err, res.Stderr)
				}
				fetched, _ := s.s.FetchedBytes(ctx)
				add(s.name, name, e2ebench.StoresPull, pull.Seconds(), run)
				add(s.name, name, e2ebench.StoresRun, res.Took.Seconds(), run)
				add(s.name, name, e2ebench.StoresPullRun, (pull + res.Took).Seconds(), run)
				add(s.name, name, e2ebench.StoresFetched, float64(fetched), run)
				fmt.Fprintf(os.Stderr, "run %d %-14s %-8s pull %.3fs run %.3fs fetched %s", run, s.name, name, pull.Seconds(), res.Took.Seconds(), corpus.HumanBytes(fetched))
				fmt.Fprintln(os.Stderr)
			}
		}
	}
	var table strings.Builder
	fmt.Fprintf(&table, "| image | store | pull | run echo hello | pull + run | vs local | fetched |\n| --- | --- | --- | --- | --- | --- | --- |\n")
	for _, name := range images {
		local := results.Median("local", name, e2ebench.StoresPullRun)
		for _, s := range systems {
			pr := results.Median(s.name, name, e2ebench.StoresPullRun)
			fmt.Fprintf(&table, "| %s | %s | %.0f ms | %.0f ms | %.0f ms | %.2fx | %s |\n", name, s.name,
				1000*results.Median(s.name, name, e2ebench.StoresPull), 1000*results.Median(s.name, name, e2ebench.StoresRun), 1000*pr, pr/local,
				corpus.HumanBytes(int64(results.Median(s.name, name, e2ebench.StoresFetched))))
		}
	}
	reportDeploy(b, results, table.String())
}

// reportDeploy prints the medians table of a deployment benchmark and, with
// SLACKER_BENCH_RESULTS=FILE, writes its results there as JSON.
func reportDeploy(b *testing.B, results *e2ebench.StoresResults, table string) {
	// Printed, not logged: go test cuts a benchmark's log short.
	fmt.Fprintf(os.Stderr, "medians of %d cold runs, %s, %d CPUs:\n%s", results.Runs, time.Now().UTC().Format("2006-01-02"), runtime.NumCPU(), table)
	if out := os.Getenv("SLACKER_BENCH_RESULTS"); out != "" {
		results.Date, results.Table = time.Now().UTC(), table
		data, _ := json.MarshalIndent(results, "", "  ")
		if err := os.WriteFile(out, data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// buildCoreImages builds (or finds in the corpus) the images of `slacker-bench
// core`, from its own workload file.
func buildCoreImages(b *testing.B, names []string) map[string]rig.Image {
	raw, err := os.ReadFile(filepath.Join("..", "..", "bench", "core", "workloads.toml"))
	if err != nil {
		b.Fatal(err)
	}
	set, err := workload.Parse(raw)
	if err != nil {
		b.Fatal(err)
	}
	c, err := corpus.Open(corpus.Options{Dir: envOr("SLACKER_BENCH_CORPUS", "/var/lib/slacker-bench/corpus"), Progress: os.Stderr})
	if err != nil {
		b.Fatal(err)
	}
	var ws []*workload.Workload
	for _, n := range names {
		w := set.Get("core-" + n)
		if w == nil {
			b.Fatalf("unknown image %q (have minbase, big)", n)
		}
		ws = append(ws, w)
	}
	rep, err := c.Build(context.Background(), ws)
	if err != nil {
		b.Fatal(err)
	}
	if f := rep.Failed(); len(f) > 0 {
		b.Fatalf("build %s: %v", f[0].Name, f[0].Err)
	}
	imgs := map[string]rig.Image{}
	for _, r := range rep.Results {
		short := strings.TrimPrefix(r.Name, "core-")
		imgs[short] = rig.Image{Name: "core-" + short, Layout: c.Layout.Dir, Tag: r.Name, DataBytes: r.Record.USize, CompressedBytes: r.Record.Size}
	}
	return imgs
}
