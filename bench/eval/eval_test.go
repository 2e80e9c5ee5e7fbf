package eval

import (
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/slacker-dev/slacker/bench/corpus"
	"github.com/slacker-dev/slacker/bench/rig"
)

func TestParseIOServiceLine(t *testing.T) {
	for _, c := range []struct {
		line string
		r, w int64
	}{
		{"254:0 Read 52912128", 52912128, 0},
		{"254:0 Write 4096", 0, 4096},
		{"254:0 Total 52916224", 0, 0},
		{"Total 52916224", 0, 0},
		{"254:0 Read x", 0, 0},
		{"", 0, 0},
	} {
		if r, w := ParseIOServiceLine(c.line); r != c.r || w != c.w {
			t.Errorf("%q: %d %d, want %d %d", c.line, r, w, c.r, c.w)
		}
	}
}

func TestCgroupFiles(t *testing.T) {
	root := t.TempDir()
	old := CgroupRoot
	CgroupRoot = root
	t.Cleanup(func() { CgroupRoot = old })
	cg := Cgroup("/eval/x")
	if err := cg.Create(""); err != nil {
		t.Fatal(err)
	}
	mem := filepath.Join(root, "memory", "eval", "x")
	os.WriteFile(filepath.Join(mem, "memory.stat"), []byte("cache 10\nrss 5\ntotal_cache 100\ntotal_rss 50\nbad line here\n"), 0o644)
	os.WriteFile(filepath.Join(mem, "memory.max_usage_in_bytes"), []byte("4096\n"), 0o644)
	os.WriteFile(filepath.Join(mem, "memory.oom_control"), []byte("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n"), 0o644)
	os.WriteFile(filepath.Join(root, "blkio", "eval", "x", "blkio.throttle.io_service_bytes_recursive"),
		[]byte("254:0 Read 100\n254:0 Write 7\n254:0 Total 107\n7:1 Read 20\nTotal 127\n"), 0o644)
	m, err := cg.MemoryStat()
	if err != nil || m["total_cache"] != 100 || m["total_rss"] != 50 || m["max_usage_in_bytes"] != 4096 {
		t.Fatalf("memory stat %v %v", m, err)
	}
	if cg.OOMKills() != 3 {
		t.Fatal("oom kills")
	}
	if r, w, err := cg.IO(); err != nil || r != 120 || w != 7 {
		t.Fatalf("io %d %d %v", r, w, err)
	}
	if cg.Child("c") != "/eval/x/c" {
		t.Fatal(cg.Child("c"))
	}
	// Files cannot be removed from a real cgroup; here they make rmdir fail, so
	// clear them to test the walk.
	os.Remove(filepath.Join(mem, "memory.stat"))
	os.Remove(filepath.Join(mem, "memory.max_usage_in_bytes"))
	os.Remove(filepath.Join(mem, "memory.oom_control"))
	os.Remove(filepath.Join(root, "blkio", "eval", "x", "blkio.throttle.io_service_bytes_recursive"))
	os.MkdirAll(filepath.Join(root, "cpu", "eval", "x", "c", "hp-000"), 0o755)
	if err := Cgroup("/eval").Remove(); err != nil {
		t.Fatal(err)
	}
	for _, ctl := range []string{"memory", "blkio", "cpu"} {
		if _, err := os.Stat(filepath.Join(root, ctl, "eval")); !os.IsNotExist(err) {
			t.Fatalf("%s/eval left: %v", ctl, err)
		}
	}
}

func TestSizeTagAndRSS(t *testing.T) {
	for n, want := range map[int64]string{16 << 20: "16mib", 4096: "4kib", 1 << 30: "1gib", 1000: "1000", 1536: "1536"} {
		if got := SizeTag(n); got != want {
			t.Errorf("SizeTag(%d) = %q, want %q", n, got, want)
		}
	}
	if ProcRSS(os.Getpid()) <= 0 {
		t.Fatal("own RSS")
	}
	if DeviceOf("/proc/self") == "" {
		t.Fatal("no device for /proc")
	}
}

func TestCPUTimes(t *testing.T) {
	for _, c := range []struct {
		stat string
		want time.Duration
	}{
		{"42 (slackerd) S 1 42 42 0 -1 4194560 100 0 0 0 250 130 0 0 20 0 12 0 100 0 0", 3800 * time.Millisecond},
		{"7 (a) b (c)) R 1 7 7 0 -1 0 0 0 0 0 1 2 0 0", 30 * time.Millisecond},
		{"garbage", 0},
		{"9 (x) S 1", 0},
	} {
		if got := parseStatCPU(c.stat); got != c.want {
			t.Errorf("parseStatCPU(%q) = %v, want %v", c.stat, got, c.want)
		}
	}
	if ProcCPU(os.Getpid()) < 0 || ProcCPU(-1) != 0 {
		t.Fatal("ProcCPU")
	}
	root := t.TempDir()
	old := CgroupRoot
	CgroupRoot = root
	t.Cleanup(func() { CgroupRoot = old })
	os.MkdirAll(filepath.Join(root, "cpuacct", "eval"), 0o755)
	os.WriteFile(filepath.Join(root, "cpuacct", "eval", "cpuacct.usage"), []byte("1500000000\n"), 0o644)
	if got := Cgroup("/eval").CPUUsage(); got != 1500*time.Millisecond {
		t.Fatalf("cpu usage %v", got)
	}
	if Cgroup("/none").CPUUsage() != 0 {
		t.Fatal("missing cgroup")
	}
}

// TestSlackerSystems: the Modes of a pair make one Slacker system each, named by
// mode in a directory named as it is; Systems lists them baseline first, Shuffled
// draws all of them, and RootModes records the modes (none for the mode-less
// system of the items that never asked for one).
func TestSlackerSystems(t *testing.T) {
	bin := t.TempDir()
	bins := rig.Binaries{Slacker: filepath.Join(bin, "slacker"), Slackerd: filepath.Join(bin, "slackerd")}
	for _, b := range []string{bins.Slacker, bins.Slackerd} {
		if err := os.WriteFile(b, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		modes []string
		names []string
		root  map[string]string
		err   string
	}{
		{modes: nil, names: []string{"slacker"}},
		{modes: SlackerModes(false), names: []string{"slacker"}, root: map[string]string{"slacker": "shared"}},
		{modes: SlackerModes(true), names: []string{"slacker", "slacker-block"}, root: map[string]string{"slacker": "shared", "slacker-block": "block"}},
		{modes: []string{"block", "shared"}, names: []string{"slacker", "slacker-block"}, root: map[string]string{"slacker": "shared", "slacker-block": "block"}},
		{modes: []string{"block"}, names: []string{"slacker-block"}, root: map[string]string{"slacker-block": "block"}},
		{modes: []string{"shared", "shared"}, err: "twice"},
		{modes: []string{""}, err: "want"},
		{modes: []string{"overlay"}, err: "want"},
	}
	for _, tt := range tests {
		sl, bl, err := newSlackers(PairOptions{Dir: "/w", Binaries: bins, Modes: tt.modes})
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("modes %q: %v, want an error with %q", tt.modes, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("modes %q: %v", tt.modes, err)
		}
		p := &Pair{Slacker: sl, Block: bl}
		var names []string
		for _, s := range p.Systems() {
			names = append(names, s.Name())
		}
		if !slices.Equal(names, tt.names) || !maps.Equal(p.RootModes(), tt.root) {
			t.Errorf("modes %q: systems %q, root modes %v; want %q, %v", tt.modes, names, p.RootModes(), tt.names, tt.root)
		}
		for _, s := range []*rig.Slacker{sl, bl} {
			if s != nil && s.Store() != filepath.Join("/w", s.Name(), "store") {
				t.Errorf("modes %q: %s's store is %s", tt.modes, s.Name(), s.Store())
			}
		}
		seen := map[string]int{}
		rng := rand.New(rand.NewPCG(1, 2))
		for range 20 {
			for _, s := range p.Shuffled(rng) {
				seen[s.Name()]++
			}
		}
		for _, n := range tt.names {
			if seen[n] != 20 {
				t.Errorf("modes %q: %s drawn %d times in 20 shuffles", tt.modes, n, seen[n])
			}
		}
	}
}

// TestBuildImageReproducible: the same layer functions make the same layers, even
// when the files are written more than a second apart (their mtimes would differ).
func TestBuildImageReproducible(t *testing.T) {
	dir := t.TempDir()
	fill := func(d string) error { return os.WriteFile(filepath.Join(d, "f"), []byte("same\n"), 0o644) }
	layers := func(name string) []string {
		if _, err := BuildImage(t.Context(), dir, name, []LayerFunc{fill}); err != nil {
			t.Fatal(err)
		}
		l, err := corpus.OpenLayout(dir)
		if err != nil {
			t.Fatal(err)
		}
		tags, err := l.Tags()
		if err != nil {
			t.Fatal(err)
		}
		m, _, err := l.Manifest(tags[name])
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, d := range m.Layers {
			out = append(out, d.Digest.String())
		}
		return out
	}
	a := layers("a")
	time.Sleep(1100 * time.Millisecond)
	if b := layers("b"); !slices.Equal(a, b) {
		t.Fatalf("the same files built twice made layers %v and %v", a, b)
	}
}
