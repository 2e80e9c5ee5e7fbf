package testutil

import (
	"os"
	"os/exec"
	"testing"

	"github.com/slacker-dev/slacker/internal/mount"
)

// InCI reports whether tests run under the project's CI contract (SLACKER_CI=1).
func InCI() bool { return os.Getenv("SLACKER_CI") == "1" }

// Missing skips the test, or fails it in CI, because what names is unavailable.
func Missing(t testing.TB, what string) {
	t.Helper()
	if InCI() {
		t.Fatalf("required for this test but missing in CI: %s", what)
	}
	t.Skipf("skipping: %s is unavailable (set SLACKER_CI=1 to make this a failure)", what)
}

// RequireRoot needs uid 0 (mounts, loop devices, FUSE, runc).
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Missing(t, "root privileges")
	}
}

// RequireTool needs each named program on PATH and returns the first one's path.
func RequireTool(t testing.TB, names ...string) string {
	t.Helper()
	first := ""
	for _, n := range names {
		p, err := exec.LookPath(n)
		if err != nil {
			Missing(t, "program "+n)
			return ""
		}
		if first == "" {
			first = p
		}
	}
	return first
}

// RequireFile needs path to exist (a device such as /dev/fuse or /dev/loop-control).
func RequireFile(t testing.TB, path string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		Missing(t, path)
	}
}

// RequireOverlay needs overlayfs in the kernel.
func RequireOverlay(t testing.TB) {
	t.Helper()
	if err := mount.OverlaySupported(); err != nil {
		Missing(t, "overlayfs ("+err.Error()+")")
	}
}
