package hpmapper

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
	"strings"
	"sync"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/slacker-dev/slacker/internal/api"
	"github.com/slacker-dev/slacker/internal/bench/system"
	"github.com/slacker-dev/slacker/internal/eval"
	"github.com/slacker-dev/slacker/internal/runc"
)

// launcher starts containers of one image under a cgroup of ours, the way each
// system's own run command would (`slacker run`: clone, mount, runc; `ctr run`:
// snapshot, runc through the shim), with the cgroup path as the only difference.
type launcher interface {
	// start starts container id with its cgroup under parent and returns its run
	// command, whose combined output is out.
	start(ctx context.Context, id string, parent eval.Cgroup, out io.Writer) (*exec.Cmd, error)
	// kill kills container id; its run command then exits.
	kill(ctx context.Context, id string) error
	// remove removes what is left of container id once its run command exited.
	remove(ctx context.Context, id string) error
}

// container is one started container watched for its ready line.
type container struct {
	id      string
	cmd     *exec.Cmd
	ready   chan struct{}
	exited  chan struct{}
	took    time.Duration
	exitErr error
	tail    *tailWriter
}

// launch starts a container and watches its output for re.
func launch(ctx context.Context, l launcher, id string, parent eval.Cgroup, re *regexp.Regexp) (*container, error) {
	c := &container{id: id, ready: make(chan struct{}), exited: make(chan struct{}), tail: &tailWriter{max: 4 << 10}}
	pr, pw := io.Pipe()
	start := time.Now()
	cmd, err := l.start(ctx, id, parent, io.MultiWriter(pw, c.tail))
	if err != nil {
		pw.Close()
		return nil, err
	}
	c.cmd = cmd
	var once sync.Once
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if re.MatchString(sc.Text()) {
				once.Do(func() { c.took = time.Since(start); close(c.ready) })
			}
		}
		io.Copy(io.Discard, pr)
	}()
	go func() {
		c.exitErr = cmd.Wait()
		pw.Close()
		close(c.exited)
	}()
	return c, nil
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
	return strings.TrimSpace(string(t.b))
}

// ctrLauncher runs `ctr run --rm --cgroup PATH` against the system's containerd.
type ctrLauncher struct {
	sys  *system.Containerd
	ref  string
	args []string
}

func (l *ctrLauncher) start(ctx context.Context, id string, parent eval.Cgroup, out io.Writer) (*exec.Cmd, error) {
	args := append([]string{"-a", l.sys.Socket(), "-n", "bench", "run", "--rm", "--snapshotter", "overlayfs",
		"--cgroup", string(parent.Child(id)), l.ref, id}, l.args...)
	cmd := exec.Command("ctr", args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd, cmd.Start()
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
	return err
}

// slackerLauncher does what `slacker run` does (a clone of the image's snapshot,
// mounted; a runc bundle from the image's config; runc run), with the container's
// cgroup under ours instead of /slacker.
type slackerLauncher struct {
	sys      *system.Slacker
	snapshot digest.Digest
	config   ocispec.ImageConfig
	args     []string
	dir      string // bundles and runc's state
}

func (l *slackerLauncher) runcRoot() string { return filepath.Join(l.dir, "runc") }

func (l *slackerLauncher) start(ctx context.Context, id string, parent eval.Cgroup, out io.Writer) (*exec.Cmd, error) {
	v, err := l.sys.Client().CreateVolume(ctx, api.CreateVolumeRequest{ID: id, Snapshot: l.snapshot, Mount: true})
	if err != nil {
		return nil, err
	}
	bundle := filepath.Join(l.dir, "bundles", id)
	if err := runc.WriteEtc(filepath.Join(bundle, "etc"), id, false); err != nil {
		return nil, err
	}
	spec, err := runc.Spec(runc.Config{ID: id, Rootfs: v.Mountpoint, Image: l.config, Args: l.args, EtcDir: filepath.Join(bundle, "etc")})
	if err != nil {
		return nil, err
	}
	spec.Linux.CgroupsPath = string(parent.Child(id))
	b, err := json.Marshal(spec)
	if err != nil {
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

func (l *slackerLauncher) kill(ctx context.Context, id string) error {
	return exec.CommandContext(ctx, "runc", "--root", l.runcRoot(), "kill", id, "KILL").Run()
}

// remove deletes the runc container (`runc run` already did, unless it was killed)
// and the container's volume.
func (l *slackerLauncher) remove(ctx context.Context, id string) error {
	exec.CommandContext(ctx, "runc", "--root", l.runcRoot(), "delete", "-f", id).Run()
	var err error
	for try := 0; try < 20; try++ {
		if err = l.sys.Client().DeleteVolume(context.WithoutCancel(ctx), id); err == nil || errors.Is(err, api.ErrNotFound) {
			err = nil
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	os.RemoveAll(filepath.Join(l.dir, "bundles", id))
	return err
}

// imageConfig converts an OCI config's runtime part for runc.Spec.
func imageConfig(c v1.Config) ocispec.ImageConfig {
	return ocispec.ImageConfig{User: c.User, Env: c.Env, Entrypoint: c.Entrypoint, Cmd: c.Cmd, WorkingDir: c.WorkingDir}
}
