package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/slacker-dev/slacker/bench/corpus"
	"github.com/slacker-dev/slacker/bench/eval"
	"github.com/slacker-dev/slacker/bench/rig"
	"github.com/slacker-dev/slacker/internal/api"
)

// Options configure a run.
type Options struct {
	// Dir holds the loop files, mounts and the container systems' state; emptied first.
	Dir string
	// ImagesDir is the evaluation's OCI layout (the image holding the files).
	ImagesDir string
	Binaries  rig.Binaries
	// Jobs jobs at queue depth Depth, each on its own file of FileSize bytes.
	Jobs     int
	Depth    int
	FileSize int64
	// Runtime is each 4 KiB test's duration in seconds; SweepRuntime each point of
	// the block-size sweep's.
	Runtime, SweepRuntime int
	// SweepBS are the block sizes of the random-read sweep (empty: no sweep).
	SweepBS []int64
	// LoopSize is the size of each loop file (sparse).
	LoopSize int64
	// Targets restricts the targets (names as in AllTargets); empty means all.
	Targets []string
	Runs    int
	Seed    uint64
	// DaemonArgs are extra slackerd flags.
	DaemonArgs []string
	Progress   *rig.Progress
}

// AllTargets are the storage stacks measured, in report order.
var AllTargets = []string{"ext4", "ext4-loop", "xfs-loop", "btrfs-loop", "btrfs-nodatacow", "overlayfs", "slacker", "slacker-block", "slacker-cache"}

var targetDesc = map[string]string{
	"ext4":            "plain ext4: a directory of the host's filesystem (the data-volume case)",
	"ext4-loop":       "ext4 on a loop device (direct I/O) over a file of the host's ext4",
	"xfs-loop":        "xfs on a loop device (direct I/O)",
	"btrfs-loop":      "btrfs on a loop device (direct I/O), copy-on-write",
	"btrfs-nodatacow": "btrfs mounted with nodatacow",
	"overlayfs":       "containerd's overlayfs snapshot of the image (files in the lower layer)",
	"slacker":         "Slacker's container root in its default mode: an overlay over the node's read-only mount of the image (ext4 on loop on FUSE on slackerd), its upper layer on node-local disk",
	"slacker-block":   "Slacker's container root in block mode: ext4 on loop on FUSE on slackerd, a block clone of the image",
	"slacker-cache":   "slacker with slackerd's memory cache sized to hold all the files (--cache-memory)",
}

// The phases of the random reads on a Slacker root, after its cold and warm runs
// on the same root: where the data is when the run begins.
const (
	// PhaseNode: the data is on the node. Every test file was read whole through
	// the root, which was then given back, and fio reads a new root of the image
	// (the next container's): slackerd's cache holds what it keeps of the files
	// (Sample.CachedBytes), and its local image of the image if it wrote one
	// (Sample.LocalImageBytes). The page cache is dropped.
	PhaseNode = "node"
	// PhaseStore: the chunks are in the local store but not in the cache. The
	// root was given back, slackerd's cache purged (memory and disk tiers, local
	// images), and fio reads a new root; the page cache is dropped.
	PhaseStore = "store"
)

// Sample is one fio run.
type Sample struct {
	Target string `json:"target"`
	RW     string `json:"rw"`
	BS     int64  `json:"bs"`
	// Phase is "cold" (first run after the target was made cold: page cache dropped,
	// and for the container systems a fresh node), "warm" (right after), or for the
	// random reads on a Slacker root PhaseNode or PhaseStore.
	Phase string `json:"phase"`
	Run   int    `json:"run"`
	Result
	// WallS is fio's whole wall-clock time, set-up included (overlayfs copies every
	// file up when fio opens it for writing).
	WallS float64 `json:"wall_s"`
	// CachedBytes, in the phases PhaseNode and PhaseStore, is what slackerd's cache
	// held (memory and disk tiers) when the run began; Cache its statistics when
	// the run began and when it ended (the counters' differences say how the run's
	// reads were served).
	CachedBytes int64            `json:"cached_bytes,omitempty"`
	Cache       []api.CacheStats `json:"cache,omitempty"`
	// LocalImageBytes, in those phases, is the disk slackerd's local images took
	// when the run began (the root is read through its image's, if it has one).
	LocalImageBytes int64 `json:"local_image_bytes,omitempty"`
}

// Config is the run's fio configuration.
type Config struct {
	Jobs         int      `json:"jobs"`
	Depth        int      `json:"depth"`
	FileSize     int64    `json:"file_size"`
	Runtime      int      `json:"runtime_s"`
	SweepRuntime int      `json:"sweep_runtime_s"`
	SweepBS      []int64  `json:"sweep_bs"`
	LoopSize     int64    `json:"loop_size"`
	Runs         int      `json:"runs"`
	FioVersion   string   `json:"fio_version"`
	SlackerdArgs []string `json:"slackerd_args,omitempty"`
}

// Results is what a run measured (storage.json).
type Results struct {
	Meta    *eval.Meta        `json:"meta"`
	Config  Config            `json:"config"`
	Targets map[string]string `json:"targets"`
	Samples []Sample          `json:"samples"`
}

// target is one storage stack holding the data files.
type target interface {
	name() string
	// open makes the target cold and returns the directory holding the files.
	open(ctx context.Context) (string, error)
	// release undoes open (a container root is unmounted; a filesystem stays).
	release() error
	// close removes what the target made.
	close() error
}

const imageName = "eval-fio"

// Run measures every target.
func Run(ctx context.Context, o Options) (*Results, error) {
	if err := eval.NeedRoot("storage"); err != nil {
		return nil, err
	}
	if err := eval.NeedTools(map[string]string{"fio": "fio", "mkfs.xfs": "xfsprogs", "mkfs.btrfs": "btrfs-progs", "losetup": "util-linux"}); err != nil {
		return nil, err
	}
	if o.Jobs <= 0 || o.Depth <= 0 || o.FileSize < 1<<20 || o.Runtime <= 0 {
		return nil, fmt.Errorf("jobs, depth, runtime must be positive and the file size at least 1 MiB")
	}
	if o.Runs <= 0 {
		o.Runs = 1
	}
	names := o.Targets
	if len(names) == 0 {
		names = AllTargets
	}
	for _, n := range names {
		if targetDesc[n] == "" {
			return nil, fmt.Errorf("unknown target %q (have %s)", n, strings.Join(AllTargets, ", "))
		}
	}
	res := &Results{Meta: eval.NewMeta("storage"), Targets: map[string]string{},
		Config: Config{Jobs: o.Jobs, Depth: o.Depth, FileSize: o.FileSize, Runtime: o.Runtime, SweepRuntime: o.SweepRuntime,
			SweepBS: o.SweepBS, LoopSize: o.LoopSize, Runs: o.Runs, SlackerdArgs: o.DaemonArgs}}
	if out, err := exec.Command("fio", "--version").Output(); err == nil {
		res.Config.FioVersion = strings.TrimSpace(string(out))
	}
	for _, n := range names {
		res.Targets[n] = targetDesc[n]
	}
	if err := os.RemoveAll(o.Dir); err != nil {
		return nil, err
	}
	o.Progress.Printf("synthetic image: %d files of %s", o.Jobs, corpus.HumanBytes(o.FileSize))
	img, err := eval.SynthImage(ctx, o.ImagesDir, corpus.SynthSpec{Files: o.Jobs, Size: o.FileSize, Layers: 1, Seed: 7,
		Name: fmt.Sprintf("%s-%dx%s", imageName, o.Jobs, eval.SizeTag(o.FileSize))})
	if err != nil {
		return nil, err
	}
	blob, err := layerBlob(img)
	if err != nil {
		return nil, err
	}
	files := make([]string, o.Jobs)
	for i := range files {
		files[i] = corpus.SynthPath(i)
	}

	var pair *eval.Pair
	var targets []target
	defer func() {
		for _, t := range targets {
			if err := t.close(); err != nil {
				o.Progress.Printf("clean-up of %s: %v", t.name(), err)
			}
		}
		if pair != nil {
			pair.Close()
		}
	}()
	for _, n := range names {
		switch n {
		case "overlayfs", "slacker", "slacker-block", "slacker-cache":
			if pair == nil {
				var modes []string
				if slices.Contains(names, "slacker") {
					modes = append(modes, rig.RootShared)
				}
				if slices.Contains(names, "slacker-block") {
					modes = append(modes, rig.RootBlock)
				}
				if pair, err = eval.StartPair(ctx, eval.PairOptions{Dir: filepath.Join(o.Dir, "sys"), Binaries: o.Binaries, DaemonArgs: o.DaemonArgs,
					Modes: modes}); err != nil {
					return nil, err
				}
				// Published to the systems measured (slacker-cache publishes its own).
				var publish []rig.System
				for _, s := range pair.Systems() {
					if slices.Contains(names, s.Name()) {
						publish = append(publish, s)
					}
				}
				if len(publish) > 0 {
					o.Progress.Printf("publishing %s to %d systems", img.Name, len(publish))
					if err := pair.Publish(ctx, img, publish...); err != nil {
						return nil, err
					}
				}
			}
			var s rig.System
			switch n {
			case "overlayfs":
				s = pair.Overlay
			case "slacker":
				s = pair.Slacker
			case "slacker-block":
				s = pair.Block
			}
			ref := ""
			if s != nil {
				ref = pair.Ref(s, img.Name)
			}
			if n == "slacker-cache" {
				mem := fmt.Sprintf("--cache-memory=%d", 2*int64(o.Jobs)*o.FileSize)
				big, err := rig.NewSlacker(rig.SlackerOptions{Dir: filepath.Join(o.Dir, "sys", "slacker-cache"), RootMode: rig.RootShared,
					Slacker: o.Binaries.Slacker, Slackerd: o.Binaries.Slackerd, DaemonArgs: append(append([]string(nil), o.DaemonArgs...), mem)})
				if err != nil {
					return nil, err
				}
				defer big.Close()
				if ref, _, err = big.Publish(ctx, img, pair.Registry.Addr+"/cache"); err != nil {
					return nil, err
				}
				s = big
				res.Config.SlackerdArgs = append(res.Config.SlackerdArgs, "slacker-cache: "+mem)
			}
			targets = append(targets, &sysTarget{label: n, sys: s, ref: ref})
		default:
			o.Progress.Printf("making %s", n)
			t, err := newFSTarget(ctx, n, filepath.Join(o.Dir, "fs"), o.LoopSize, blob)
			if t != nil {
				targets = append(targets, t)
			}
			if err != nil {
				return nil, fmt.Errorf("%s: %w", n, err)
			}
		}
	}

	rng := rand.New(rand.NewPCG(o.Seed, uint64(time.Now().UnixNano())))
	for run := 1; run <= o.Runs; run++ {
		order := append([]target(nil), targets...)
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, t := range order {
			if ctx.Err() != nil {
				return res, ctx.Err()
			}
			res.Samples = append(res.Samples, measure(ctx, o, res.Meta, t, files, run)...)
		}
	}
	res.Meta.Done()
	return res, ctx.Err()
}

// measure runs one target's tests: random reads cold, warm and the block-size sweep
// on one cold instance (on a Slacker root then again with the data on the node and
// with the chunks only in the store: PhaseNode, PhaseStore), then random writes
// cold and warm on a fresh one.
func measure(ctx context.Context, o Options, meta *eval.Meta, t target, files []string, run int) []Sample {
	var out []Sample
	job := func(root, rw string, bs int64, runtime int) JobSpec {
		return JobSpec{RW: rw, BS: bs, Jobs: o.Jobs, Depth: o.Depth, Runtime: runtime, Files: files, Dir: root, FileSize: o.FileSize, Direct: true}
	}
	do := func(spec JobSpec, phase string) bool {
		r, wall, err := runFio(ctx, spec, filepath.Join(o.Dir, "jobs"))
		if err != nil {
			meta.Fail("%s %s %d %s run %d: %v", t.name(), spec.RW, spec.BS, phase, run, err)
			o.Progress.Printf("FAILED %s %s: %v", t.name(), spec.RW, err)
			return false
		}
		out = append(out, Sample{Target: t.name(), RW: spec.RW, BS: spec.BS, Phase: phase, Run: run, Result: r, WallS: wall.Seconds()})
		o.Progress.Printf("run %d %-16s %-9s %6s %s: %8.0f IOPS  p50 %7.0fµs  p99 %8.0fµs  (%s)", run, t.name(), spec.RW,
			sizeName(spec.BS), phase, r.IOPS, r.P50Us, r.P99Us, strings.TrimSuffix(wall.Round(time.Millisecond).String(), "0s"))
		return true
	}
	for _, rw := range []string{"randread", "randwrite"} {
		root, err := t.open(ctx)
		if err != nil {
			meta.Fail("%s %s run %d: open: %v", t.name(), rw, run, err)
			continue
		}
		if do(job(root, rw, 4096, o.Runtime), "cold") {
			do(job(root, rw, 4096, o.Runtime), "warm")
			if rw == "randread" {
				for _, bs := range o.SweepBS {
					do(job(root, rw, bs, o.SweepRuntime), "warm")
				}
				if st, ok := t.(*sysTarget); ok && st.slacker() != nil {
					for _, phase := range []string{PhaseNode, PhaseStore} {
						var before api.NodeStats
						if root, before, err = st.prepare(ctx, phase, root, files); err != nil {
							meta.Fail("%s %s run %d: %v", t.name(), phase, run, err)
							o.Progress.Printf("FAILED %s %s: %v", t.name(), phase, err)
							break
						}
						held := before.Cache.MemBytes + before.Cache.DiskBytes
						o.Progress.Printf("run %d %-16s %s: slackerd's cache holds %s, local images %s", run, t.name(), phase,
							corpus.HumanBytes(held), corpus.HumanBytes(before.LocalImages.Bytes))
						if !do(job(root, rw, 4096, o.Runtime), phase) {
							continue
						}
						smp := &out[len(out)-1]
						smp.CachedBytes, smp.Cache = held, []api.CacheStats{before.Cache}
						smp.LocalImageBytes = before.LocalImages.Bytes
						if after, err := st.slacker().Client().Stats(ctx); err == nil {
							smp.Cache = append(smp.Cache, after.Cache)
						}
					}
				}
			}
		}
		if err := t.release(); err != nil {
			meta.Fail("%s release: %v", t.name(), err)
		}
	}
	return out
}

// runFio writes the job file and runs fio.
func runFio(ctx context.Context, spec JobSpec, dir string) (Result, time.Duration, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Result{}, 0, err
	}
	jf := filepath.Join(dir, fmt.Sprintf("%s-%d.fio", spec.RW, spec.BS))
	if err := os.WriteFile(jf, []byte(spec.JobFile()), 0o644); err != nil {
		return Result{}, 0, err
	}
	outFile := jf + ".json"
	tctx, cancel := context.WithTimeout(ctx, time.Duration(spec.Runtime)*time.Second+10*time.Minute)
	defer cancel()
	start := time.Now()
	cmd := exec.CommandContext(tctx, "fio", "--output-format=json", "--output="+outFile, jf)
	msg, err := cmd.CombinedOutput()
	wall := time.Since(start)
	if err != nil {
		return Result{}, wall, fmt.Errorf("fio: %w: %s", err, tail(string(msg)))
	}
	b, err := os.ReadFile(outFile)
	if err != nil {
		return Result{}, wall, err
	}
	dirName := "read"
	if strings.Contains(spec.RW, "write") {
		dirName = "write"
	}
	r, err := ParseFio(b, dirName)
	if err == nil && r.Errors > 0 {
		err = fmt.Errorf("fio reported errors in %d jobs", r.Errors)
	}
	return r, wall, err
}

func tail(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 600 {
		s = "..." + s[len(s)-600:]
	}
	return s
}

func sizeName(bs int64) string {
	switch {
	case bs >= 1<<20 && bs%(1<<20) == 0:
		return fmt.Sprintf("%dM", bs>>20)
	case bs >= 1<<10 && bs%(1<<10) == 0:
		return fmt.Sprintf("%dk", bs>>10)
	}
	return fmt.Sprint(bs)
}

// layerBlob is the path of the single layer blob of img.
func layerBlob(img rig.Image) (string, error) {
	l, err := corpus.OpenLayout(img.Layout)
	if err != nil {
		return "", err
	}
	tags, err := l.Tags()
	if err != nil {
		return "", err
	}
	m, _, err := l.Manifest(tags[img.Tag])
	if err != nil {
		return "", err
	}
	if len(m.Layers) != 1 {
		return "", fmt.Errorf("image %s has %d layers, want 1", img.Tag, len(m.Layers))
	}
	return l.BlobPath(m.Layers[0].Digest.String()), nil
}

// sysTarget is a container root of a system, fresh and cold for every open.
type sysTarget struct {
	label   string
	sys     rig.System
	ref     string
	unmount func() error
}

func (t *sysTarget) name() string { return t.label }

// slacker is the target's Slacker system (nil for containerd).
func (t *sysTarget) slacker() *rig.Slacker {
	s, _ := t.sys.(*rig.Slacker)
	return s
}

// prepare puts the Slacker root's data where phase says, and returns the root
// fio then reads and slackerd's statistics at that moment. PhaseNode reads every
// file whole through the open root at root, so that the node keeps what it can of
// them, and then gives the root back and takes a new one, as the next container
// of the image would, once slackerd has written what it writes when the image's
// last root goes (its local image, docs/design.md). PhaseStore gives the root back,
// purges slackerd's cache (memory and disk tiers, local images) and takes a new
// root. Both drop the page cache last.
func (t *sysTarget) prepare(ctx context.Context, phase, root string, files []string) (string, api.NodeStats, error) {
	c := t.slacker().Client()
	switch phase {
	case PhaseNode:
		for _, f := range files {
			if err := readAll(filepath.Join(root, f)); err != nil {
				return "", api.NodeStats{}, fmt.Errorf("read the data onto the node: %w", err)
			}
		}
	case PhaseStore:
	default:
		return "", api.NodeStats{}, fmt.Errorf("unknown phase %q", phase)
	}
	if err := t.release(); err != nil {
		return "", api.NodeStats{}, err
	}
	if phase == PhaseStore {
		if err := c.DropCaches(ctx, true); err != nil {
			return "", api.NodeStats{}, fmt.Errorf("purge slackerd's cache: %w", err)
		}
	} else if err := waitLocalImages(ctx, c); err != nil {
		return "", api.NodeStats{}, err
	}
	root, err := t.mount(ctx)
	if err != nil {
		return "", api.NodeStats{}, err
	}
	st, err := c.Stats(ctx)
	return root, st, err
}

// waitLocalImages waits until slackerd has tried the local images of its idle
// image roots (they are tried once a root has been idle a few seconds) and writes
// none, at most 10 minutes.
func waitLocalImages(ctx context.Context, c *api.Client) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	for {
		st, err := c.Stats(ctx)
		if err != nil {
			return fmt.Errorf("wait for local images: %w", err)
		}
		if st.LocalImages.Pending == 0 && st.LocalImages.Writing == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for local images: %w", ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// readAll reads the file at path to its end, 1 MiB at a time.
func readAll(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for {
		if _, err := f.Read(buf); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
	}
}

func (t *sysTarget) open(ctx context.Context) (string, error) {
	if err := t.sys.Cold(ctx); err != nil {
		return "", err
	}
	return t.mount(ctx)
}

// mount takes a new root of the image and drops the page cache.
func (t *sysTarget) mount(ctx context.Context) (string, error) {
	root, release, err := t.sys.Mount(ctx, t.ref)
	if err != nil {
		return "", err
	}
	t.unmount = release
	return root, rig.DropCaches()
}

func (t *sysTarget) release() error {
	if t.unmount == nil {
		return nil
	}
	err := t.unmount()
	t.unmount = nil
	return err
}

func (t *sysTarget) close() error { return t.release() }

// fsTarget is a filesystem holding a copy of the files: a directory of the host's
// filesystem, or a filesystem made on a loop device of its own.
type fsTarget struct {
	n             string
	img, mnt, dev string
}

func newFSTarget(ctx context.Context, name, dir string, loopSize int64, blob string) (*fsTarget, error) {
	t := &fsTarget{n: name, mnt: filepath.Join(dir, name)}
	if err := os.MkdirAll(t.mnt, 0o755); err != nil {
		return nil, err
	}
	if name != "ext4" {
		t.img = filepath.Join(dir, name+".img")
		f, err := os.Create(t.img)
		if err != nil {
			return nil, err
		}
		err = f.Truncate(loopSize)
		f.Close()
		if err != nil {
			return t, err
		}
		out, err := exec.CommandContext(ctx, "losetup", "--find", "--show", "--direct-io=on", t.img).CombinedOutput()
		if err != nil {
			return t, fmt.Errorf("losetup: %w: %s", err, out)
		}
		t.dev = strings.TrimSpace(string(out))
		var mkfs []string
		opts := ""
		switch name {
		case "ext4-loop":
			mkfs = []string{"mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", t.dev}
		case "xfs-loop":
			mkfs = []string{"mkfs.xfs", "-q", "-f", t.dev}
		case "btrfs-loop", "btrfs-nodatacow":
			mkfs = []string{"mkfs.btrfs", "-q", "-f", t.dev}
			if name == "btrfs-nodatacow" {
				opts = "nodatacow"
			}
		}
		if out, err := exec.CommandContext(ctx, mkfs[0], mkfs[1:]...).CombinedOutput(); err != nil {
			return t, fmt.Errorf("%s: %w: %s", mkfs[0], err, out)
		}
		args := []string{t.dev, t.mnt}
		if opts != "" {
			args = append([]string{"-o", opts}, args...)
		}
		if out, err := exec.CommandContext(ctx, "mount", args...).CombinedOutput(); err != nil {
			return t, fmt.Errorf("mount: %w: %s", err, out)
		}
	}
	files := filepath.Join(t.mnt, "files")
	if err := os.Mkdir(files, 0o755); err != nil {
		return t, err
	}
	if err := corpus.ExtractLayerToDir(ctx, blob, files); err != nil {
		return t, err
	}
	return t, nil
}

func (t *fsTarget) name() string { return t.n }

func (t *fsTarget) open(ctx context.Context) (string, error) {
	return filepath.Join(t.mnt, "files"), rig.DropCaches()
}

func (t *fsTarget) release() error { return nil }

func (t *fsTarget) close() error {
	var errs []error
	if t.dev != "" {
		if out, err := exec.Command("umount", t.mnt).CombinedOutput(); err != nil && !strings.Contains(string(out), "not mounted") {
			errs = append(errs, fmt.Errorf("umount %s: %w: %s", t.mnt, err, out))
		}
		if out, err := exec.Command("losetup", "-d", t.dev).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("losetup -d %s: %w: %s", t.dev, err, out))
		}
	}
	if len(errs) == 0 {
		errs = append(errs, os.RemoveAll(t.mnt))
		if t.img != "" {
			errs = append(errs, os.Remove(t.img))
		}
	}
	return errors.Join(errs...)
}
