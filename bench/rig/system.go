package rig

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/slacker-dev/slacker/internal/api"
)

// Image is an OCI image in a local layout, to be published.
type Image struct {
	Name   string // short name, used in references
	Layout string // OCI layout directory
	Tag    string // its tag there
	// DataBytes is the image's uncompressed size; CompressedBytes its layer blobs.
	DataBytes, CompressedBytes int64
}

// RunResult is one container run.
type RunResult struct {
	Took     time.Duration
	ExitCode int
	Stdout   string
	Stderr   string
}

// System is a container system under test.
type System interface {
	Name() string
	// Publish makes img pullable from the registry at registryAddr and returns the
	// reference to pull and how long publishing took (push time).
	Publish(ctx context.Context, img Image, registryAddr string) (ref string, took time.Duration, err error)
	// Cold makes the node cold: fresh node state, page cache dropped, daemon started.
	Cold(ctx context.Context) error
	// Pull pulls ref onto the node.
	Pull(ctx context.Context, ref string) (time.Duration, error)
	// Run runs args in a new container of ref and removes it.
	Run(ctx context.Context, ref string, args []string, stdin io.Reader) (RunResult, error)
	// FetchedBytes is what the node moved from the registry and store since Cold.
	FetchedBytes(ctx context.Context) (int64, error)
	// Mount gives a writable container root of ref (pulled first) and its release.
	Mount(ctx context.Context, ref string) (string, func() error, error)
	// Close stops everything the system started.
	Close() error
}

// SlackerSystem is a system whose images are Slacker images in a chunk store
// (slacker, slacker-block, slacker-containerd): it records start-up traces there
// and can lay its published images out for start-up.
type SlackerSystem interface {
	System
	// Store is the chunk store's location.
	Store() string
	// Optimize lays the published img out for start-up from its stored trace and
	// publishes it again under the same reference; the time is the push's.
	Optimize(ctx context.Context, img Image, registryAddr string) (*api.Layout, time.Duration, error)
}

var (
	_ SlackerSystem = (*Slacker)(nil)
	_ SlackerSystem = (*ContainerdSlacker)(nil)
)

// DropCaches writes dirty data and drops the page cache, dentries and inodes.
func DropCaches() error {
	syscall.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0o200); err != nil {
		return fmt.Errorf("drop caches: %w", err)
	}
	return nil
}

// timed runs a command and returns its wall-clock duration and output.
func timed(ctx context.Context, stdin io.Reader, name string, args ...string) (RunResult, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr, cmd.Stdin = &out, &errb, stdin
	start := time.Now()
	err := cmd.Run()
	r := RunResult{Took: time.Since(start), Stdout: out.String(), Stderr: errb.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.ExitCode = ee.ExitCode()
		return r, nil
	}
	if err != nil {
		return r, fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return r, nil
}

// must runs a command whose failure is an error.
func must(ctx context.Context, name string, args ...string) (RunResult, error) {
	r, err := timed(ctx, nil, name, args...)
	if err == nil && r.ExitCode != 0 {
		err = fmt.Errorf("%s %s: exit %d: %s", name, strings.Join(args, " "), r.ExitCode, strings.TrimSpace(r.Stderr+r.Stdout))
	}
	return r, err
}
