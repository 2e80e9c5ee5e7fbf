package harness

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/slacker-dev/slacker/bench/rig"
)

func TestParseSystem(t *testing.T) {
	tests := []struct {
		in   string
		want SystemSpec
		err  string // substring of the error; "" = valid
	}{
		{in: "slacker", want: SystemSpec{Name: "slacker", Kind: "slacker"}},
		{in: " slacker ", want: SystemSpec{Name: "slacker", Kind: "slacker"}},
		{in: "slacker-block", want: SystemSpec{Name: "slacker-block", Kind: "slacker", RootMode: "block"}},
		{in: "overlayfs", want: SystemSpec{Name: "overlayfs", Kind: "containerd", Snapshotter: "overlayfs"}},
		{in: "native", want: SystemSpec{Name: "native", Kind: "containerd", Snapshotter: "native"}},
		{in: "soci=/run/soci-snapshotter-grpc/soci-snapshotter-grpc.sock",
			want: SystemSpec{Name: "soci", Kind: "containerd", Snapshotter: "soci", Socket: "/run/soci-snapshotter-grpc/soci-snapshotter-grpc.sock"}},
		{in: "soci_v2-1=/run/soci.sock", want: SystemSpec{Name: "soci_v2-1", Kind: "containerd", Snapshotter: "soci_v2-1", Socket: "/run/soci.sock"}},

		{in: "", err: "unknown system"},
		{in: "overlay", err: "unknown system"},
		{in: "Slacker", err: "unknown system"},
		{in: "docker", err: "unknown system"},
		{in: "stargz", want: SystemSpec{Name: "stargz", Kind: "stargz"}},
		{in: "stargz=/run/stargz.sock", err: "built in"},
		{in: "nydus", err: "unknown system"},
		{in: "soci=run/soci.sock", err: "want NAME=/path/to/snapshotter.sock"},
		{in: "soci=", err: "want NAME=/path/to/snapshotter.sock"},
		{in: "=/run/x.sock", err: "not a usable snapshotter name"},
		{in: "Stargz=/run/x.sock", err: "not a usable snapshotter name"},
		{in: "9p=/run/x.sock", err: "not a usable snapshotter name"},
		{in: "star gz=/run/x.sock", err: "not a usable snapshotter name"},
		{in: "star.gz=/run/x.sock", err: "not a usable snapshotter name"},
		{in: "../x=/run/x.sock", err: "not a usable snapshotter name"},
		// Built-in names cannot be taken by a proxy snapshotter.
		{in: "slacker=/run/x.sock", err: "not a usable snapshotter name"},
		{in: "slacker-block=/run/x.sock", err: "not a usable snapshotter name"},
		{in: "overlayfs=/run/x.sock", err: "not a usable snapshotter name"},
		{in: "native=/run/x.sock", err: "not a usable snapshotter name"},
	}
	for _, tt := range tests {
		got, err := ParseSystem(tt.in)
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("ParseSystem(%q): %v", tt.in, err)
		case tt.err == "" && got != tt.want:
			t.Errorf("ParseSystem(%q) = %+v, want %+v", tt.in, got, tt.want)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("ParseSystem(%q) = %+v, %v; want an error with %q", tt.in, got, err, tt.err)
		}
	}
}

func TestParseSystems(t *testing.T) {
	tests := []struct {
		in    []string
		names []string
		err   string
	}{
		{in: []string{"overlayfs", "slacker"}, names: []string{"overlayfs", "slacker"}},
		{in: []string{"slacker", "overlayfs", "soci=/s.sock", "stargz"}, names: []string{"slacker", "overlayfs", "soci", "stargz"}},
		{in: []string{"overlayfs", "slacker", "slacker-block"}, names: []string{"overlayfs", "slacker", "slacker-block"}},
		{in: nil, err: "no systems given"},
		{in: []string{"slacker", "slacker"}, err: `system "slacker" given twice`},
		{in: []string{"a=/x.sock", "a=/y.sock"}, err: `system "a" given twice`},
		{in: []string{"overlayfs", "zfs"}, err: `unknown system "zfs"`},
	}
	for _, tt := range tests {
		specs, err := parseSystems(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("parseSystems(%q) = %v; want an error with %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("parseSystems(%q): %v", tt.in, err)
			continue
		}
		var names []string
		for _, s := range specs {
			names = append(names, s.Name)
		}
		if !reflect.DeepEqual(names, tt.names) {
			t.Errorf("parseSystems(%q) = %v, want %v", tt.in, names, tt.names)
		}
	}
}

func TestParseProfile(t *testing.T) {
	tests := []struct {
		in   string
		name string
		rate int64
		rtt  time.Duration
		err  string
	}{
		{in: "loopback", name: "loopback", rate: 0},
		{in: " Loopback ", name: "loopback", rate: 0},
		{in: "1gbit", name: "1gbit", rate: 1_000_000_000},
		{in: "1GBIT", name: "1gbit", rate: 1_000_000_000},
		{in: "100mbit", name: "100mbit", rate: 100_000_000},
		{in: "2.5gbit", name: "2.5gbit", rate: 2_500_000_000},
		{in: "0.5mbit", name: "0.5mbit", rate: 500_000},
		{in: "1kbit", name: "1kbit", rate: 1000},
		{in: "1gbit-20ms", name: "1gbit-20ms", rate: 1_000_000_000, rtt: 20 * time.Millisecond},
		{in: "100Mbit-20ms", name: "100mbit-20ms", rate: 100_000_000, rtt: 20 * time.Millisecond},
		{in: "1gbit-20", err: "unknown profile"},
		{in: "1gbit-20s", err: "unknown profile"},
		{in: "1gbit-", err: "unknown profile"},
		{in: "loopback-20ms", err: "unknown profile"},
		{in: "1gbit-0ms", err: "the round trip must be"},
		{in: "1gbit-10001ms", err: "the round trip must be"},
		{in: "0mbit-20ms", err: "the rate must be"},
		{in: "10", err: "unknown profile"},
		{in: "1gbps", err: "unknown profile"},
		{in: "1 gbit", err: "unknown profile"},
		{in: "1tbit", err: "unknown profile"},
		{in: "-1gbit", err: "unknown profile"},
		{in: ".5gbit", err: "unknown profile"},
		{in: "1e3mbit", err: "unknown profile"},
		{in: "fast", err: "unknown profile"},
		{in: "", err: "unknown profile"},
		{in: "0gbit", err: "the rate must be"},
		{in: "0.0mbit", err: "the rate must be"},
		// 0.0001 kbit/s is 0 bit/s once an integer: not a link at all.
		{in: "0.0001kbit", err: "the rate must be"},
		{in: "0.5kbit", err: "the rate must be"},
		{in: "99999999gbit", err: "the rate must be"},
	}
	for _, tt := range tests {
		name, rate, rtt, err := ParseProfile(tt.in)
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("ParseProfile(%q): %v", tt.in, err)
		case tt.err == "" && (name != tt.name || rate != tt.rate || rtt != tt.rtt):
			t.Errorf("ParseProfile(%q) = %q, %d, %v; want %q, %d, %v", tt.in, name, rate, rtt, tt.name, tt.rate, tt.rtt)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("ParseProfile(%q) = %q, %d, %v; want an error with %q", tt.in, name, rate, err, tt.err)
		}
	}
}

const optionsWorkloads = `
[[workload]]
name = "debian"
category = "distro"
base = "minbase"
cmd = ["echo", "hello"]
ready = { exit = 0 }
timeout_s = 30

[[workload]]
name = "redis"
category = "database"
base = "minbase"
layers = [["redis-server"]]
cmd = ["redis-server"]
ready = { tcp = 6379 }
timeout_s = 30

[[workload]]
name = "other"
category = "other"
base = "minbase"
cmd = ["true"]
ready = { exit = 0 }
timeout_s = 30
`

const otherWorkloads = `
[[workload]]
name = "other"
category = "other"
base = "minbase"
cmd = ["true"]
ready = { exit = 0 }
timeout_s = 30
`

// TestPrepare checks the defaults and every refusal of bad options, and that Run
// refuses them before it touches its work directory.
func TestPrepare(t *testing.T) {
	tmp := t.TempDir()
	wl := filepath.Join(tmp, "workloads.toml")
	other := filepath.Join(tmp, "other.toml")
	for f, doc := range map[string]string{wl: optionsWorkloads, other: otherWorkloads} {
		if err := os.WriteFile(f, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	base := func() Options {
		return Options{WorkloadsFile: wl, Systems: []string{"overlayfs", "slacker"}, Profile: "loopback",
			Dir: filepath.Join(tmp, "work"), CorpusDir: filepath.Join(tmp, "corpus")}
	}
	tests := []struct {
		name      string
		change    func(o *Options)
		err       string
		workloads []string
		check     func(t *testing.T, o *Options, p *plan)
	}{
		{name: "defaults", change: func(o *Options) {}, workloads: []string{"debian", "redis", "other"},
			check: func(t *testing.T, o *Options, p *plan) {
				if o.Runs != 3 || o.RTT != time.Millisecond || !reflect.DeepEqual(o.Cycles, []string{Deployment, Development}) || o.Seed == 0 {
					t.Errorf("defaults: runs %d, rtt %v, cycles %v, seed %d", o.Runs, o.RTT, o.Cycles, o.Seed)
				}
				if p.profile != "loopback" || p.rate != 0 || len(p.specs) != 2 {
					t.Errorf("plan %+v", p)
				}
			}},
		{name: "kept", change: func(o *Options) {
			o.Runs, o.RTT, o.Cycles, o.Seed, o.Profile = 5, 20*time.Millisecond, []string{Development}, 42, "100mbit"
		}, workloads: []string{"debian", "redis", "other"},
			check: func(t *testing.T, o *Options, p *plan) {
				if o.Runs != 5 || o.RTT != 20*time.Millisecond || !reflect.DeepEqual(o.Cycles, []string{Development}) || o.Seed != 42 {
					t.Errorf("options changed: %+v", o)
				}
				if p.profile != "100mbit" || p.rate != 100_000_000 {
					t.Errorf("plan %+v", p)
				}
			}},
		{name: "WAN profile sets the round trip", change: func(o *Options) { o.Profile = "100mbit-20ms" }, workloads: []string{"debian", "redis", "other"},
			check: func(t *testing.T, o *Options, p *plan) {
				if o.RTT != 20*time.Millisecond || p.profile != "100mbit-20ms" || p.rate != 100_000_000 {
					t.Errorf("rtt %v, plan %+v", o.RTT, p)
				}
			}},
		{name: "WAN profile over the default --rtt", change: func(o *Options) { o.Profile, o.RTT = "1gbit-20ms", time.Millisecond }, workloads: []string{"debian", "redis", "other"},
			check: func(t *testing.T, o *Options, p *plan) {
				if o.RTT != 20*time.Millisecond {
					t.Errorf("rtt %v, want the profile's 20ms", o.RTT)
				}
			}},
		{name: "WAN profile and --rtt disagree", change: func(o *Options) { o.Profile, o.RTT = "1gbit-20ms", 5*time.Millisecond }, err: "give one"},
		{name: "only, in file order", change: func(o *Options) { o.Only = []string{"other", "debian"} }, workloads: []string{"debian", "other"}},
		{name: "quick takes the quick workloads the file has", change: func(o *Options) { o.Quick = true }, workloads: []string{"debian", "redis"}},
		{name: "only wins over quick", change: func(o *Options) { o.Quick, o.Only = true, []string{"other"} }, workloads: []string{"other"}},

		{name: "quick without quick workloads", change: func(o *Options) { o.Quick, o.WorkloadsFile = true, other }, err: "none of the quick workloads"},
		{name: "unknown workload", change: func(o *Options) { o.Only = []string{"nginx"} }, err: `no workload named "nginx"`},
		{name: "no workloads file", change: func(o *Options) { o.WorkloadsFile = filepath.Join(tmp, "missing.toml") }, err: "missing.toml"},
		{name: "bad cycle", change: func(o *Options) { o.Cycles = []string{"deploy"} }, err: `unknown cycle "deploy"`},
		{name: "cycle twice", change: func(o *Options) { o.Cycles = []string{Deployment, Deployment} }, err: "given twice"},
		{name: "bad profile", change: func(o *Options) { o.Profile = "10gbps" }, err: "unknown profile"},
		{name: "zero rate", change: func(o *Options) { o.Profile = "0mbit" }, err: "the rate must be"},
		{name: "no systems", change: func(o *Options) { o.Systems = nil }, err: "no systems given"},
		{name: "bad snapshotter name", change: func(o *Options) { o.Systems = []string{"overlayfs", "Star=/x.sock"} }, err: "not a usable snapshotter name"},
		{name: "relative socket", change: func(o *Options) { o.Systems = []string{"soci=x.sock"} }, err: "NAME=/path"},
		{name: "publish unshaped behind a link", change: func(o *Options) { o.Profile, o.PublishUnshaped = "100mbit-20ms", true }, workloads: []string{"debian", "redis", "other"}},
		{name: "publish unshaped on loopback", change: func(o *Options) { o.PublishUnshaped = true }, err: "profile loopback has no link"},
		{name: "bad store server", change: func(o *Options) { o.StoreServer = "nfs" }, err: `store server "nfs"`},
		{name: "bad store compression", change: func(o *Options) { o.StoreCompress = "gzip" }, err: `store compress "gzip"`},
		{name: "no work directory", change: func(o *Options) { o.Dir = "" }, err: "no work directory"},
		{name: "root work directory", change: func(o *Options) { o.Dir = "/" }, err: "refusing work directory"},
		{name: "work directory is the corpus", change: func(o *Options) { o.Dir = o.CorpusDir }, err: "holds the corpus"},
		{name: "work directory holds the corpus", change: func(o *Options) { o.Dir = tmp }, err: "holds the corpus"},
		{name: "work directory holds the workloads file", change: func(o *Options) { o.Dir, o.CorpusDir = tmp, "/var/tmp/elsewhere" }, err: "holds the workloads file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := base()
			tt.change(&o)
			p, err := prepare(&o)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("prepare: %v, want an error with %q", err, tt.err)
				}
				// Run refuses the same options before it empties anything.
				marker := filepath.Join(tmp, "work", "keep")
				os.MkdirAll(filepath.Dir(marker), 0o755)
				if err := os.WriteFile(marker, nil, 0o644); err != nil {
					t.Fatal(err)
				}
				o := base()
				tt.change(&o)
				res, err := Run(context.Background(), o)
				if err == nil || !strings.Contains(err.Error(), tt.err) || res != nil {
					t.Fatalf("Run: %v, %v; want an error with %q", res, err, tt.err)
				}
				if _, err := os.Stat(marker); err != nil {
					t.Fatalf("Run touched the work directory: %v", err)
				}
				if _, err := os.Stat(wl); err != nil {
					t.Fatalf("Run removed the workloads file: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, w := range p.ws {
				names = append(names, w.Name)
			}
			if !reflect.DeepEqual(names, tt.workloads) {
				t.Errorf("workloads %v, want %v", names, tt.workloads)
			}
			if tt.check != nil {
				tt.check(t, &o, p)
			}
		})
	}
}

// TestMakeSlackerSystems: slacker and slacker-block are Slacker systems of their
// own (named as given, each on a node and, with the store on the node, a store of
// its own; a remote store is shared), and the results say how each was run.
func TestMakeSlackerSystems(t *testing.T) {
	bin := t.TempDir()
	slacker, slackerd := filepath.Join(bin, "slacker"), filepath.Join(bin, "slackerd")
	for _, b := range []string{slacker, slackerd} {
		if err := os.WriteFile(b, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	specs, err := parseSystems([]string{"slacker", "slacker-block"})
	if err != nil {
		t.Fatal(err)
	}
	for _, store := range []string{"", "s3://10.0.0.2:9000/slacker"} {
		h := &harness{o: Options{Dir: "/w", Slacker: slacker, Slackerd: slackerd, Store: store}, res: &Results{}}
		h.res.Profile.Store = store
		if store == "" {
			h.res.Profile.Store = "/w/slacker/store"
		}
		if err := h.makeSystems(specs); err != nil {
			t.Fatal(err)
		}
		want := map[string]struct{ mode, store string }{
			"slacker":       {"", "/w/slacker/store"},
			"slacker-block": {"block", "/w/slacker-block/store"},
		}
		for i, s := range h.systems {
			sl, ok := s.(*rig.Slacker)
			if !ok {
				t.Fatalf("system %d is a %T", i, s)
			}
			w := want[s.Name()]
			if store != "" {
				w.store = store
			}
			if s.Name() != specs[i].Name || sl.RootMode() != w.mode || sl.Store() != w.store {
				t.Errorf("store %q: system %d: %T %s, mode %q, store %s; want %+v", store, i, s, s.Name(), sl.RootMode(), sl.Store(), w)
			}
			if d := h.res.Systems[i].Detail; !strings.Contains(d, "store "+w.store) || strings.Contains(d, "--container-root") != (w.mode != "") {
				t.Errorf("store %q: %s's detail %q", store, s.Name(), d)
			}
		}
	}
}
