// Package launch starts containers of one image in the background for the
// evaluation's items that need more than the systems' Run (a container's process ID
// and network namespace, its output, its cgroup): on containerd with `ctr run`
// (snapshot, shim, runc), and on Slacker with the steps `slacker run` takes (a
// mounted clone of the image's snapshot, a runc bundle from the image's config,
// `runc run`). Both give the container an /etc/hosts, hostname and resolv.conf, as
// Docker and `slacker run` do, and optionally a cgroup under a parent of ours.
//
// It owns nothing else: the systems' daemons come from package rig.
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
	"sync"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/slacker-dev/slacker/bench/eval"
	"github.com/slacker-dev/slacker/bench/rig"
	"github.com/slacker-dev/slacker/internal/api"
	"github.com/slacker-dev/slacker/internal/runc"
)

// Launcher starts containers of one image on one system.
type Launcher interface {
	start(ctx context.Context, id string, out io.Writer) (*exec.Cmd, error)
	pid(ctx context.Context, id string) (int, error)
	kill(ctx context.Context, id string) error
	remove(ctx context.Context, id string) error
	// VolumeStats is the container's volume's statistics (Slacker only).
	VolumeStats(ctx context.Context, id string) (api.VolumeStats, bool)
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

// Container is a started container.
type Container struct {
	ID      string
	Started time.Time
	l       Launcher
	cmd     *exec.Cmd
	exited  chan struct{}
	exitErr error
	code    int
	tail    *tailWriter
	lines   chan string
	mu      sync.Mutex
	matched map[*regexp.Regexp]time.Time
}

// Start starts container id. Its output is kept (the end of it, for errors) and
// matched against the patterns given to WaitLine.
func Start(ctx context.Context, l Launcher, id string) (*Container, error) {
	c := &Container{ID: id, l: l, exited: make(chan struct{}), tail: &tailWriter{max: 8 << 10}, lines: make(chan string, 1024)}
	pr, pw := io.Pipe()
	c.Started = time.Now()
	cmd, err := l.start(ctx, id, io.MultiWriter(pw, c.tail))
	if err != nil {
		pw.Close()
		return nil, err
	}
	c.cmd = cmd
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
		err := cmd.Wait()
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee):
			c.code = ee.ExitCode()
		case err != nil:
			c.code = -1
		}
		c.exitErr = err
		pw.Close()
		close(c.exited)
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
				<-c.exited
				return time.Time{}, fmt.Errorf("%s exited (status %d) without printing /%s/: %s", c.ID, c.code, re, c.Tail())
			}
			if re.MatchString(l) {
				return time.Now(), nil
			}
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("%s: no line /%s/: %w: %s", c.ID, re, ctx.Err(), c.Tail())
		}
	}
}

// Exited is closed when the container's run command has exited; ExitCode is its
// status then.
func (c *Container) Exited() <-chan struct{} { return c.exited }
func (c *Container) ExitCode() int           { return c.code }

// Tail is the end of the container's output.
func (c *Container) Tail() string { return c.tail.String() }

// PID is the container's first process on the host, waiting until the runtime knows
// it.
func (c *Container) PID(ctx context.Context) (int, error) {
	for {
		if pid, err := c.l.pid(ctx, c.ID); err == nil && pid > 0 {
			return pid, nil
		}
		select {
		case <-c.exited:
			return 0, fmt.Errorf("%s exited (status %d) before its process was known: %s", c.ID, c.code, c.Tail())
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Netns is the path of the container's network namespace.
func (c *Container) Netns(ctx context.Context) (string, error) {
	pid, err := c.PID(ctx)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("/proc/%d/ns/net", pid), nil
}

// Stop kills the container if it runs and removes it (its volume too).
func (c *Container) Stop(ctx context.Context) error {
	ctx = context.WithoutCancel(ctx)
	select {
	case <-c.exited:
	default:
		c.l.kill(ctx, c.ID)
		select {
		case <-c.exited:
		case <-time.After(30 * time.Second):
			if c.cmd.Process != nil {
				c.cmd.Process.Kill()
			}
			<-c.exited
		}
	}
	return c.l.remove(ctx, c.ID)
}

// tailWriter keeps the end of what is written.
type tailWriter struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append([]byte(nil), t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailWriter) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := strings.TrimSpace(string(t.b))
	if i := strings.LastIndexByte(s, '\n'); i >= 0 && len(s)-i > 0 {
		// Keep the last few lines.
		lines := strings.Split(s, "\n")
		if len(lines) > 5 {
			lines = lines[len(lines)-5:]
		}
		s = strings.Join(lines, " | ")
	}
	return s
}

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

func (l *ctrLauncher) start(ctx context.Context, id string, out io.Writer) (*exec.Cmd, error) {
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
	cmd := exec.Command("ctr", args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd, cmd.Start()
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

// slackerLauncher does what `slacker run` does (a clone of the image's snapshot,
// mounted; a runc bundle from the image's config; runc run) in a runc root of its
// own, with the container's cgroup under ours when asked.
type slackerLauncher struct {
	sys      *rig.Slacker
	o        Options
	snapshot digest.Digest
}

func (l *slackerLauncher) runcRoot() string { return filepath.Join(l.o.Dir, "runc") }

func (l *slackerLauncher) start(ctx context.Context, id string, out io.Writer) (*exec.Cmd, error) {
	v, err := l.sys.Client().CreateVolume(ctx, api.CreateVolumeRequest{ID: id, Snapshot: l.snapshot, Mount: true})
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
	cmd := exec.Command("runc", "--root", l.runcRoot(), "run", "--bundle", bundle, id)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd, cmd.Start()
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
		if err = l.sys.Client().DeleteVolume(ctx, id); err == nil || errors.Is(err, api.ErrNotFound) {
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
	v, err := l.sys.Client().Volume(ctx, id)
	if err != nil {
		return api.VolumeStats{}, false
	}
	return v.Stats, true
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
