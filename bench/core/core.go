package core

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/slacker-dev/slacker/bench/corpus"
	"github.com/slacker-dev/slacker/bench/rig"
	"github.com/slacker-dev/slacker/bench/workload"
	"github.com/slacker-dev/slacker/internal/testenv/services"
)

//go:embed workloads.toml
var workloadsTOML []byte

// Options configure a run.
type Options struct {
	Dir       string   // work directory (nodes, containerd, registry); emptied first
	CorpusDir string   // where images are built and cached
	Images    []string // "minbase", "big"
	Runs      int      // repetitions of each cold measurement
	Slacker   string   // binaries
	Slackerd  string
	// DaemonArgs are extra slackerd flags (e.g. --chunk-size 1MiB).
	DaemonArgs []string
	// Micro enables the append and sequential-read measurements.
	Micro    bool
	Progress io.Writer
	// Results, if set, receives the JSON report.
	Results string
}

// Sample is one measurement.
type Sample struct {
	System string  `json:"system"`
	Image  string  `json:"image"`
	Metric string  `json:"metric"`
	Value  float64 `json:"value"` // seconds or bytes, per Metric
	Run    int     `json:"run"`
}

// ImageInfo describes a benchmarked image.
type ImageInfo struct {
	Name            string `json:"name"`
	DataBytes       int64  `json:"data_bytes"`
	CompressedBytes int64  `json:"compressed_bytes"`
	Layers          int    `json:"layers"`
}

// Report is the outcome.
type Report struct {
	Date    time.Time   `json:"date"`
	Machine Machine     `json:"machine"`
	Commit  string      `json:"commit"`
	Runs    int         `json:"runs"`
	Images  []ImageInfo `json:"images"`
	Samples []Sample    `json:"samples"`
	Failed  []string    `json:"failed,omitempty"`
}

// Machine describes where it ran.
type Machine struct {
	Kernel string `json:"kernel"`
	CPU    string `json:"cpu"`
	CPUs   int    `json:"cpus"`
	Memory string `json:"memory"`
}

type bench struct {
	o        Options
	rep      *Report
	imgs     map[string]rig.Image
	refs     map[string]map[string]string // system -> image -> ref
	systems  []rig.System
	slacker  *rig.Slacker
	progress *rig.Progress
}

func (b *bench) printf(format string, args ...any) { b.progress.Printf(format, args...) }

func (b *bench) add(sys, img, metric string, v float64, run int) {
	b.rep.Samples = append(b.rep.Samples, Sample{System: sys, Image: img, Metric: metric, Value: v, Run: run})
}

func (b *bench) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	b.rep.Failed = append(b.rep.Failed, msg)
	b.printf("FAILED: %s", msg)
}

// Run runs the benchmark.
func Run(ctx context.Context, o Options) (*Report, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("slacker-bench core must run as root")
	}
	if o.Runs <= 0 {
		o.Runs = 3
	}
	if len(o.Images) == 0 {
		o.Images = []string{"minbase"}
	}
	rec := rig.NewRecord()
	b := &bench{o: o, rep: &Report{Date: rec.Date, Machine: machineOf(rec.Machine), Commit: rec.Commit, Runs: o.Runs},
		imgs: map[string]rig.Image{}, refs: map[string]map[string]string{}, progress: rig.NewProgress(o.Progress)}
	if err := os.RemoveAll(o.Dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	if err := b.buildImages(ctx); err != nil {
		return nil, err
	}
	reg, err := services.StartRegistry(ctx, services.RegistryOptions{Dir: filepath.Join(o.Dir, "registry")})
	if err != nil {
		return nil, err
	}
	defer reg.Stop()
	b.printf("registry at %s", reg.Addr)
	if b.slacker, err = rig.NewSlacker(rig.SlackerOptions{Dir: filepath.Join(o.Dir, "slacker"), Slacker: o.Slacker, Slackerd: o.Slackerd, DaemonArgs: o.DaemonArgs}); err != nil {
		return nil, err
	}
	ctrd, err := rig.NewContainerd(rig.ContainerdOptions{Dir: filepath.Join(o.Dir, "ctrd")})
	if err != nil {
		return nil, err
	}
	b.systems = []rig.System{b.slacker, ctrd}
	defer func() {
		for _, s := range b.systems {
			s.Close()
		}
	}()
	if err := b.publish(ctx, reg.Addr); err != nil {
		return nil, err
	}
	b.deploy(ctx)
	if o.Micro {
		b.appendTest(ctx)
		b.seqRead(ctx)
	}
	if o.Results != "" {
		if err := rig.WriteJSON(o.Results, b.rep); err != nil {
			return b.rep, err
		}
	}
	return b.rep, ctx.Err()
}

// buildImages builds the Debian images with the corpus builder, and the synthetic
// image holding one 16 MiB file for the append test.
func (b *bench) buildImages(ctx context.Context) error {
	set, err := workload.Parse(workloadsTOML)
	if err != nil {
		return err
	}
	c, err := corpus.Open(corpus.Options{Dir: b.o.CorpusDir, Progress: b.o.Progress})
	if err != nil {
		return err
	}
	var ws []*workload.Workload
	for _, name := range b.o.Images {
		w := set.Get("core-" + name)
		if w == nil {
			return fmt.Errorf("unknown image %q (have minbase, big)", name)
		}
		ws = append(ws, w)
	}
	b.printf("building images %v in %s (cached after the first time)", b.o.Images, b.o.CorpusDir)
	rep, err := c.Build(ctx, ws)
	if err != nil {
		return err
	}
	if f := rep.Failed(); len(f) > 0 {
		return fmt.Errorf("build %s: %v", f[0].Name, f[0].Err)
	}
	for _, r := range rep.Results {
		short := strings.TrimPrefix(r.Name, "core-")
		b.imgs[short] = rig.Image{Name: "core-" + short, Layout: c.Layout.Dir, Tag: r.Name,
			DataBytes: r.Record.USize, CompressedBytes: r.Record.Size}
		b.rep.Images = append(b.rep.Images, ImageInfo{Name: short, DataBytes: r.Record.USize, CompressedBytes: r.Record.Size, Layers: len(r.Record.Layers)})
	}
	if b.o.Micro {
		spec := corpus.SynthSpec{Files: 1, Size: 16 << 20, Layers: 1, Seed: 16, Name: "core-append16"}
		rec, err := c.Synth(ctx, spec)
		if err != nil {
			return err
		}
		b.imgs["append16"] = rig.Image{Name: "core-append16", Layout: c.Layout.Dir, Tag: rec.Name,
			DataBytes: rec.USize, CompressedBytes: rec.Size}
	}
	return nil
}

func (b *bench) publish(ctx context.Context, registry string) error {
	for _, s := range b.systems {
		b.refs[s.Name()] = map[string]string{}
		for _, name := range sortedKeys(b.imgs) {
			img := b.imgs[name]
			start := time.Now()
			ref, took, err := s.Publish(ctx, img, registry)
			if err != nil {
				return fmt.Errorf("publish %s with %s: %w", name, s.Name(), err)
			}
			b.refs[s.Name()][name] = ref
			b.add(s.Name(), name, "push_s", took.Seconds(), 0)
			b.add(s.Name(), name, "publish_total_s", time.Since(start).Seconds(), 0)
			b.printf("%s: published %s in %.2fs (push %.3fs)", s.Name(), name, time.Since(start).Seconds(), took.Seconds())
		}
	}
	return nil
}

// deploy measures cold pull and pull + run of echo hello.
func (b *bench) deploy(ctx context.Context) {
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	for run := 1; run <= b.o.Runs; run++ {
		for _, name := range b.o.Images {
			order := append([]rig.System(nil), b.systems...)
			rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			for _, s := range order {
				if ctx.Err() != nil {
					return
				}
				ref := b.refs[s.Name()][name]
				if err := s.Cold(ctx); err != nil {
					b.fail("%s cold start: %v", s.Name(), err)
					continue
				}
				pull, err := s.Pull(ctx, ref)
				if err != nil {
					b.fail("%s pull %s: %v", s.Name(), name, err)
					continue
				}
				res, err := s.Run(ctx, ref, []string{"echo", "hello"}, nil)
				if err != nil || res.ExitCode != 0 || res.Stdout != "hello\n" {
					b.fail("%s run %s: exit %d, %q, %v %s", s.Name(), name, res.ExitCode, res.Stdout, err, res.Stderr)
					continue
				}
				fetched, _ := s.FetchedBytes(ctx)
				b.add(s.Name(), name, "pull_s", pull.Seconds(), run)
				b.add(s.Name(), name, "run_s", res.Took.Seconds(), run)
				b.add(s.Name(), name, "pull_run_s", (pull + res.Took).Seconds(), run)
				b.add(s.Name(), name, "fetched_bytes", float64(fetched), run)
				if s == rig.System(b.slacker) {
					if rss, err := b.slacker.PeakRSS(ctx); err == nil {
						b.add(s.Name(), name, "peak_rss_bytes", float64(rss), run)
					}
				}
				b.printf("run %d %-9s %-8s pull %.3fs run %.3fs fetched %s", run, s.Name(), name, pull.Seconds(),
					res.Took.Seconds(), corpus.HumanBytes(fetched))
			}
		}
	}
}

// appendTest times a 1-byte append to the 16 MiB file of the synthetic image, on a
// cold node with the page cache dropped: once as a program would do it first
// (lookup included), once after a stat of the file (the copy-on-write alone).
func (b *bench) appendTest(ctx context.Context) {
	path := corpus.SynthPath(0)
	for run := 1; run <= b.o.Runs; run++ {
		for _, s := range b.systems {
			for _, afterStat := range []bool{false, true} {
				if ctx.Err() != nil {
					return
				}
				if err := s.Cold(ctx); err != nil {
					b.fail("%s cold: %v", s.Name(), err)
					continue
				}
				root, release, err := s.Mount(ctx, b.refs[s.Name()]["append16"])
				if err != nil {
					b.fail("%s mount append16: %v", s.Name(), err)
					continue
				}
				rig.DropCaches()
				file := filepath.Join(root, path)
				if afterStat {
					os.Stat(file)
				}
				start := time.Now()
				f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND, 0)
				if err == nil {
					_, err = f.Write([]byte{'x'})
				}
				write := time.Since(start)
				if err == nil {
					err = f.Sync()
				}
				synced := time.Since(start)
				if f != nil {
					f.Close()
				}
				release()
				if err != nil {
					b.fail("%s append: %v", s.Name(), err)
					continue
				}
				metric, label := "append_s", "first append"
				if afterStat {
					metric, label = "cow_s", "append after stat"
				}
				b.add(s.Name(), "append16", metric, write.Seconds(), run)
				b.add(s.Name(), "append16", metric+"_fsync", synced.Seconds(), run)
				b.printf("run %d %-9s %s to a 16 MiB file: %.3f ms, with fsync %.3f ms", run, s.Name(), label,
					write.Seconds()*1000, synced.Seconds()*1000)
			}
		}
	}
}

// seqRead reads every regular file of each image, cold then warm.
func (b *bench) seqRead(ctx context.Context) {
	for run := 1; run <= b.o.Runs; run++ {
		for _, name := range b.o.Images {
			for _, s := range b.systems {
				if ctx.Err() != nil {
					return
				}
				if err := s.Cold(ctx); err != nil {
					b.fail("%s cold: %v", s.Name(), err)
					continue
				}
				root, release, err := s.Mount(ctx, b.refs[s.Name()][name])
				if err != nil {
					b.fail("%s mount %s: %v", s.Name(), name, err)
					continue
				}
				rig.DropCaches()
				cold, n, err := readAll(root)
				var warm time.Duration
				if err == nil {
					warm, _, err = readAll(root)
				}
				if s == rig.System(b.slacker) {
					if rss, err := b.slacker.PeakRSS(ctx); err == nil {
						b.add(s.Name(), name, "peak_rss_bytes", float64(rss), run)
					}
				}
				release()
				if err != nil {
					b.fail("%s read %s: %v", s.Name(), name, err)
					continue
				}
				b.add(s.Name(), name, "seqread_cold_s", cold.Seconds(), run)
				b.add(s.Name(), name, "seqread_warm_s", warm.Seconds(), run)
				b.add(s.Name(), name, "seqread_bytes", float64(n), run)
				b.printf("run %d %-9s %-8s read %s: cold %.2fs (%.0f MB/s), warm %.2fs", run, s.Name(), name,
					corpus.HumanBytes(n), cold.Seconds(), float64(n)/cold.Seconds()/1e6, warm.Seconds())
			}
		}
	}
}

// readAll reads every regular file under root, in walk order, never following
// symlinks and never opening device nodes.
func readAll(root string) (time.Duration, int64, error) {
	buf := make([]byte, 1<<20)
	var total int64
	start := time.Now()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		for {
			n, err := f.Read(buf)
			total += int64(n)
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return fmt.Errorf("read %s: %w", p, err)
			}
		}
	})
	return time.Since(start), total, err
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// machineOf keeps the machine fields the core benchmark's JSON has always held.
func machineOf(m rig.Machine) Machine {
	return Machine{Kernel: m.Kernel, CPU: m.CPU, CPUs: m.CPUs, Memory: m.Memory}
}
