package multimake

import (
	"context"
	_ "embed"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/slacker-dev/slacker/bench/corpus"
	"github.com/slacker-dev/slacker/bench/eval"
	"github.com/slacker-dev/slacker/bench/eval/stat"
	"github.com/slacker-dev/slacker/bench/rig"
	"github.com/slacker-dev/slacker/bench/workload"
)

//go:embed compilers.toml
var compilersTOML []byte

// Compilers is the workloads file of the compiler images (exported for the docs and
// tests).
func Compilers() (*workload.Set, error) { return workload.Parse(compilersTOML) }

// Options configure a run.
type Options struct {
	Dir        string // work directory; emptied first
	CorpusDir  string
	Binaries   rig.Binaries
	Only       []string // compilers (workload names); empty means all
	Iterations int      // outer iterations of the program's vector loop
	Tests      int      // runs of each binary on the host
	Runs       int
	Seed       uint64
	DaemonArgs []string
	Progress   *rig.Progress
}

// Step is one compiler's phases on one system.
type Step struct {
	System   string  `json:"system"`
	Compiler string  `json:"compiler"`
	Version  string  `json:"version"`
	Run      int     `json:"run"`
	Pull     float64 `json:"pull_s"`
	Compile  float64 `json:"compile_s"` // the container run that compiles
	Test     float64 `json:"test_s"`    // running the binary Tests times on the host
	Delete   float64 `json:"delete_s"`
	// BinarySeconds is the median of the binary's own timing of its loop.
	BinarySeconds float64 `json:"binary_s"`
	Checksum      string  `json:"checksum"`
	Error         string  `json:"error,omitempty"`
}

// Results is what a run measured (multimake.json).
type Results struct {
	Meta         *eval.Meta       `json:"meta"`
	Compilers    []string         `json:"compilers"`
	Iterations   int              `json:"iterations"`
	Tests        int              `json:"tests"`
	Runs         int              `json:"runs"`
	ImageBytes   map[string]int64 `json:"image_bytes"`
	SlackerdArgs []string         `json:"slackerd_args,omitempty"`
	Steps        []Step           `json:"steps"`
	// Totals are each system's whole MultiMake time per run (all compilers, from a
	// cold node), in seconds.
	Totals []Total `json:"totals"`
}

// Total is one system's whole MultiMake in one run.
type Total struct {
	System  string  `json:"system"`
	Run     int     `json:"run"`
	Seconds float64 `json:"s"`
}

// Run runs MultiMake.
func Run(ctx context.Context, o Options) (*Results, error) {
	if err := eval.NeedRoot("multimake"); err != nil {
		return nil, err
	}
	if o.Runs < 1 {
		o.Runs = 1
	}
	if o.Tests < 1 {
		o.Tests = 3
	}
	set, err := Compilers()
	if err != nil {
		return nil, err
	}
	var ws []*workload.Workload
	for _, w := range set.Workloads {
		if len(o.Only) == 0 || slices.Contains(o.Only, w.Name) {
			ws = append(ws, w)
		}
	}
	if len(ws) == 0 {
		return nil, fmt.Errorf("no compiler selected (have %s)", names(set.Workloads))
	}
	c, err := corpus.Open(corpus.Options{Dir: o.CorpusDir, Progress: progressWriter{o.Progress}})
	if err != nil {
		return nil, err
	}
	o.Progress.Printf("building the compiler images (cached after the first time): %s", names(ws))
	rep, err := c.Build(ctx, ws)
	if err != nil {
		return nil, err
	}
	if f := rep.Failed(); len(f) > 0 {
		return nil, fmt.Errorf("build %s: %v", f[0].Name, f[0].Err)
	}
	res := &Results{Meta: eval.NewMeta("multimake"), Iterations: o.Iterations, Tests: o.Tests, Runs: o.Runs, ImageBytes: map[string]int64{}, SlackerdArgs: o.DaemonArgs}
	pair, err := eval.StartPair(ctx, eval.PairOptions{Dir: o.Dir, Binaries: o.Binaries, DaemonArgs: o.DaemonArgs})
	if err != nil {
		return nil, err
	}
	defer pair.Close()
	for _, w := range ws {
		img, err := eval.CorpusImage(c, w.Name)
		if err != nil {
			return nil, err
		}
		o.Progress.Printf("publishing %s (%s)", w.Name, eval.HumanBytes(img.DataBytes))
		if err := pair.Publish(ctx, img); err != nil {
			return nil, err
		}
		res.Compilers = append(res.Compilers, w.Name)
		res.ImageBytes[w.Name] = img.DataBytes
	}
	bins := filepath.Join(o.Dir, "binaries")
	if err := os.MkdirAll(bins, 0o755); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(o.Seed, 7))
	for run := 1; run <= o.Runs; run++ {
		for _, s := range pair.Shuffled(rng) {
			if err := s.Cold(ctx); err != nil {
				res.Meta.Fail("%s cold: %v", s.Name(), err)
				continue
			}
			start := time.Now()
			for _, w := range ws {
				if ctx.Err() != nil {
					res.Meta.Done()
					return res, ctx.Err()
				}
				st := step(ctx, o, s, pair.Ref(s, w.Name), w, bins)
				st.Run = run
				if st.Error != "" {
					res.Meta.Fail("%s %s run %d: %s", s.Name(), w.Name, run, st.Error)
				}
				o.Progress.Printf("run %d %-9s %-9s pull %6.2fs compile %6.2fs test %6.2fs delete %6.2fs; binary %.3fs (%s) %s",
					run, s.Name(), w.Name, st.Pull, st.Compile, st.Test, st.Delete, st.BinarySeconds, st.Version, st.Error)
				res.Steps = append(res.Steps, st)
			}
			res.Totals = append(res.Totals, Total{System: s.Name(), Run: run, Seconds: time.Since(start).Seconds()})
		}
	}
	res.Meta.Done()
	return res, ctx.Err()
}

// compileCmd compiles /src/vec.c with the image's compiler and writes the binary
// to standard output (the compiler's messages and version go to standard error).
func compileCmd(cc string) []string {
	return []string{"sh", "-c", fmt.Sprintf("%s --version | head -n1 >&2 && %s -O2 -o /tmp/vec /src/vec.c >&2 && cat /tmp/vec", cc, cc)}
}

// compilerOf is the compiler command of a workload: its cmd's first word.
func compilerOf(w *workload.Workload) string { return w.Cmd[0] }

// step runs one compiler's phases.
func step(ctx context.Context, o Options, s rig.System, ref string, w *workload.Workload, bins string) Step {
	st := Step{System: s.Name(), Compiler: w.Name}
	fail := func(err error) Step { st.Error = err.Error(); return st }
	t := time.Now()
	if _, err := s.Pull(ctx, ref); err != nil {
		return fail(err)
	}
	st.Pull = time.Since(t).Seconds()
	t = time.Now()
	r, err := s.Run(ctx, ref, compileCmd(compilerOf(w)), nil)
	st.Compile = time.Since(t).Seconds()
	if err != nil {
		return fail(err)
	}
	if r.ExitCode != 0 || len(r.Stdout) == 0 {
		return fail(fmt.Errorf("compile: exit %d: %s", r.ExitCode, strings.TrimSpace(r.Stderr)))
	}
	st.Version = strings.TrimSpace(strings.SplitN(r.Stderr, "\n", 2)[0])
	bin := filepath.Join(bins, s.Name()+"-"+w.Name)
	if err := os.WriteFile(bin, []byte(r.Stdout), 0o755); err != nil {
		return fail(err)
	}
	defer os.Remove(bin)
	t = time.Now()
	var own []float64
	for i := 0; i < o.Tests; i++ {
		out, err := exec.CommandContext(ctx, bin, strconv.Itoa(o.Iterations)).Output()
		if err != nil {
			return fail(fmt.Errorf("test: %w", err))
		}
		sum, secs, err := ParseOutput(string(out))
		if err != nil {
			return fail(err)
		}
		st.Checksum = sum
		own = append(own, secs)
	}
	st.Test = time.Since(t).Seconds()
	st.BinarySeconds = stat.Median(own)
	t = time.Now()
	if err := deleteImage(ctx, s, ref); err != nil {
		return fail(err)
	}
	st.Delete = time.Since(t).Seconds()
	return st
}

// deleteImage removes the image from the node: `slacker rmi`, or `ctr images rm
// --sync` (which waits for containerd to collect its content and snapshots).
func deleteImage(ctx context.Context, s rig.System, ref string) error {
	var r rig.RunResult
	var err error
	switch sys := s.(type) {
	case *rig.Slacker:
		r, err = sys.CLI(ctx, "rmi", ref)
	case *rig.Containerd:
		r, err = sys.Ctr(ctx, "images", "rm", "--sync", ref)
	default:
		return fmt.Errorf("no delete for %s", s.Name())
	}
	if err == nil && r.ExitCode != 0 {
		err = fmt.Errorf("delete %s: exit %d: %s", ref, r.ExitCode, strings.TrimSpace(r.Stderr))
	}
	return err
}

// ParseOutput reads the program's output: "CHECKSUM SECONDS".
func ParseOutput(out string) (string, float64, error) {
	f := strings.Fields(out)
	if len(f) != 2 {
		return "", 0, fmt.Errorf("binary printed %q, want a checksum and seconds", out)
	}
	secs, err := strconv.ParseFloat(f[1], 64)
	if err != nil {
		return "", 0, fmt.Errorf("binary printed %q: %w", out, err)
	}
	return f[0], secs, nil
}

func names(ws []*workload.Workload) string {
	var s []string
	for _, w := range ws {
		s = append(s, w.Name)
	}
	return strings.Join(s, ", ")
}

// progressWriter feeds the corpus builder's progress lines to ours.
type progressWriter struct{ p *rig.Progress }

func (w progressWriter) Write(b []byte) (int, error) {
	for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		if strings.TrimSpace(l) != "" {
			w.p.Printf("corpus: %s", l)
		}
	}
	return len(b), nil
}
