package rig_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/slacker-dev/slacker/bench/rig"
	"github.com/slacker-dev/slacker/internal/testenv"
	"github.com/slacker-dev/slacker/internal/testenv/services"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// BenchmarkColdPullRun compares, side by side and in shuffled order, a cold pull +
// `echo hello` of the Debian minbase image through the slacker CLI, through
// containerd with the Slacker snapshotter, and through containerd with overlayfs.
// Each iteration is one cold sample of every system; the medians are reported.
// Run: go test -run XXX -bench ColdPullRun -benchtime 5x ./bench/rig/
// (work in SLACKER_BENCH_DIR, default /var/tmp/slacker-bench/containerd-slacker).
func BenchmarkColdPullRun(b *testing.B) {
	layout := testenv.DebianOCI(b)
	slacker, slackerd := testenv.Binaries(b)
	ctx := context.Background()
	dir := os.Getenv("SLACKER_BENCH_DIR")
	if dir == "" {
		dir = "/var/tmp/slacker-bench/containerd-slacker"
	}
	os.RemoveAll(dir)
	b.Cleanup(func() { os.RemoveAll(dir) })
	reg, err := services.StartRegistry(ctx, services.RegistryOptions{Dir: filepath.Join(dir, "registry")})
	if err != nil {
		b.Fatal(err)
	}
	defer reg.Stop()
	sl, err := rig.NewSlacker(rig.SlackerOptions{Dir: filepath.Join(dir, "sl"), Slacker: slacker, Slackerd: slackerd})
	if err != nil {
		b.Fatal(err)
	}
	cs, err := rig.NewContainerdSlacker(rig.SlackerOptions{Dir: filepath.Join(dir, "cs"), Slacker: slacker, Slackerd: slackerd}, filepath.Join(dir, "c1"), testenv.StargzBinary(b))
	if err != nil {
		b.Fatal(err)
	}
	ov, err := rig.NewContainerd(rig.ContainerdOptions{Dir: filepath.Join(dir, "c2")})
	if err != nil {
		b.Fatal(err)
	}
	systems := []rig.System{sl, cs, ov}
	defer func() {
		for _, s := range systems {
			s.Close()
		}
	}()
	img := rig.Image{Name: "minbase", Layout: layout, Tag: "bookworm"}
	refs := map[string]string{}
	for _, s := range systems {
		if refs[s.Name()], _, err = s.Publish(ctx, img, reg.Addr); err != nil {
			b.Fatalf("publish with %s: %v", s.Name(), err)
		}
	}
	samples := map[string]map[string][]float64{} // system -> metric -> seconds
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		order := append([]rig.System(nil), systems...)
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, s := range order {
			b.StopTimer()
			if err := s.Cold(ctx); err != nil {
				b.Fatalf("%s cold: %v", s.Name(), err)
			}
			b.StartTimer()
			pull, err := s.Pull(ctx, refs[s.Name()])
			if err != nil {
				b.Fatalf("%s pull: %v", s.Name(), err)
			}
			res, err := s.Run(ctx, refs[s.Name()], []string{"echo", "hello"}, nil)
			if err != nil || res.ExitCode != 0 || res.Stdout != "hello\n" {
				b.Fatalf("%s run: %v exit %d %q %s", s.Name(), err, res.ExitCode, res.Stdout, res.Stderr)
			}
			fetched, _ := s.FetchedBytes(ctx)
			m := samples[s.Name()]
			if m == nil {
				m = map[string][]float64{}
				samples[s.Name()] = m
			}
			m["pull"] = append(m["pull"], pull.Seconds())
			m["run"] = append(m["run"], res.Took.Seconds())
			m["pull+run"] = append(m["pull+run"], (pull + res.Took).Seconds())
			m["fetched_MB"] = append(m["fetched_MB"], float64(fetched)/1e6)
		}
	}
	b.StopTimer()
	med := func(xs []float64) float64 {
		s := append([]float64(nil), xs...)
		sort.Float64s(s)
		return s[len(s)/2]
	}
	for _, s := range systems {
		for _, metric := range []string{"pull", "run", "pull+run"} {
			b.ReportMetric(med(samples[s.Name()][metric])*1000, fmt.Sprintf("%s_%s_ms", s.Name(), metric))
		}
		b.ReportMetric(med(samples[s.Name()]["fetched_MB"]), s.Name()+"_fetched_MB")
	}
	ovr := med(samples["overlayfs"]["pull+run"])
	b.Logf("pull+run speedup over containerd+overlayfs (medians of %d): slacker CLI %.1fx, containerd+slacker snapshotter %.1fx",
		b.N, ovr/med(samples["slacker"]["pull+run"]), ovr/med(samples[rig.SlackerContainerdName]["pull+run"]))
}
