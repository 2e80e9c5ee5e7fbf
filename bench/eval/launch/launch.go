package launch

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/slacker-dev/slacker/bench/eval"
	"github.com/slacker-dev/slacker/bench/rig"
	"github.com/slacker-dev/slacker/internal/api"
	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/runc"
)

// Launcher starts containers of one image on one system.
type Launcher interface {
	// command prepares container id (its /etc files; on Slacker its volume and
	// bundle) and returns the command that runs it in the foreground.
	command(ctx context.Context, id string) (*exec.Cmd, error)
	pid(ctx context.Context, id string) (int, error)
	kill(ctx context.Context, id string) error
	remove(ctx context.Context, id string) error
	// VolumeStats is the container's volume's statistics (Slacker only).
	VolumeStats(ctx context.Context, id string) (api.VolumeStats, bool)
	// volume describes the container's volume (Slacker only).
	volume(ctx context.Context, id string) (api.Volume, bool)
}

// ReadBytes is what the roots of the containers ids read through FUSE (0 on
// containerd): each block clone's own reads, and each shared image root's once,
// however many of the containers' shared roots stand on it (every one of them
// reports the image root's counters).
func ReadBytes(ctx context.Context, l Launcher, ids []string) int64 {
	var n int64
	images := map[digest.Digest]bool{}
	for _, id := range ids {
		v, ok := l.volume(ctx, id)
		if !ok {
			continue
		}
		if v.Mode == rig.RootShared {
			if images[v.Image] {
				continue
			}
			images[v.Image] = true
		}
		n += v.Stats.ReadBytes
	}
	return n
}

// opsOf is what l does to container id, for the rig's container.
func opsOf(l Launcher, id string) rig.ContainerOps {
	return rig.ContainerOps{
		PID:  func(ctx context.Context) (int, error) { return l.pid(ctx, id) },
		Kill: func(ctx context.Context) error { return l.kill(ctx, id) },
		Remove: func(ctx context.Context) (rig.ContainerStats, error) {
			return rig.ContainerStats{ReadBytes: -1, FetchedBytes: -1}, l.remove(ctx, id)
		},
	}
}

// Options configure a launcher.
type Options struct {
	// Dir holds bundles, /etc files and pid files (created; removed by the caller).
	Dir string
	// Ref is the image as the system pulled it; Config its OCI config (Slacker reads
	// the command, user and environment from it, as its names store would).
	Ref    string
	Config v1.Config
	// Args replace the image's command when set (the image's user, environment and
	// working directory apply).
	Args []string
	// Cgroup, if set, is the parent of the containers' cgroups.
	Cgroup eval.Cgroup
}

// New returns the launcher of s (which has pulled o.Ref).
func New(ctx context.Context, s rig.System, o Options) (Launcher, error) {
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	switch sys := s.(type) {
	case *rig.Containerd:
		return &ctrLauncher{sys: sys, o: o}, nil
	case *rig.Slacker:
		snap, err := snapshotOf(ctx, sys, o.Ref)
		if err != nil {
			return nil, err
		}
		return &slackerLauncher{sys: sys, o: o, snapshot: snap}, nil
	}
	return nil, fmt.Errorf("no launcher for %s", s.Name())
}

// Container is a started container: the rig's, whose output lines are matched
// against the patterns given to WaitLine. Remove stops and deletes it (its volume
// too).
type Container struct {
	*rig.Container
	ID    string
	lines chan string
}

// Start starts container id.
func Start(ctx context.Context, l Launcher, id string) (*Container, error) {
	began := time.Now()
	cmd, err := l.command(ctx, id)
	if err != nil {
		return nil, err
	}
	c := &Container{ID: id, lines: make(chan string, 1024)}
	pr, pw := io.Pipe()
	if c.Container, err = rig.StartContainer(cmd, rig.RunSpec{Name: id, Stdout: pw, Stderr: pw}, opsOf(l, id)); err != nil {
		pw.Close()
		return nil, err
	}
	// What the launcher prepared (on Slacker the volume's clone and mount) counts
	// in the start, as it does inside `slacker run`.
	c.Started = began
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			select {
			case c.lines <- sc.Text():
			default: // nobody waiting for lines: drop
			}
		}
		io.Copy(io.Discard, pr)
		close(c.lines)
	}()
	go func() {
		<-c.Done() // the run command has exited and its output is all written
		pw.Close()
	}()
	return c, nil
}

// WaitLine waits for an output line matching re; it fails if the container exits
// first or ctx ends. It returns when the line was seen.
func (c *Container) WaitLine(ctx context.Context, re *regexp.Regexp) (time.Time, error) {
	for {
		select {
		case l, ok := <-c.lines:
			if !ok {
				<-c.Done()
				return time.Time{}, fmt.Errorf("%s exited (status %d) without printing /%s/: %s", c.ID, c.ExitCode(), re, c.Tail())
			}
			if re.MatchString(l) {
				return time.Now(), nil
			}
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("%s: no line /%s/: %w: %s", c.ID, re, ctx.Err(), c.Tail())
		}
	}
}

// Tail is the end of the container's output (both streams: Start gives them one
// writer), its last lines on one line.
func (c *Container) Tail() string { return rig.LastLines(c.StderrTail(), 5) }

// etc writes the container's /etc files.
func etc(dir, id string) (string, error) {
	d := filepath.Join(dir, "etc", id)
	return d, runc.WriteEtc(d, id, false)
}

// ctrLauncher runs `ctr run --rm` against the system's containerd.
type ctrLauncher struct {
	sys *rig.Containerd
	o   Options
}

func (l *ctrLauncher) pidFile(id string) string { return filepath.Join(l.o.Dir, "pid-"+id) }

func (l *ctrLauncher) command(ctx context.Context, id string) (*exec.Cmd, error) {
	ed, err := etc(l.o.Dir, id)
	if err != nil {
		return nil, err
	}
	args := []string{"-a", l.sys.Socket(), "-n", "bench", "run", "--rm", "--snapshotter", "overlayfs", "--pid-file", l.pidFile(id)}
	if l.o.Cgroup != "" {
		args = append(args, "--cgroup", string(l.o.Cgroup.Child(id)))
	}
	for _, f := range runc.EtcFiles {
		args = append(args, "--mount", fmt.Sprintf("type=bind,src=%s,dst=/etc/%s,options=rbind:rw", filepath.Join(ed, f), f))
	}
	args = append(append(args, l.o.Ref, id), l.o.Args...)
	return exec.Command("ctr", args...), nil
}

func (l *ctrLauncher) pid(ctx context.Context, id string) (int, error) {
	b, err := os.ReadFile(l.pidFile(id))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

func (l *ctrLauncher) kill(ctx context.Context, id string) error {
	r, err := l.sys.Ctr(ctx, "tasks", "kill", "-s", "SIGKILL", id)
	if err == nil && r.ExitCode != 0 && !strings.Contains(r.Stderr, "not found") {
		err = fmt.Errorf("ctr tasks kill %s: %s", id, strings.TrimSpace(r.Stderr))
	}
	return err
}

// remove: `ctr run --rm` removed the container and its snapshot when it exited; a
// container left behind (its run command killed) is removed here.
func (l *ctrLauncher) remove(ctx context.Context, id string) error {
	r, err := l.sys.Ctr(ctx, "containers", "rm", id)
	if err == nil && r.ExitCode != 0 && !strings.Contains(r.Stderr, "not found") {
		err = fmt.Errorf("ctr containers rm %s: %s", id, strings.TrimSpace(r.Stderr))
	}
	os.Remove(l.pidFile(id))
	os.RemoveAll(filepath.Join(l.o.Dir, "etc", id))
	return err
}

func (l *ctrLauncher) VolumeStats(ctx context.Context, id string) (api.VolumeStats, bool) {
	return api.VolumeStats{}, false
}

func (l *ctrLauncher) volume(ctx context.Context, id string) (api.Volume, bool) {
	return api.Volume{}, false
}

// slackerLauncher does what `slacker run` does (a root made from the image's
// snapshot in the system's root mode, a block clone when it has none, mounted; a
// runc bundle from the image's config; runc run) in a runc root of its own, with
// the container's cgroup under ours when asked. Unlike `slacker run` it neither
// replays nor records start-up traces.
type slackerLauncher struct {
	sys      *rig.Slacker
	o        Options
	snapshot digest.Digest
}

func (l *slackerLauncher) runcRoot() string { return filepath.Join(l.o.Dir, "runc") }

func (l *slackerLauncher) command(ctx context.Context, id string) (*exec.Cmd, error) {
	v, err := l.sys.Client().CreateVolume(ctx, api.CreateVolumeRequest{ID: id, Snapshot: l.snapshot, Mount: true, Mode: l.sys.RootMode()})
	if err != nil {
		return nil, err
	}
	bundle := filepath.Join(l.o.Dir, "bundles", id)
	ed, err := etc(l.o.Dir, id)
	if err != nil {
		return nil, err
	}
	spec, err := runc.Spec(runc.Config{ID: id, Rootfs: v.Mountpoint, Image: ImageConfig(l.o.Config), Args: l.o.Args, EtcDir: ed})
	if err != nil {
		return nil, err
	}
	if l.o.Cgroup != "" {
		spec.Linux.CgroupsPath = string(l.o.Cgroup.Child(id))
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(bundle, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), b, 0o600); err != nil {
		return nil, err
	}
	return exec.Command("runc", "--root", l.runcRoot(), "run", "--bundle", bundle, id), nil
}

func (l *slackerLauncher) pid(ctx context.Context, id string) (int, error) {
	out, err := exec.CommandContext(ctx, "runc", "--root", l.runcRoot(), "state", id).Output()
	if err != nil {
		return 0, err
	}
	var st struct {
		Status string `json:"status"`
		PID    int    `json:"pid"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return 0, err
	}
	if st.Status != "running" && st.Status != "created" {
		return 0, fmt.Errorf("container %s is %s", id, st.Status)
	}
	return st.PID, nil
}

func (l *slackerLauncher) kill(ctx context.Context, id string) error {
	return exec.CommandContext(ctx, "runc", "--root", l.runcRoot(), "kill", id, "KILL").Run()
}

// remove deletes the runc container (`runc run` already did, unless it was killed)
// and the container's volume.
func (l *slackerLauncher) remove(ctx context.Context, id string) error {
	exec.CommandContext(ctx, "runc", "--root", l.runcRoot(), "delete", "-f", id).Run()
	var err error
	for try := 0; try < 20; try++ {
		if err = l.sys.Client().DeleteVolume(ctx, id); err == nil || errors.Is(err, errdefs.ErrNotFound) {
			err = nil
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	os.RemoveAll(filepath.Join(l.o.Dir, "bundles", id))
	os.RemoveAll(filepath.Join(l.o.Dir, "etc", id))
	return err
}

func (l *slackerLauncher) VolumeStats(ctx context.Context, id string) (api.VolumeStats, bool) {
	v, ok := l.volume(ctx, id)
	return v.Stats, ok
}

func (l *slackerLauncher) volume(ctx context.Context, id string) (api.Volume, bool) {
	v, err := l.sys.Client().Volume(ctx, id)
	return v, err == nil
}

// ImageConfig converts an OCI config's runtime part for runc.Spec.
func ImageConfig(c v1.Config) ocispec.ImageConfig {
	return ocispec.ImageConfig{User: c.User, Env: c.Env, Entrypoint: c.Entrypoint, Cmd: c.Cmd, WorkingDir: c.WorkingDir}
}

// snapshotOf finds the snapshot of a pulled image.
func snapshotOf(ctx context.Context, s *rig.Slacker, ref string) (digest.Digest, error) {
	r, err := s.CLI(ctx, "images", "--json")
	if err != nil {
		return "", err
	}
	var imgs []struct {
		Name       string `json:"name"`
		Descriptor struct {
			Snapshot string `json:"snapshot"`
		} `json:"descriptor"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &imgs); err != nil {
		return "", fmt.Errorf("slacker images --json: %w", err)
	}
	for _, im := range imgs {
		if im.Name == ref {
			return digest.Parse(im.Descriptor.Snapshot)
		}
	}
	return "", errors.New("pulled " + ref + " but slacker images does not list it")
}
