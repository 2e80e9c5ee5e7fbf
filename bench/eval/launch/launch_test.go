package launch

import (
	"context"
	"errors"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/api"
)

func TestConfigAndPaths(t *testing.T) {
	c := ImageConfig(v1.Config{User: "u", Cmd: []string{"x"}, Env: []string{"A=1"}, WorkingDir: "/w", Entrypoint: []string{"e"}})
	if c.User != "u" || c.Cmd[0] != "x" || c.Env[0] != "A=1" || c.WorkingDir != "/w" || c.Entrypoint[0] != "e" {
		t.Fatalf("config %+v", c)
	}
	if !strings.HasSuffix((&ctrLauncher{o: Options{Dir: "/d"}}).pidFile("x"), "/d/pid-x") {
		t.Fatal("pid file")
	}
}

// fakeLauncher runs a shell script as the container, after a preparation that
// takes prepare.
type fakeLauncher struct {
	script  string
	prepare time.Duration

	mu       sync.Mutex
	cmd      *exec.Cmd
	called   time.Time
	removed  []string
	killedID string
	volumes  map[string]api.Volume
}

func (f *fakeLauncher) command(ctx context.Context, id string) (*exec.Cmd, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.called = time.Now()
	time.Sleep(f.prepare)
	f.cmd = exec.Command("sh", "-c", f.script)
	return f.cmd, nil
}

func (f *fakeLauncher) pid(ctx context.Context, id string) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cmd == nil || f.cmd.Process == nil {
		return 0, errors.New("not started")
	}
	return f.cmd.Process.Pid, nil
}

func (f *fakeLauncher) kill(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.killedID = id
	return f.cmd.Process.Signal(syscall.SIGKILL)
}

func (f *fakeLauncher) remove(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removed = append(f.removed, id)
	return nil
}

func (f *fakeLauncher) VolumeStats(ctx context.Context, id string) (api.VolumeStats, bool) {
	v, ok := f.volume(ctx, id)
	return v.Stats, ok
}

func (f *fakeLauncher) volume(ctx context.Context, id string) (api.Volume, bool) {
	v, ok := f.volumes[id]
	return v, ok
}

// TestReadBytes: block clones count their own reads; shared roots report their
// image root's, counted once per image however many containers stand on it;
// containers without a volume count nothing.
func TestReadBytes(t *testing.T) {
	shared := func(img string, n int64) api.Volume {
		return api.Volume{Mode: "shared", Image: digest.FromString(img), Stats: api.VolumeStats{ReadBytes: n}}
	}
	f := &fakeLauncher{volumes: map[string]api.Volume{
		"b1": {Stats: api.VolumeStats{ReadBytes: 100}}, "b2": {Mode: "block", Stats: api.VolumeStats{ReadBytes: 20}},
		"s1": shared("a", 1000), "s2": shared("a", 1000), "s3": shared("a", 1000), "t1": shared("b", 5000),
	}}
	for _, tt := range []struct {
		ids  []string
		want int64
	}{
		{[]string{"b1", "b2"}, 120},
		{[]string{"s1", "s2", "s3"}, 1000},
		{[]string{"s1", "s2", "t1", "b1", "gone"}, 6100},
		{nil, 0},
	} {
		if got := ReadBytes(context.Background(), f, tt.ids); got != tt.want {
			t.Errorf("%q: %d, want %d", tt.ids, got, tt.want)
		}
	}
}

// TestStartWaitLineRemove: the start counts the launcher's preparation; a line on
// either stream is seen by WaitLine; Remove kills the running container and
// removes it through the launcher.
func TestStartWaitLineRemove(t *testing.T) {
	f := &fakeLauncher{script: "echo starting; echo warming >&2; sleep 0.05; echo ready now >&2; exec sleep 60", prepare: 30 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := Start(ctx, f, "c1")
	if err != nil {
		t.Fatal(err)
	}
	if c.Started.After(f.called) {
		t.Errorf("started %v, after the preparation began (%v)", c.Started, f.called)
	}
	at, err := c.WaitLine(ctx, regexp.MustCompile(`^ready`))
	if err != nil {
		t.Fatal(err)
	}
	if d := at.Sub(c.Started); d < f.prepare+50*time.Millisecond {
		t.Errorf("ready after %v, less than the preparation and the script's sleep", d)
	}
	if got := c.Tail(); got != "starting | warming | ready now" {
		t.Errorf("tail %q", got)
	}
	if _, err := c.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	<-c.Done()
	if c.ExitCode() != 128+9 || f.killedID != "c1" || len(f.removed) != 1 || f.removed[0] != "c1" {
		t.Errorf("exit %d, killed %q, removed %q", c.ExitCode(), f.killedID, f.removed)
	}
}

// TestWaitLineExit: a container that exits without printing the line fails
// WaitLine with its status and the end of its output.
func TestWaitLineExit(t *testing.T) {
	f := &fakeLauncher{script: "echo one; echo two; exit 4"}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := Start(ctx, f, "c2")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Remove(ctx)
	_, err = c.WaitLine(ctx, regexp.MustCompile(`never`))
	if err == nil || !strings.Contains(err.Error(), "c2 exited (status 4) without printing /never/: one | two") {
		t.Errorf("WaitLine: %v", err)
	}
}
