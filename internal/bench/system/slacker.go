package system

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/slacker-dev/slacker/internal/api"
)

// SlackerOptions configure a Slacker system.
type SlackerOptions struct {
	Dir      string // holds store/, publish/ and node/
	Slacker  string // the slacker binary
	Slackerd string // the slackerd binary
	// DaemonArgs are extra slackerd flags (e.g. --chunk-size).
	DaemonArgs []string
}

// Slacker is slackerd and the slacker CLI. The chunk store (Dir/store) survives Cold;
// the node's state (Dir/node: cache, volumes, names) does not.
type Slacker struct {
	o      SlackerOptions
	daemon *exec.Cmd
	done   chan struct{}
	root   string
	client *api.Client
}

// NewSlacker returns the system; nothing runs until Publish or Cold.
func NewSlacker(o SlackerOptions) (*Slacker, error) {
	for _, b := range []string{o.Slacker, o.Slackerd} {
		if _, err := os.Stat(b); err != nil {
			return nil, fmt.Errorf("slacker system: %w (build with scripts/setup.sh)", err)
		}
	}
	return &Slacker{o: o}, nil
}

func (s *Slacker) Name() string { return "slacker" }

func (s *Slacker) socket() string { return filepath.Join(s.root, "slackerd.sock") }

// start starts slackerd on root (same store).
func (s *Slacker) start(ctx context.Context, root string) error {
	s.stop()
	if err := os.MkdirAll(root, 0o700); err != nil {
		return err
	}
	s.root = root
	log, err := os.OpenFile(filepath.Join(root, "slackerd.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	args := append([]string{"--root", root, "--socket", s.socket(), "--store", filepath.Join(s.o.Dir, "store")}, s.o.DaemonArgs...)
	cmd := exec.Command(s.o.Slackerd, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("start slackerd: %w", err)
	}
	s.daemon, s.done = cmd, make(chan struct{})
	go func(done chan struct{}) { cmd.Wait(); log.Close(); close(done) }(s.done)
	s.client = api.NewClient(s.socket())
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := s.client.Info(ctx); err == nil {
			return nil
		}
		select {
		case <-s.done:
			b, _ := os.ReadFile(filepath.Join(root, "slackerd.log"))
			return fmt.Errorf("slackerd exited at start: %s", tail(string(b)))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("slackerd did not answer within 30s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (s *Slacker) stop() {
	if s.daemon == nil {
		return
	}
	s.daemon.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(60 * time.Second):
		s.daemon.Process.Kill()
		<-s.done
	}
	s.daemon = nil
}

func (s *Slacker) cli(ctx context.Context, stdin io.Reader, args ...string) (RunResult, error) {
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
// descriptor. The push time is the descriptor push; conversion is reported apart.
func (s *Slacker) Publish(ctx context.Context, img Image, registryAddr string) (string, time.Duration, error) {
	if err := s.start(ctx, filepath.Join(s.o.Dir, "publish")); err != nil {
		return "", 0, err
	}
	defer s.stop()
	if _, err := s.mustCLI(ctx, "convert", "-q", "oci:"+img.Layout+":"+img.Tag, img.Name); err != nil {
		return "", 0, err
	}
	ref := fmt.Sprintf("%s/slacker/%s:latest", registryAddr, img.Name)
	r, err := s.mustCLI(ctx, "push", img.Name, ref)
	if err != nil {
		return "", 0, err
	}
	return ref, r.Took, nil
}

// Cold restarts slackerd on an empty node directory.
func (s *Slacker) Cold(ctx context.Context) error {
	s.stop()
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
	r, err := s.mustCLI(ctx, "pull", ref)
	return r.Took, err
}

func (s *Slacker) Run(ctx context.Context, ref string, args []string, stdin io.Reader) (RunResult, error) {
	return s.cli(ctx, stdin, append([]string{"run", "--rm", "-i", ref, "--"}, args...)...)
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

// Mount clones the pulled image into a mounted volume.
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
			v, err := s.client.CreateVolume(ctx, api.CreateVolumeRequest{ID: id, Snapshot: digestOf(im.Descriptor.Snapshot), Mount: true})
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
