package rig

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	tasksapi "github.com/containerd/containerd/api/services/tasks/v1"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/slacker-dev/slacker/internal/runc"
	"github.com/slacker-dev/slacker/internal/testenv/services"
)

// ContainerdOptions configure the containerd + overlayfs baseline.
type ContainerdOptions struct {
	Dir string // containerd's root, state and socket (keep it short); wiped by Cold
	// Snapshotter is the snapshotter ctr uses (default overlayfs).
	Snapshotter string
	// ProxySocket, when set, is the gRPC socket of a snapshotter that is already
	// running (stargz, soci, ...), plugged into containerd as Snapshotter.
	ProxySocket string
	// Name overrides the system's name (default "overlayfs", or the snapshotter's).
	Name string
	// WorkDir holds what must survive Cold (images made for PushChange); default
	// Dir + "-work".
	WorkDir string
}

// Containerd is containerd 1.6 with a snapshotter, driven by ctr, pulling ordinary
// gzip layers from the registry (plain HTTP).
type Containerd struct {
	o      ContainerdOptions
	c      *services.Containerd
	seq    atomic.Int64
	size   map[string]int64    // bytes a pull of ref moves: layers, config, manifest
	runs   map[string]*runTree // the /run of ref's image
	pulled map[string]bool     // refs pulled since Cold
}

// NewContainerd returns the system; nothing runs until Cold.
func NewContainerd(o ContainerdOptions) (*Containerd, error) {
	if o.Snapshotter == "" {
		o.Snapshotter = "overlayfs"
	}
	if o.WorkDir == "" {
		o.WorkDir = o.Dir + "-work"
	}
	for _, t := range []string{"containerd", "ctr", "skopeo"} {
		if _, err := exec.LookPath(t); err != nil {
			return nil, fmt.Errorf("containerd baseline needs %s (apt-get install containerd skopeo)", t)
		}
	}
	if o.ProxySocket != "" {
		if fi, err := os.Stat(o.ProxySocket); err != nil || fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("snapshotter %s: no socket at %s (start it first)", o.Snapshotter, o.ProxySocket)
		}
	}
	return &Containerd{o: o, size: map[string]int64{}, runs: map[string]*runTree{}, pulled: map[string]bool{}}, nil
}

func (c *Containerd) Name() string {
	switch {
	case c.o.Name != "":
		return c.o.Name
	case c.o.Snapshotter == "overlayfs":
		return OverlayfsName
	}
	return "containerd-" + c.o.Snapshotter
}

// Publish copies the image to the registry as ordinary gzip layers.
func (c *Containerd) Publish(ctx context.Context, img Image, registryAddr string) (string, time.Duration, error) {
	ref := fmt.Sprintf("%s/oci/%s:latest", registryAddr, img.Name)
	if err := c.learn(ref, img); err != nil {
		return "", 0, err
	}
	r, err := must(ctx, "skopeo", "copy", "--quiet", "--dest-tls-verify=false", "oci:"+img.Layout+":"+img.Tag, "docker://"+ref)
	if err != nil {
		return "", 0, err
	}
	return ref, r.Took, nil
}

// learn records what a pull of ref moves and the image's /run.
func (c *Containerd) learn(ref string, img Image) error {
	im, err := loadImage(img.Layout, img.Tag)
	if err != nil {
		return err
	}
	n, err := pullSize(im)
	if err != nil {
		return err
	}
	c.size[ref] = n
	if c.runs[ref], err = readRunTree(im); err != nil {
		return fmt.Errorf("%s: %w", img.Name, err)
	}
	return nil
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

// Cold restarts containerd on an empty root. A proxy snapshotter's own state is
// not ours to reset: only containerd's is fresh.
func (c *Containerd) Cold(ctx context.Context) error {
	c.stop()
	c.pulled = map[string]bool{}
	if err := os.RemoveAll(c.o.Dir); err != nil {
		return fmt.Errorf("reset containerd: %w", err)
	}
	if err := DropCaches(); err != nil {
		return err
	}
	o := services.ContainerdOptions{Dir: c.o.Dir}
	if c.o.ProxySocket != "" {
		o.ProxySnapshotters = map[string]string{c.o.Snapshotter: c.o.ProxySocket}
	}
	var err error
	c.c, err = services.StartContainerd(ctx, o)
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

// Run runs a container to its end. Without input, its output goes through
// files, not through ctr (ctrlog.go says why): Stdout is the container's, Stderr
// the container's then ctr's own, and Took is ctr's run.
func (c *Containerd) Run(ctx context.Context, ref string, args []string, stdin io.Reader) (RunResult, error) {
	if c.c == nil {
		return RunResult{}, fmt.Errorf("containerd is not running (Cold first)")
	}
	id := fmt.Sprintf("bench-%d-%d", os.Getpid(), c.seq.Add(1))
	run := []string{"run", "--rm", "--snapshotter", c.o.Snapshotter}
	if stdin != nil {
		return c.ctr(ctx, stdin, append(append(run, ref, id), args...)...)
	}
	dir := filepath.Join(c.o.Dir, "containers", id)
	defer os.RemoveAll(dir)
	uri, err := ctrLogURI(dir)
	if err != nil {
		return RunResult{}, err
	}
	r, err := c.ctr(ctx, nil, append(append(run, "--log-uri", uri, ref, id), args...)...)
	stdout, stderr := ctrLogFiles(dir)
	out, oerr := os.ReadFile(stdout)
	errb, eerr := os.ReadFile(stderr)
	r.Stdout, r.Stderr = string(out)+r.Stdout, string(errb)+r.Stderr
	return r, errors.Join(err, oerr, eerr)
}

// Start runs `ctr run` in the background, with what Docker gives a container and ctr
// does not: an /etc/hosts (and hostname, resolv.conf) bound in, and the image's own
// /run (a fresh copy of it) instead of containerd's empty tmpfs. ctr cannot set a
// hostname, so the container keeps the host's, and /etc/hosts names it. The
// container's output comes through files the shim writes, not through ctr, unless
// it has input (ctrlog.go says why).
func (c *Containerd) Start(ctx context.Context, ref string, spec RunSpec) (*Container, error) {
	return c.start(ctx, ref, nil, spec)
}

// RootFS is a container root that no snapshot of containerd's holds (mounted by
// the caller), with what ctr would otherwise take from the image's config.
type RootFS struct {
	Path string
	Env  []string
	Cwd  string
}

// StartRoot runs a container of ref (whose /run it gets) on root instead of a
// snapshot of the image: `ctr run --rootfs`, the image's environment and working
// directory passed as flags. ctr has no flag for the user: it runs as root.
func (c *Containerd) StartRoot(ctx context.Context, ref string, root RootFS, spec RunSpec) (*Container, error) {
	return c.start(ctx, ref, &root, spec)
}

func (c *Containerd) start(ctx context.Context, ref string, root *RootFS, spec RunSpec) (*Container, error) {
	if c.c == nil {
		return nil, fmt.Errorf("containerd is not running (Cold first)")
	}
	dir := filepath.Join(c.o.Dir, "containers", spec.Name)
	hostname, _ := os.Hostname()
	if err := runc.WriteEtc(filepath.Join(dir, "etc"), hostname, false); err != nil {
		return nil, err
	}
	args := []string{"-a", c.c.Socket, "-n", "bench", "run", "--pid-file", filepath.Join(dir, "pid")}
	var output func(stdout, stderr io.Writer) (func() error, error)
	if spec.Stdin == nil {
		// The output through files, followed while the container runs (ctrlog.go
		// says why). A container with input keeps ctr's FIFOs: ctr forwards its
		// input (feedStdin), which a --log-uri would drop.
		uri, err := ctrLogURI(filepath.Join(dir, "output"))
		if err != nil {
			return nil, err
		}
		args = append(args, "--log-uri", uri)
		stdout, stderr := ctrLogFiles(filepath.Join(dir, "output"))
		output = func(o, e io.Writer) (func() error, error) {
			return followFiles([]string{stdout, stderr}, []io.Writer{o, e})
		}
	}
	image := ref
	if root != nil {
		args = append(args, "--rootfs")
		for _, e := range root.Env {
			args = append(args, "--env", e)
		}
		if root.Cwd != "" {
			args = append(args, "--cwd", root.Cwd)
		}
		image = root.Path
	} else {
		args = append(args, "--snapshotter", c.o.Snapshotter)
	}
	for _, f := range runc.EtcFiles {
		args = append(args, "--mount", fmt.Sprintf("type=bind,src=%s,dst=/etc/%s,options=rbind:rw", filepath.Join(dir, "etc", f), f))
	}
	if t := c.runs[ref]; t != nil && t.Present {
		if err := t.materialize(filepath.Join(dir, "run")); err != nil {
			return nil, err
		}
		args = append(args, "--mount", fmt.Sprintf("type=bind,src=%s,dst=/run,options=rbind:rw", filepath.Join(dir, "run")))
	}
	args = append(append(args, image, spec.Name), spec.Args...)
	sock := c.c.Socket
	ops := ContainerOps{Output: output}
	ops.PID = func(context.Context) (int, error) {
		b, err := os.ReadFile(filepath.Join(dir, "pid"))
		if err != nil {
			return 0, err
		}
		return strconv.Atoi(strings.TrimSpace(string(b)))
	}
	ops.Kill = func(ctx context.Context) error {
		_, err := must(ctx, "ctr", "-a", sock, "-n", "bench", "tasks", "kill", "-s", "SIGKILL", spec.Name)
		return err
	}
	ops.Remove = func(ctx context.Context) (ContainerStats, error) {
		st := ContainerStats{ReadBytes: -1, FetchedBytes: -1}
		r, err := timed(ctx, nil, "ctr", "-a", sock, "-n", "bench", "containers", "rm", spec.Name)
		if err == nil && r.ExitCode != 0 && !strings.Contains(r.Stderr, "not found") {
			err = fmt.Errorf("ctr containers rm %s: %s", spec.Name, strings.TrimSpace(r.Stderr))
		}
		return st, err
	}
	input := spec.Stdin
	var inputW *os.File
	if input != nil {
		// ctr reads a pipe the harness holds open until ctr has its end of the
		// task's stdin FIFO open (feedStdin says why).
		r, w, err := os.Pipe()
		if err != nil {
			return nil, fmt.Errorf("stdin pipe for %s: %w", spec.Name, err)
		}
		spec.Stdin, inputW = r, w
		defer r.Close() // ctr has its own copy once started
	}
	c2, err := StartContainer(exec.Command("ctr", args...), spec, ops)
	if err != nil {
		if inputW != nil {
			inputW.Close()
		}
		return nil, err
	}
	if inputW != nil {
		go feedStdin(sock, spec.Name, c2, input, inputW)
	}
	return c2, nil
}

// feedStdin gives container name its input, then end-of-input.
//
// ctr forwards its own standard input into the task's stdin FIFO, but the shim
// holds that FIFO open for writing too, until a client asks it to close
// (CloseIO). ctr asks only if its input ends after the task exists, so a short
// input would leave a command that reads to the end waiting forever; nerdctl and
// the kubelet close it themselves. The harness does, but not too early: if the
// shim's writer closes before ctr has opened its own (ctr opens it
// asynchronously), the FIFO has no writer for a moment, the shim reads
// end-of-input and ctr's data goes nowhere. So the harness keeps ctr's input open
// until ctr holds the FIFO open for writing: from then on the FIFO ends only once
// ctr has forwarded everything and closed it, whatever the order of the close
// requests. A failure is written into the container's error tail, where a failed
// sample's report shows it.
func feedStdin(socket, name string, c *Container, input io.Reader, w *os.File) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := func() error {
		defer w.Close()
		for {
			ok, err := holdsFIFOForWriting(c.cmd.Process.Pid, name+"-stdin")
			if err != nil || ok {
				break // an unreadable /proc: go on, as before this check
			}
			select {
			case <-c.Done():
				return nil
			case <-ctx.Done():
				return fmt.Errorf("ctr never opened the task's stdin: %w", ctx.Err())
			case <-time.After(5 * time.Millisecond):
			}
		}
		if _, err := io.Copy(w, input); err != nil && !errors.Is(err, syscall.EPIPE) {
			return fmt.Errorf("write the input: %w", err)
		}
		return nil
	}()
	if err == nil {
		err = closeStdin(ctx, socket, name, c)
	}
	if err != nil {
		fmt.Fprintf(c.stderr, "\nharness: could not give %s its standard input: %v\n", name, err)
	}
}

// holdsFIFOForWriting reports whether process pid has a file whose path ends in
// "/"+suffix open for writing (/proc/PID/fd and fdinfo).
func holdsFIFOForWriting(pid int, suffix string) (bool, error) {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, err := os.ReadDir(dir)
	if err != nil {
		return false, err
	}
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join(dir, fd.Name()))
		if err != nil || !strings.HasSuffix(target, "/"+suffix) {
			continue
		}
		info, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, fd.Name()))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(info), "\n") {
			v, ok := strings.CutPrefix(line, "flags:")
			if !ok {
				continue
			}
			flags, err := strconv.ParseUint(strings.TrimSpace(v), 8, 64)
			if err == nil && flags&unix.O_ACCMODE == unix.O_WRONLY {
				return true, nil
			}
		}
	}
	return false, nil
}

// closeStdin asks containerd to close the shim's end of container name's stdin,
// retrying while the task does not exist yet.
func closeStdin(ctx context.Context, socket, name string, c *Container) error {
	ctx = metadata.AppendToOutgoingContext(ctx, "containerd-namespace", "bench")
	conn, err := grpc.DialContext(ctx, "unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	tasks := tasksapi.NewTasksClient(conn)
	for {
		// NotFound until ctr has created the task.
		_, err := tasks.CloseIO(ctx, &tasksapi.CloseIORequest{ContainerID: name, Stdin: true})
		if err == nil {
			return nil
		}
		select {
		case <-c.Done():
			return nil // it ended before it was asked
		case <-ctx.Done():
			return fmt.Errorf("close it: %w (last: %v)", ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
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

// Traffic: everything a pull moves comes from the registry.
func (c *Containerd) Traffic(ctx context.Context) (Traffic, error) {
	n, err := c.FetchedBytes(ctx)
	return Traffic{RegistryBytes: n}, err
}

// PushChange adds the change as a new gzip layer on top of img (built in a small
// OCI layout next to the corpus's, sharing its blobs) and pushes it with skopeo,
// which skips the layers the repository has: what the developer waits for is
// building the layer and pushing it.
func (c *Containerd) PushChange(ctx context.Context, img Image, ref string, ch Change) (PushResult, error) {
	start := time.Now()
	dir := filepath.Join(c.o.WorkDir, "changes", img.Name+"-"+ch.Tag)
	if err := os.RemoveAll(dir); err != nil {
		return PushResult{}, err
	}
	pushed, err := writeChangedLayout(img, ch, dir)
	if err != nil {
		return PushResult{}, err
	}
	newRef := retag(ref, ch.Tag)
	if _, err := must(ctx, "skopeo", "copy", "--quiet", "--dest-tls-verify=false", "oci:"+dir+":"+ch.Tag, "docker://"+newRef); err != nil {
		return PushResult{}, err
	}
	took := time.Since(start)
	c.size[newRef] = c.size[ref] + pushed.layer + pushed.config + pushed.manifest - pushed.oldConfig - pushed.oldManifest
	c.runs[newRef] = c.runs[ref]
	os.RemoveAll(dir)
	return PushResult{Ref: newRef, Took: took, Bytes: pushed.layer + pushed.config + pushed.manifest}, nil
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

// retag replaces the tag of ref.
func retag(ref, tag string) string {
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		ref = ref[:i]
	}
	return ref + ":" + tag
}
