package harness

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/slacker-dev/slacker/bench/workload"
	"github.com/slacker-dev/slacker/internal/testutil"
)

func TestHeadBuffer(t *testing.T) {
	tests := []struct {
		max    int
		writes []string
		want   string
	}{
		{8, []string{"abc", "def"}, "abcdef"},
		{8, []string{"abcdef", "ghijkl"}, "abcdefgh"},
		{8, []string{"abcdefghijkl", "mn"}, "abcdefgh"},
		{0, []string{"abc"}, ""},
		{4, nil, ""},
	}
	for _, tt := range tests {
		b := &headBuffer{max: tt.max}
		for _, w := range tt.writes {
			// A writer that reports less than it was given would stop the container's
			// output copy: every write is accepted whole.
			if n, err := b.Write([]byte(w)); n != len(w) || err != nil {
				t.Errorf("Write(%q) = %d, %v", w, n, err)
			}
		}
		if got := b.String(); got != tt.want {
			t.Errorf("max %d, writes %q: %q, want %q", tt.max, tt.writes, got, tt.want)
		}
	}
}

func TestClip(t *testing.T) {
	if got := clip("hello", 5); got != "hello" {
		t.Errorf("clip = %q", got)
	}
	if got := clip("hello world", 5); got != "hello…" {
		t.Errorf("clip = %q", got)
	}
}

// TestResetDir empties a work directory that has file systems mounted in it (a
// killed run's), a name with a space included, without touching what the mounts
// showed, and refuses the root.
func TestResetDir(t *testing.T) {
	testutil.RequireRoot(t)
	tmp := t.TempDir()
	outside := filepath.Join(tmp, "outside")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "precious"), []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(tmp, "work dir")
	mnts := []string{filepath.Join(dir, "a"), filepath.Join(dir, "a", "b c"), filepath.Join(dir, "bind")}
	for _, m := range mnts[:2] {
		if err := os.MkdirAll(m, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount("tmpfs", m, "tmpfs", 0, "size=1m"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Unmount(m, unix.MNT_DETACH) })
		if err := os.WriteFile(filepath.Join(m, "f"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A bind mount of a directory outside: removing through it would delete there.
	if err := os.MkdirAll(mnts[2], 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(outside, mnts[2], "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(mnts[2], unix.MNT_DETACH) })

	if err := resetDir(dir); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) != 0 {
		t.Fatalf("after reset: %v, %d entries", err, len(ents))
	}
	if b, _ := os.ReadFile("/proc/self/mountinfo"); bytes.Contains(b, []byte(`work\040dir`)) {
		t.Fatalf("mounts left under %s", dir)
	}
	if b, err := os.ReadFile(filepath.Join(outside, "precious")); err != nil || string(b) != "keep" {
		t.Fatalf("a bind-mounted directory outside was emptied: %q %v", b, err)
	}
	for _, bad := range []string{"", "/"} {
		if err := resetDir(bad); err == nil {
			t.Errorf("resetDir(%q) accepted", bad)
		}
	}
}

func TestProgressLine(t *testing.T) {
	ok := &Sample{Workload: "redis", System: "slacker", Cycle: Development, OK: true, Push: 0.25, Pull: 0.5, RunTime: 1.25,
		RegistryBytes: 1000, StoreBytes: 2 << 20, ReadBytes: 1 << 20, Ready: "tcp 6379"}
	failed := &Sample{Workload: "nginx", System: "overlayfs", Cycle: Deployment, Pull: 2, RunTime: 60, ReadBytes: -1,
		Stage: "ready", Failure: "not ready after 1m0s (timeout)"}
	tests := []struct {
		s          *Sample
		want, bans []string
	}{
		{ok, []string{"run 1/2 [3/8]", "slacker", "development", "redis", "push 0.250s", "pull 0.500s run 1.250s", "read ", "(tcp 6379)"}, []string{"FAILED"}},
		{failed, []string{"overlayfs", "deployment", "FAILED at ready: not ready after 1m0s (timeout)"}, []string{"push", " read ", "moved"}},
	}
	for _, tt := range tests {
		line := progressLine(1, 2, 3, 8, tt.s)
		for _, w := range tt.want {
			if !strings.Contains(line, w) {
				t.Errorf("%q lacks %q", line, w)
			}
		}
		for _, b := range tt.bans {
			if strings.Contains(line, b) {
				t.Errorf("%q has %q", line, b)
			}
		}
	}
}

// TestChange: the development cycle's change is deterministic per run and differs
// between runs and workloads (each run pushes a new image).
func TestChange(t *testing.T) {
	a, b := &workload.Workload{Name: "a"}, &workload.Workload{Name: "b"}
	if c1, c2 := change(a, 1), change(a, 1); c1.Tag != c2.Tag || !bytes.Equal(c1.Content, c2.Content) || c1.Path != c2.Path {
		t.Errorf("change is not deterministic: %+v %+v", c1, c2)
	}
	if c1, c2 := change(a, 1), change(a, 2); c1.Tag == c2.Tag || bytes.Equal(c1.Content, c2.Content) {
		t.Errorf("runs 1 and 2 share a change: %+v %+v", c1, c2)
	}
	if c1, c2 := change(a, 1), change(b, 1); bytes.Equal(c1.Content, c2.Content) {
		t.Errorf("workloads a and b share a change")
	}
	if c := change(a, 1); !filepath.IsAbs(c.Path) {
		t.Errorf("change path %q is not absolute", c.Path)
	}
}
