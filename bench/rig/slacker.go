package rig

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/slacker-dev/slacker/internal/api"
	"github.com/slacker-dev/slacker/internal/runc"
)

// SlackerOptions configure a Slacker system.
type SlackerOptions struct {
	Dir      string // holds store/, publish/ and node/
	Slacker  string // the slacker binary
	Slackerd string // the slackerd binary
	// DaemonArgs are extra slackerd flags (e.g. --chunk-size).
	DaemonArgs []string
	// Store is the chunk store's location (slackerd --store): a directory or a URL
	// that storeurl understands; default Dir/store.
	Store string
	// Snapshotter serves containerd's snapshots API too. Off, the node does not make
	// the snapshotter's blank base when it starts (on a cold node in every sample,
	// that is a mkfs and an upload beside the measured pull and run).
	Snapshotter bool
	// RootMode is how the system makes container roots: RootShared (slackerd's
	// default) or RootBlock. slackerd is started with --container-root RootMode,
	// `slacker run` is given --root-mode RootMode (an image's label cannot change
	// it), and Mount and the evaluation's launched containers make roots of that
	// mode. A RootBlock system is called "slacker-block", so that results keep the
	// name "slacker" for the default mode. Empty leaves `slacker run` to slackerd's
	// default and makes Mount's root a block clone (the volume API's default for a
	// volume that is not a container's), as the core benchmark has always measured.
	RootMode string
}

// Container root modes of a Slacker system (slackerd --container-root).
const (
	RootShared = "shared"
	RootBlock  = "block"
)

// Names of the systems in results: the default mode keeps "slacker", and the
// containerd baseline is "overlayfs".
const (
	SlackerName      = "slacker"
	SlackerBlockName = "slacker-block"
	OverlayfsName    = "overlayfs"
)

// Slacker is slackerd and the slacker CLI. The chunk store (Dir/store) survives Cold;
// the node's state (Dir/node: cache, volumes, names) does not.
type Slacker struct {
	o      SlackerOptions
	daemon *daemon
	root   string
	client *api.Client
	// registryBytes is what pulls moved from the registry since Cold.
	registryBytes int64
}

// NewSlacker returns the system; nothing runs until Publish or Cold.
func NewSlacker(o SlackerOptions) (*Slacker, error) {
	if o.RootMode != "" && o.RootMode != RootShared && o.RootMode != RootBlock {
		return nil, fmt.Errorf("slacker system: container root mode %q: want %q or %q", o.RootMode, RootShared, RootBlock)
	}
	for _, b := range []string{o.Slacker, o.Slackerd} {
		if _, err := os.Stat(b); err != nil {
			return nil, fmt.Errorf("slacker system: %w (build with scripts/setup.sh)", err)
		}
	}
	return &Slacker{o: o}, nil
}

// Name is "slacker-block" for a RootBlock system, else "slacker".
func (s *Slacker) Name() string { return SlackerNameOf(s.o.RootMode) }

// SlackerNameOf is the name of the Slacker system of root mode mode.
func SlackerNameOf(mode string) string {
	if mode == RootBlock {
		return SlackerBlockName
	}
	return SlackerName
}

// RootMode is the system's container root mode (SlackerOptions.RootMode; empty
// when it has none of its own).
func (s *Slacker) RootMode() string { return s.o.RootMode }

// runFlags are the flags `slacker run` takes before the image: the system's root
// mode, when it has one.
func (s *Slacker) runFlags() []string {
	if s.o.RootMode == "" {
		return nil
	}
	return []string{"--root-mode", s.o.RootMode}
}

// Store is the chunk store's location.
func (s *Slacker) Store() string {
	if s.o.Store != "" {
		return s.o.Store
	}
	return filepath.Join(s.o.Dir, "store")
}

func (s *Slacker) socket() string { return filepath.Join(s.root, "slackerd.sock") }

// start starts slackerd on root (same store).
func (s *Slacker) start(ctx context.Context, root string, extra ...string) error {
	s.stop()
	if err := os.MkdirAll(root, 0o700); err != nil {
		return err
	}
	s.root = root
	s.client = api.NewClient(s.socket())
	ready := func(ctx context.Context) bool { _, err := s.client.Info(ctx); return err == nil }
	d, err := startDaemon(ctx, "slackerd", s.o.Slackerd, s.daemonArgs(root, extra...), filepath.Join(root, "slackerd.log"), ready)
	s.daemon = d
	return err
}

// daemonArgs are slackerd's flags on root: the system's extra flags, then
// extra. The root mode comes after them, so that the system is what its name says
// whatever they hold.
func (s *Slacker) daemonArgs(root string, extra ...string) []string {
	args := []string{"--root", root, "--socket", s.socket(), "--store", s.Store()}
	if !s.o.Snapshotter {
		args = append(args, "--snapshotter-socket", "off")
	}
	args = append(args, s.o.DaemonArgs...)
	args = append(args, extra...)
	if s.o.RootMode != "" {
		args = append(args, "--container-root", s.o.RootMode)
	}
	return args
}

func (s *Slacker) stop() {
	s.daemon.stop()
	s.daemon = nil
}

func (s *Slacker) cli(ctx context.Context, stdin io.Reader, args ...string) (RunResult, error) {
	// The rig's registries speak plain HTTP, and containerd's side is told so
	// (ctr --plain-http): Slacker's is too, so that neither tries HTTPS first.
	args = append([]string{"--insecure-registry"}, args...)
	cmd := exec.CommandContext(ctx, s.o.Slacker, args...)
	cmd.Env = append(os.Environ(), "SLACKER_SOCKET="+s.socket())
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr, cmd.Stdin = &out, &errb, stdin
	start := time.Now()
	err := cmd.Run()
	r := RunResult{Took: time.Since(start), Stdout: out.String(), Stderr: errb.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.ExitCode = ee.ExitCode()
		err = nil
	}
	return r, err
}

func (s *Slacker) mustCLI(ctx context.Context, args ...string) (RunResult, error) {
	r, err := s.cli(ctx, nil, args...)
	if err == nil && r.ExitCode != 0 {
		err = fmt.Errorf("slacker %s: exit %d: %s", strings.Join(args, " "), r.ExitCode, strings.TrimSpace(r.Stderr))
	}
	return r, err
}

// Publish converts the image on a publishing node sharing the store and pushes its
// descriptor, to a repository named after the system (REGISTRY/slacker/NAME,
// REGISTRY/slacker-block/NAME). The push time is the descriptor push; conversion is
// reported apart.
func (s *Slacker) Publish(ctx context.Context, img Image, registryAddr string) (string, time.Duration, error) {
	if err := s.start(ctx, filepath.Join(s.o.Dir, "publish")); err != nil {
		return "", 0, err
	}
	defer s.stop()
	if _, err := s.mustCLI(ctx, "convert", "-q", "oci:"+img.Layout+":"+img.Tag, img.Name); err != nil {
		return "", 0, err
	}
	ref := s.ref(registryAddr, img.Name)
	r, err := s.mustCLI(ctx, "push", img.Name, ref)
	if err != nil {
		return "", 0, err
	}
	return ref, r.Took, nil
}

// Optimize lays the published image out for start-up from its stored trace on the
// publishing node and pushes it again to the same reference. The time returned is
// the push's.
func (s *Slacker) Optimize(ctx context.Context, img Image, registryAddr string) (*api.Layout, time.Duration, error) {
	if err := s.start(ctx, filepath.Join(s.o.Dir, "publish")); err != nil {
		return nil, 0, err
	}
	defer s.stop()
	r, err := s.mustCLI(ctx, "optimize", "--json", img.Name)
	if err != nil {
		return nil, 0, err
	}
	var out struct {
		Layout api.Layout `json:"layout"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &out); err != nil {
		return nil, 0, fmt.Errorf("slacker optimize --json: %w: %q", err, r.Stdout)
	}
	p, err := s.mustCLI(ctx, "push", img.Name, s.ref(registryAddr, img.Name))
	if err != nil {
		return nil, 0, err
	}
	return &out.Layout, p.Took, nil
}

// ref is where Publish pushes image name.
func (s *Slacker) ref(registryAddr, name string) string {
	return fmt.Sprintf("%s/%s/%s:latest", registryAddr, s.Name(), name)
}

// Cold restarts slackerd on an empty node directory.
func (s *Slacker) Cold(ctx context.Context) error {
	s.stop()
	s.registryBytes = 0
	root := filepath.Join(s.o.Dir, "node")
	if err := os.RemoveAll(root); err != nil {
		return fmt.Errorf("reset node: %w", err)
	}
	if err := DropCaches(); err != nil {
		return err
	}
	return s.start(ctx, root)
}

func (s *Slacker) Pull(ctx context.Context, ref string) (time.Duration, error) {
	r, err := s.mustCLI(ctx, "pull", "--json", ref)
	if err != nil {
		return r.Took, err
	}
	var out struct {
		BytesMoved int64 `json:"bytes_moved"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &out); err != nil {
		return r.Took, fmt.Errorf("slacker pull --json: %w: %q", err, r.Stdout)
	}
	s.registryBytes += out.BytesMoved
	return r.Took, nil
}

// Traffic is what pulls moved from the registry and what the node fetched from
// the store (block maps and chunks) since Cold.
func (s *Slacker) Traffic(ctx context.Context) (Traffic, error) {
	n, err := s.FetchedBytes(ctx)
	return Traffic{RegistryBytes: s.registryBytes, StoreBytes: n}, err
}

func (s *Slacker) Run(ctx context.Context, ref string, args []string, stdin io.Reader) (RunResult, error) {
	run := append(append([]string{"run", "--rm", "-i"}, s.runFlags()...), ref, "--")
	return s.cli(ctx, stdin, append(run, args...)...)
}

func (s *Slacker) FetchedBytes(ctx context.Context) (int64, error) {
	st, err := s.client.Stats(ctx)
	return st.Fetch.FetchedBytes, err
}

// PeakRSS is slackerd's peak resident set size since it started.
func (s *Slacker) PeakRSS(ctx context.Context) (int64, error) {
	st, err := s.client.Stats(ctx)
	return st.PeakRSS, err
}

// Mount makes a mounted container root of the pulled image: of the system's root
// mode, or a block clone when it has none.
func (s *Slacker) Mount(ctx context.Context, ref string) (string, func() error, error) {
	if _, err := s.mustCLI(ctx, "pull", ref); err != nil {
		return "", nil, err
	}
	var imgs []struct {
		Name       string `json:"name"`
		Descriptor struct {
			Snapshot string `json:"snapshot"`
		} `json:"descriptor"`
	}
	r, err := s.mustCLI(ctx, "images", "--json")
	if err != nil {
		return "", nil, err
	}
	if err := json.Unmarshal([]byte(r.Stdout), &imgs); err != nil {
		return "", nil, err
	}
	for _, im := range imgs {
		if im.Name == ref {
			id := fmt.Sprintf("bench-%d", time.Now().UnixNano())
			v, err := s.client.CreateVolume(ctx, api.CreateVolumeRequest{ID: id, Snapshot: digestOf(im.Descriptor.Snapshot), Mount: true, Mode: s.o.RootMode})
			if err != nil {
				return "", nil, err
			}
			return v.Mountpoint, func() error { return s.client.DeleteVolume(context.WithoutCancel(ctx), id) }, nil
		}
	}
	return "", nil, fmt.Errorf("pulled %s but it is not listed", ref)
}

func (s *Slacker) Close() error {
	s.stop()
	return nil
}

func tail(s string) string {
	if len(s) > 2000 {
		return s[len(s)-2000:]
	}
	return s
}

// Start runs `slacker run` in the background (without --rm, so the container's
// statistics can be read before Remove deletes it).
func (s *Slacker) Start(ctx context.Context, ref string, spec RunSpec) (*Container, error) {
	if s.client == nil {
		return nil, fmt.Errorf("slackerd is not running (Cold first)")
	}
	info, err := s.client.Info(ctx)
	if err != nil {
		return nil, err
	}
	args := append([]string{"run", "--name", spec.Name}, s.runFlags()...)
	if spec.Stdin != nil {
		args = append(args, "-i")
	}
	args = append(append(args, ref, "--"), spec.Args...)
	cmd := exec.Command(s.o.Slacker, args...)
	cmd.Env = append(os.Environ(), "SLACKER_SOCKET="+s.socket())
	rt := runtimeOf(info.StateRoot)
	var id string
	var ops ContainerOps
	ops.PID = func(ctx context.Context) (int, error) {
		if id == "" {
			if id = containerID(info.StateRoot, spec.Name); id == "" {
				return 0, fmt.Errorf("container %s not created yet", spec.Name)
			}
		}
		status, pid := rt.State(ctx, id)
		if status != "running" && status != "created" {
			return 0, fmt.Errorf("container %s is %q", spec.Name, status)
		}
		return pid, nil
	}
	ops.Kill = func(ctx context.Context) error {
		if id == "" {
			id = containerID(info.StateRoot, spec.Name)
		}
		_, err := must(ctx, "runc", "--root", filepath.Join(info.StateRoot, "runc"), "kill", id, "KILL")
		return err
	}
	ops.Remove = func(ctx context.Context) (ContainerStats, error) {
		st := ContainerStats{ReadBytes: -1, FetchedBytes: -1}
		r, err := s.cli(ctx, nil, "stats", "--json", spec.Name)
		if err == nil && r.ExitCode == 0 {
			var out struct {
				Containers []struct {
					Volume api.VolumeStats `json:"volume"`
				} `json:"containers"`
			}
			if json.Unmarshal([]byte(r.Stdout), &out) == nil && len(out.Containers) == 1 {
				st.ReadBytes, st.FetchedBytes = out.Containers[0].Volume.BaseReadBytes, out.Containers[0].Volume.FetchedBytes
			}
		}
		if ns, err := s.client.Stats(ctx); err == nil {
			st.TracesReplayed = &ns.Prefetch.TracesReplayed
		}
		r, err = s.cli(ctx, nil, "rm", "-f", spec.Name)
		if err == nil && r.ExitCode != 0 && !strings.Contains(r.Stderr, "no such container") {
			err = fmt.Errorf("slacker rm %s: %s", spec.Name, strings.TrimSpace(r.Stderr))
		}
		return st, err
	}
	return StartContainer(cmd, spec, ops)
}

// containerID finds the ID of the container called name in Slacker's state.
func containerID(stateRoot, name string) string {
	ents, _ := os.ReadDir(filepath.Join(stateRoot, "containers"))
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(stateRoot, "containers", e.Name(), "container.json"))
		if err != nil {
			continue
		}
		var r struct {
			ID   string `json:"id"`
			Name string `json:"name"`
		}
		if json.Unmarshal(b, &r) == nil && r.Name == name {
			return r.ID
		}
	}
	return ""
}

func runtimeOf(stateRoot string) *runc.Runtime {
	return &runc.Runtime{Root: filepath.Join(stateRoot, "runc")}
}

// PushChange makes the change on the publishing node as a developer would: a
// container of the image (its command is not run: /hellobench-nothing does not
// exist, so runc stops before it, leaving the container and its volume), the file
// written into its root, `slacker commit` (which uploads the changed chunks to the
// store) and `slacker push` of the new image's descriptor. Took is commit + push.
// The publishing node records no start-up trace: its container never runs the
// workload, and a trace of it (runc's few reads) would be replayed by the next
// start of the image anywhere, a deployment sample's included, which would then
// be neither a first run nor a traced one.
func (s *Slacker) PushChange(ctx context.Context, img Image, ref string, ch Change) (PushResult, error) {
	if err := s.start(ctx, filepath.Join(s.o.Dir, "publish"), "--startup-trace", "off"); err != nil {
		return PushResult{}, err
	}
	defer s.stop()
	name := "change-" + img.Name + "-" + ch.Tag
	s.cli(ctx, nil, "rm", "-f", name)
	run := append(append([]string{"run", "--name", name}, s.runFlags()...), "--entrypoint", "", img.Name, "--", "/hellobench-nothing")
	if _, err := s.cli(ctx, nil, run...); err != nil {
		return PushResult{}, err
	}
	defer s.cli(context.WithoutCancel(ctx), nil, "rm", "-f", name)
	ps, err := s.mustCLI(ctx, "ps", "-a", "--json")
	if err != nil {
		return PushResult{}, err
	}
	var recs []struct {
		Name   string `json:"name"`
		Rootfs string `json:"rootfs"`
	}
	if err := json.Unmarshal([]byte(ps.Stdout), &recs); err != nil {
		return PushResult{}, fmt.Errorf("slacker ps --json: %w", err)
	}
	rootfs := ""
	for _, r := range recs {
		if r.Name == name {
			rootfs = r.Rootfs
		}
	}
	if rootfs == "" {
		return PushResult{}, fmt.Errorf("the change container %s was not created", name)
	}
	if err := writeInRoot(rootfs, ch); err != nil {
		return PushResult{}, err
	}
	tag := img.Name + ":" + ch.Tag
	commit, err := s.mustCLI(ctx, "commit", "--json", "-m", "hellobench change "+ch.Tag, name, tag)
	if err != nil {
		return PushResult{}, err
	}
	var snap api.Snapshot
	json.Unmarshal([]byte(commit.Stdout), &snap)
	newRef := retag(ref, ch.Tag)
	push, err := s.mustCLI(ctx, "push", "--json", tag, newRef)
	if err != nil {
		return PushResult{}, err
	}
	var pr struct {
		BytesMoved int64 `json:"bytesMoved"`
	}
	json.Unmarshal([]byte(push.Stdout), &pr)
	return PushResult{Ref: newRef, Took: commit.Took + push.Took,
		Parts: map[string]time.Duration{"commit": commit.Took, "push": push.Took},
		Bytes: snap.NewBytes + pr.BytesMoved}, nil
}

// writeInRoot writes ch's file into the container root at rootfs, resolving the
// path inside it.
func writeInRoot(rootfs string, ch Change) error {
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return err
	}
	defer root.Close()
	rel := strings.TrimPrefix(ch.Path, "/")
	if dir := filepath.Dir(rel); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("write change: %w", err)
		}
	}
	f, err := root.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("write change: %w", err)
	}
	if _, err := f.Write(ch.Content); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return root.Chtimes(rel, ChangeTime, ChangeTime)
}
