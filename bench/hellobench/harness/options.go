package harness

import (
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/slacker-dev/slacker/bench/rig"
)

// Options configure a run of the harness.
type Options struct {
	// WorkloadsFile holds the definitions; Only selects some of them (all if empty).
	WorkloadsFile string
	Only          []string
	// Quick selects QuickWorkloads (those the file has) instead of all.
	Quick bool
	// Systems are system specs (see ParseSystem): "overlayfs", "slacker",
	// "slacker-block", "slacker-containerd" (Slacker images through containerd and
	// slackerd's snapshotter), "stargz" (eStargz images through containerd and
	// stargz-snapshotter), "NAME=SOCKET" for a containerd snapshotter already
	// running.
	Systems []string
	// Profile is "loopback" or a link rate such as "1gbit", "100mbit", with its
	// round trip in the name or not ("1gbit-20ms", see ParseProfile); RTT is the
	// link's round trip when the name has none (default 1 ms). A name with a round
	// trip and an RTT other than the default that disagree are refused.
	Profile string
	RTT     time.Duration
	// Runs is the number of repetitions of every (workload, system, cycle).
	Runs int
	// Warmup runs every workload once with Slacker before the samples, untimed
	// (see Results.Warmups).
	Warmup bool
	// Optimize lays every Slacker image out for start-up after the warm-up, from
	// the trace it recorded, and publishes it again (`slacker optimize`, then
	// `slacker push`), as eStargz images are optimized with a recorded run.
	Optimize bool
	// PublishUnshaped turns the emulated link's rate and delay off while every
	// image is published and, with Optimize, published again laid out: set-up
	// that is not measured, which at 100 Mbit/s would take most of a run. The
	// warm-up and the samples cross the shaped link. Needs a link profile.
	PublishUnshaped bool
	// Cycles to measure: Deployment, Development (default both).
	Cycles []string
	// Dir is the harness's work directory (emptied first, removed at the end unless
	// KeepDir); CorpusDir the corpus.
	Dir, CorpusDir string
	KeepDir        bool
	// Slacker and Slackerd are the binaries; SlackerdArgs extra daemon flags.
	Slacker, Slackerd string
	// Stargz is slacker-stargz (bench/stargz): the system "stargz", and the
	// containerd client both "stargz" and "slacker-containerd" pull with.
	Stargz       string
	SlackerdArgs []string
	// Store is Slacker's chunk store location ("" = a directory on the node).
	Store string
	// StoreServer is where Slacker's chunks live behind a link when Store is empty:
	// "s3" (a MinIO server beside the registry, the default) or "registry" (the
	// registry's blobs).
	StoreServer string
	// StoreCompress is that store's compress parameter: "" (the backend's default,
	// zstd), "zstd" or "none" (to measure plain chunks beside compressed ones).
	StoreCompress string
	// Results, when set, is rewritten after every sample.
	Results string
	// Seed fixes the shuffled order (0 = from the clock).
	Seed uint64
	// Progress gets one line per step; nil discards.
	Progress io.Writer
	// Command is recorded in the results.
	Command []string
}

// QuickWorkloads is the quick profile: six workloads from five categories, small
// and large, one-shot and servers.
var QuickWorkloads = []string{"debian", "python", "gcc", "redis", "nginx", "flask"}

// SystemSpec is a parsed --systems entry.
type SystemSpec struct {
	Name string
	// Kind is "slacker", "containerd", "slacker-containerd" or "stargz".
	Kind string
	// RootMode is a Slacker system's container root mode (rig.SlackerOptions):
	// "block" for slacker-block, empty for slacker (slackerd's default, shared).
	RootMode string
	// Snapshotter and Socket are containerd's (Socket empty for built-in ones).
	Snapshotter, Socket string
}

var snapshotterName = regexp.MustCompile(`^[a-z][a-z0-9_-]*$`)

// ParseSystem parses a --systems entry: "slacker" (slackerd and the slacker CLI,
// its default container roots); "slacker-block" (the same with slackerd
// --container-root block: block clones); "slacker-containerd" (Slacker images
// through containerd and slackerd's snapshotter); "stargz" (eStargz images through
// containerd and stargz-snapshotter, rig.Stargz); "overlayfs" (containerd with its overlayfs
// snapshotter); "native" (containerd's native snapshotter); or "NAME=SOCKET", a
// snapshotter that is already running, plugged into containerd through its gRPC
// socket (e.g. stargz=/run/containerd-stargz-grpc/containerd-stargz-grpc.sock).
func ParseSystem(s string) (SystemSpec, error) {
	s = strings.TrimSpace(s)
	if name, sock, ok := strings.Cut(s, "="); ok {
		if !snapshotterName.MatchString(name) || slices.Contains(builtinSystems, name) {
			return SystemSpec{}, fmt.Errorf("system %q: %q is not a usable snapshotter name (lower case letters, digits, - and _; not %s, which are built in)", s, name, strings.Join(builtinSystems, ", "))
		}
		if !strings.HasPrefix(sock, "/") {
			return SystemSpec{}, fmt.Errorf("system %q: want NAME=/path/to/snapshotter.sock", s)
		}
		return SystemSpec{Name: name, Kind: "containerd", Snapshotter: name, Socket: sock}, nil
	}
	switch s {
	case "slacker":
		return SystemSpec{Name: "slacker", Kind: "slacker"}, nil
	case "slacker-block":
		return SystemSpec{Name: "slacker-block", Kind: "slacker", RootMode: "block"}, nil
	case rig.SlackerContainerdName, rig.StargzName:
		return SystemSpec{Name: s, Kind: s}, nil
	case "overlayfs", "native":
		return SystemSpec{Name: s, Kind: "containerd", Snapshotter: s}, nil
	}
	return SystemSpec{}, fmt.Errorf("unknown system %q (want slacker, slacker-block, slacker-containerd, stargz, overlayfs, native, or NAME=SOCKET for a running containerd snapshotter)", s)
}

// builtinSystems are the names ParseSystem knows; a proxy snapshotter cannot take one.
var builtinSystems = []string{"slacker", "slacker-block", rig.SlackerContainerdName, rig.StargzName, "overlayfs", "native"}

var rateRE = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)(k|m|g)bit(?:-([0-9]+)ms)?$`)

// ParseProfile parses a profile name: "loopback", or a link rate "Nkbit", "Nmbit",
// "Ngbit" (bits per second, as tc writes them), optionally with the link's round
// trip in milliseconds, "1gbit-20ms", "100mbit-20ms" (the WAN profiles: a registry
// in another region); rtt is zero when the name has none.
func ParseProfile(s string) (name string, rateBits int64, rtt time.Duration, err error) {
	s = strings.ToLower(strings.TrimSpace(s))
	if s == "loopback" {
		return s, 0, 0, nil
	}
	m := rateRE.FindStringSubmatch(s)
	if m == nil {
		return "", 0, 0, fmt.Errorf("unknown profile %q (want loopback, or a link rate such as 1gbit, 100mbit, with a round trip such as 1gbit-20ms)", s)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	mult := map[string]float64{"k": 1e3, "m": 1e6, "g": 1e9}[m[2]]
	// Below 1 kbit/s (0.0001kbit rounds to 0 bit/s) a rate would mean no link at
	// all: the run would go over loopback under the link's name.
	if err != nil || v*mult < 1e3 || v*mult > 1e12 {
		return "", 0, 0, fmt.Errorf("profile %q: the rate must be between 1kbit and 1000gbit", s)
	}
	if m[3] != "" {
		ms, err := strconv.Atoi(m[3])
		if err != nil || ms < 1 || ms > 10_000 {
			return "", 0, 0, fmt.Errorf("profile %q: the round trip must be between 1ms and 10000ms", s)
		}
		rtt = time.Duration(ms) * time.Millisecond
	}
	return s, int64(v * mult), rtt, nil
}
