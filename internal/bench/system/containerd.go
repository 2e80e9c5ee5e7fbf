package system

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/slacker-dev/slacker/internal/services"
)

// ContainerdOptions configure the containerd + overlayfs baseline.
type ContainerdOptions struct {
	Dir string // containerd's root, state and socket (keep it short)
	// Snapshotter is the snapshotter ctr uses (default overlayfs).
	Snapshotter string
}

// Containerd is containerd 1.6 with a snapshotter, driven by ctr, pulling ordinary
// gzip layers from the registry (plain HTTP).
type Containerd struct {
	o      ContainerdOptions
	c      *services.Containerd
	seq    atomic.Int64
	size   map[string]int64 // compressed bytes per ref
	pulled map[string]bool  // refs pulled since Cold
}

// NewContainerd returns the system; nothing runs until Cold.
func NewContainerd(o ContainerdOptions) (*Containerd, error) {
	if o.Snapshotter == "" {
		o.Snapshotter = "overlayfs"
	}
	for _, t := range []string{"containerd", "ctr", "skopeo"} {
		if _, err := exec.LookPath(t); err != nil {
			return nil, fmt.Errorf("containerd baseline needs %s (apt-get install containerd skopeo)", t)
		}
	}
	return &Containerd{o: o, size: map[string]int64{}, pulled: map[string]bool{}}, nil
}

func (c *Containerd) Name() string {
	if c.o.Snapshotter == "overlayfs" {
		return "overlayfs"
	}
	return "containerd-" + c.o.Snapshotter
}

// Publish copies the image to the registry as ordinary gzip layers.
func (c *Containerd) Publish(ctx context.Context, img Image, registryAddr string) (string, time.Duration, error) {
	ref := fmt.Sprintf("%s/oci/%s:latest", registryAddr, img.Name)
	r, err := must(ctx, "skopeo", "copy", "--quiet", "--dest-tls-verify=false", "oci:"+img.Layout+":"+img.Tag, "docker://"+ref)
	if err != nil {
		return "", 0, err
	}
	c.size[ref] = img.CompressedBytes
	return ref, r.Took, nil
}

func (c *Containerd) ctr(ctx context.Context, stdin io.Reader, args ...string) (RunResult, error) {
	return timed(ctx, stdin, "ctr", append([]string{"-a", c.c.Socket, "-n", "bench"}, args...)...)
}

func (c *Containerd) mustCtr(ctx context.Context, args ...string) (RunResult, error) {
	r, err := c.ctr(ctx, nil, args...)
	if err == nil && r.ExitCode != 0 {
		err = fmt.Errorf("ctr %s: exit %d: %s", strings.Join(args, " "), r.ExitCode, strings.TrimSpace(r.Stderr+r.Stdout))
	}
	return r, err
}

// Cold restarts containerd on an empty root.
func (c *Containerd) Cold(ctx context.Context) error {
	c.stop()
	c.pulled = map[string]bool{}
	if err := os.RemoveAll(c.o.Dir); err != nil {
		return fmt.Errorf("reset containerd: %w", err)
	}
	if err := DropCaches(); err != nil {
		return err
	}
	var err error
	c.c, err = services.StartContainerd(ctx, services.ContainerdOptions{Dir: c.o.Dir})
	return err
}

func (c *Containerd) stop() {
	if c.c != nil {
		c.c.Stop()
		c.c = nil
	}
}

func (c *Containerd) Pull(ctx context.Context, ref string) (time.Duration, error) {
	r, err := c.mustCtr(ctx, "images", "pull", "--plain-http", "--snapshotter", c.o.Snapshotter, ref)
	if err == nil {
		c.pulled[ref] = true
	}
	return r.Took, err
}

func (c *Containerd) Run(ctx context.Context, ref string, args []string, stdin io.Reader) (RunResult, error) {
	id := fmt.Sprintf("bench-%d-%d", os.Getpid(), c.seq.Add(1))
	return c.ctr(ctx, stdin, append([]string{"run", "--rm", "--snapshotter", c.o.Snapshotter, ref, id}, args...)...)
}

// FetchedBytes is the compressed size of the images pulled since Cold: containerd
// moves all of it.
func (c *Containerd) FetchedBytes(ctx context.Context) (int64, error) {
	var n int64
	for ref := range c.pulled {
		n += c.size[ref]
	}
	return n, nil
}

// Mount prepares a writable snapshot of the pulled image and mounts it, as a
// container's root would be.
func (c *Containerd) Mount(ctx context.Context, ref string) (string, func() error, error) {
	if _, err := c.Pull(ctx, ref); err != nil {
		return "", nil, err
	}
	chain, err := chainIDFromRegistry(ctx, ref)
	if err != nil {
		return "", nil, err
	}
	key := fmt.Sprintf("bench-mount-%d", c.seq.Add(1))
	if _, err := c.mustCtr(ctx, "snapshots", "--snapshotter", c.o.Snapshotter, "prepare", key, chain); err != nil {
		return "", nil, err
	}
	target := filepath.Join(c.o.Dir, key)
	if err := os.MkdirAll(target, 0o755); err != nil {
		return "", nil, err
	}
	mr, err := c.mustCtr(ctx, "snapshots", "--snapshotter", c.o.Snapshotter, "mounts", target, key)
	if err != nil {
		return "", nil, err
	}
	line := strings.TrimSpace(mr.Stdout)
	if !strings.HasPrefix(line, "mount ") {
		return "", nil, fmt.Errorf("unexpected `ctr snapshots mounts` output: %q", line)
	}
	if out, err := exec.CommandContext(ctx, "sh", "-c", line).CombinedOutput(); err != nil {
		return "", nil, fmt.Errorf("%s: %w: %s", line, err, out)
	}
	release := func() error {
		unix.Unmount(target, 0)
		os.Remove(target)
		_, err := c.mustCtr(context.WithoutCancel(ctx), "snapshots", "--snapshotter", c.o.Snapshotter, "rm", key)
		return err
	}
	return target, release, nil
}

func (c *Containerd) Close() error {
	c.stop()
	return nil
}
