package rig

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"

	"github.com/slacker-dev/slacker/internal/mount"
)

// StargzName is the system's name in results.
const StargzName = "stargz"

// StargzOptions configure the stargz system.
type StargzOptions struct {
	// Dir holds the snapshotter's state (wiped by Cold), the converted layouts and
	// the recording containerd's state.
	Dir string
	// CtrdDir is containerd's (keep it short: it holds sockets).
	CtrdDir string
	// Bin is slacker-stargz (bench/stargz): the snapshotter, its pull and eStargz
	// conversion.
	Bin string
}

// Stargz is containerd 1.6 with stargz-snapshotter as its proxy snapshotter
// "stargz" (slacker-stargz serve, upstream's service package with its default
// configuration), driven by ctr as the overlayfs baseline is. Images are
// converted to eStargz and pushed to the registry; a pull labels every layer with
// the image reference and layer digest (as ctr-remote rpull and CRI do), so that
// the snapshotter mounts layers lazily from the registry over FUSE. With
// Optimize, an image is converted again with the files a recorded run of the
// workload read placed first (prioritized, prefetched at mount), which is what
// ctr-remote optimize does; the run is recorded on the image's original layers
// under a separate containerd with overlayfs.
type Stargz struct {
	o   StargzOptions
	c   *Containerd // the measured one: snapshotter stargz
	rec *Containerd // records runs on the original layers (overlayfs)

	daemon   *daemon
	registry string            // the registry the snapshotter reaches over plain HTTP
	layouts  map[string]string // image name -> its eStargz layout (for PushChange)
}

// NewStargz returns the system; nothing runs until Cold.
func NewStargz(o StargzOptions) (*Stargz, error) {
	if o.Bin == "" {
		return nil, errors.New("stargz needs slacker-stargz (scripts/setup.sh builds bin/slacker-stargz from bench/stargz)")
	}
	if _, err := os.Stat(o.Bin); err != nil {
		return nil, fmt.Errorf("stargz: %w (scripts/setup.sh builds bin/slacker-stargz from bench/stargz)", err)
	}
	c, err := NewContainerd(ContainerdOptions{Dir: o.CtrdDir, Name: StargzName, WorkDir: filepath.Join(o.Dir, "work")})
	if err != nil {
		return nil, err
	}
	// The socket exists once the snapshotter runs (Cold).
	c.o.Snapshotter, c.o.ProxySocket = StargzName, filepath.Join(o.Dir, "state", "stargz.sock")
	rec, err := NewContainerd(ContainerdOptions{Dir: o.CtrdDir + "-rec", Name: StargzName + "-record"})
	if err != nil {
		return nil, err
	}
	return &Stargz{o: o, c: c, rec: rec, layouts: map[string]string{}}, nil
}

func (s *Stargz) Name() string { return StargzName }

// FindStargzBinary finds slacker-stargz: the path given, then next to slacker
// (bin/), then next to this program, then PATH.
func FindStargzBinary(given, slacker string) string {
	if given != "" {
		return given
	}
	self, _ := os.Executable()
	for _, dir := range []string{filepath.Dir(slacker), filepath.Dir(self)} {
		if p := filepath.Join(dir, "slacker-stargz"); dir != "." && exists(p) {
			return p
		}
	}
	p, _ := exec.LookPath("slacker-stargz")
	return p
}

// Publish converts the image to eStargz (no prioritized files) and pushes it.
// The time returned is the push's; the conversion is in the publish total.
func (s *Stargz) Publish(ctx context.Context, img Image, registryAddr string) (string, time.Duration, error) {
	return s.publish(ctx, img, registryAddr, nil)
}

func (s *Stargz) publish(ctx context.Context, img Image, registryAddr string, files []string) (string, time.Duration, error) {
	s.registry = registryAddr
	ref := fmt.Sprintf("%s/stargz/%s:latest", registryAddr, img.Name)
	out := filepath.Join(s.o.Dir, "layouts", img.Name)
	args := []string{"convert", "--layout", img.Layout, "--tag", img.Tag, "--out", out}
	if len(files) > 0 {
		list := filepath.Join(s.o.Dir, "records", img.Name+".files")
		if err := os.MkdirAll(filepath.Dir(list), 0o755); err != nil {
			return "", 0, err
		}
		if err := os.WriteFile(list, []byte(strings.Join(files, "\n")+"\n"), 0o644); err != nil {
			return "", 0, err
		}
		args = append(args, "--prioritized", list)
	}
	if _, err := must(ctx, s.o.Bin, args...); err != nil {
		return "", 0, fmt.Errorf("convert to eStargz: %w", err)
	}
	r, err := must(ctx, "skopeo", "copy", "--quiet", "--dest-tls-verify=false", "oci:"+out+":"+img.Tag, "docker://"+ref)
	if err != nil {
		return "", 0, err
	}
	// What a container's /run holds comes from the original image (the same files),
	// read once: Optimize publishes the same image again.
	if _, known := s.c.runs[ref]; !known {
		if err := s.c.learn(ref, img); err != nil {
			return "", 0, err
		}
	}
	s.layouts[img.Name] = out
	return ref, r.Took, nil
}

// StartRecording starts a container of img's original layers (pulled from the
// registry with overlayfs) while recording the files it opens and reads: the run
// that Optimize lays the image out from. Stop the watch when the workload is
// ready, then remove the container; release unmounts its root.
func (s *Stargz) StartRecording(ctx context.Context, img Image, registryAddr string, spec RunSpec) (*Container, *FileWatch, func(), error) {
	if s.rec.c == nil {
		if err := s.rec.Cold(ctx); err != nil {
			return nil, nil, nil, err
		}
	}
	ref, _, err := s.rec.Publish(ctx, img, registryAddr)
	if err != nil {
		return nil, nil, nil, err
	}
	root, release, err := s.rec.Mount(ctx, ref)
	if err != nil {
		return nil, nil, nil, err
	}
	cfg, err := imageConfig(img)
	if err != nil {
		release()
		return nil, nil, nil, err
	}
	w, err := WatchFiles(root)
	if err != nil {
		release()
		return nil, nil, nil, err
	}
	c, err := s.rec.StartRoot(ctx, ref, RootFS{Path: root, Env: cfg.Env, Cwd: cfg.WorkingDir}, spec)
	if err != nil {
		w.Stop()
		release()
		return nil, nil, nil, err
	}
	return c, w, func() { release() }, nil
}

// Optimize converts img again with files (a recorded run's, first read first)
// prioritized and pushes it under the same reference; the time is the push's.
func (s *Stargz) Optimize(ctx context.Context, img Image, registryAddr string, files []string) (time.Duration, error) {
	_, took, err := s.publish(ctx, img, registryAddr, files)
	return took, err
}

// EndRecording stops the recording containerd (after the last recorded run).
func (s *Stargz) EndRecording() { s.rec.Close() }

// PushChange adds the change as a new (plain gzip) layer on top of the eStargz
// image and pushes it, as the overlayfs baseline does on top of its layers; the
// snapshotter mounts the eStargz layers lazily and fetches the small new one.
func (s *Stargz) PushChange(ctx context.Context, img Image, ref string, ch Change) (PushResult, error) {
	out, ok := s.layouts[img.Name]
	if !ok {
		return PushResult{}, fmt.Errorf("%s was not published as eStargz", img.Name)
	}
	img.Layout = out
	return s.c.PushChange(ctx, img, ref, ch)
}

// Cold stops containerd and the snapshotter (unmounting its layers), wipes both
// states, drops the page cache, and starts them again: nothing fetched survives.
func (s *Stargz) Cold(ctx context.Context) error {
	s.c.stop()
	s.stopDaemon()
	state := filepath.Join(s.o.Dir, "state")
	if err := os.RemoveAll(state); err != nil {
		return fmt.Errorf("reset the stargz snapshotter: %w", err)
	}
	if err := s.startDaemon(ctx, state); err != nil {
		return err
	}
	return s.c.Cold(ctx)
}

func (s *Stargz) startDaemon(ctx context.Context, state string) error {
	if err := os.MkdirAll(state, 0o700); err != nil {
		return err
	}
	args := []string{"serve", "--root", state, "--address", s.c.o.ProxySocket, "--log-level", "warn"}
	if s.registry != "" {
		args = append(args, "--insecure", s.registry)
	}
	ready := func(context.Context) bool {
		fi, err := os.Stat(s.c.o.ProxySocket)
		return err == nil && fi.Mode()&os.ModeSocket != 0
	}
	d, err := startDaemon(ctx, "the stargz snapshotter", s.o.Bin, args, filepath.Join(s.o.Dir, "stargz.log"), ready)
	s.daemon = d
	return err
}

// stopDaemon stops the snapshotter (SIGTERM closes it, unmounting its FUSE
// layers) and detaches whatever it left mounted under its state: an idle stargz
// keeps fetching whole layers in the background, which must not disturb the next
// sample.
func (s *Stargz) stopDaemon() {
	s.daemon.stop()
	s.daemon = nil
	if ms, err := mount.Mounts(filepath.Join(s.o.Dir, "state")); err == nil {
		for _, m := range ms {
			unix.Unmount(m.Target, unix.MNT_DETACH)
		}
	}
}

// Pull pulls with the layer labels the snapshotter needs (slacker-stargz pull).
func (s *Stargz) Pull(ctx context.Context, ref string) (time.Duration, error) {
	if s.c.c == nil {
		return 0, errors.New("containerd is not running (Cold first)")
	}
	r, err := must(ctx, s.o.Bin, "pull", "--address", s.c.c.Socket, "--namespace", "bench", "--plain-http", ref)
	if err == nil {
		s.c.pulled[ref] = true
	}
	return r.Took, err
}

func (s *Stargz) Run(ctx context.Context, ref string, args []string, stdin io.Reader) (RunResult, error) {
	return s.c.Run(ctx, ref, args, stdin)
}

// Start runs the container through containerd (ctr run --snapshotter stargz).
func (s *Stargz) Start(ctx context.Context, ref string, spec RunSpec) (*Container, error) {
	return s.c.Start(ctx, ref, spec)
}

// FetchedBytes is unknown to the system itself: the snapshotter counts nothing
// it reports. Behind an emulated link, the harness counts what crossed it.
func (s *Stargz) FetchedBytes(ctx context.Context) (int64, error) { return -1, nil }

func (s *Stargz) Mount(ctx context.Context, ref string) (string, func() error, error) {
	return "", nil, errors.New("stargz: Mount is not supported (pull and start a container instead)")
}

// Close stops containerd, the snapshotter and the recording containerd.
func (s *Stargz) Close() error {
	s.c.Close()
	s.stopDaemon()
	s.rec.Close()
	return nil
}

var (
	_ System    = (*Stargz)(nil)
	_ Starter   = (*Stargz)(nil)
	_ Developer = (*Stargz)(nil)
)

// imageConfig is the process part of img's config (environment, working directory).
func imageConfig(img Image) (v1.Config, error) {
	im, err := loadImage(img.Layout, img.Tag)
	if err != nil {
		return v1.Config{}, err
	}
	cf, err := im.ConfigFile()
	if err != nil {
		return v1.Config{}, fmt.Errorf("%s: %w", img.Name, err)
	}
	return cf.Config, nil
}
