package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/slacker-dev/slacker/internal/testutil"
)

// CacheDir is where slow-to-build test inputs are kept between runs.
func CacheDir() string {
	if d := os.Getenv("SLACKER_TEST_CACHE"); d != "" {
		return d
	}
	return "/var/cache/slacker-test"
}

// DebianMirror is the Debian mirror debootstrap uses (SLACKER_DEBIAN_MIRROR).
func DebianMirror() string {
	if m := os.Getenv("SLACKER_DEBIAN_MIRROR"); m != "" {
		return m
	}
	return "http://deb.debian.org/debian"
}

// DebianOCI returns an OCI layout holding a Debian bookworm minbase image tagged
// "bookworm" (one layer, made by debootstrap and umoci), building it on first use.
// The build is shared between concurrently running test processes by a file lock.
func DebianOCI(t testing.TB) string {
	t.Helper()
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "debootstrap", "umoci", "tar")
	dir := filepath.Join(CacheDir(), "debian-bookworm-minbase-oci")
	if err := os.MkdirAll(CacheDir(), 0o755); err != nil {
		t.Fatal(err)
	}
	lock, err := os.OpenFile(filepath.Join(CacheDir(), ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	defer unix.Flock(int(lock.Fd()), unix.LOCK_UN)
	if _, err := os.Stat(filepath.Join(dir, "index.json")); err == nil {
		return dir
	}
	t.Logf("building a Debian bookworm minbase OCI image in %s (debootstrap, once; about a minute)", dir)
	work, err := os.MkdirTemp(CacheDir(), "build-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(work)
	run := func(name string, args ...string) {
		t.Helper()
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, tail(out))
		}
	}
	rootfs := filepath.Join(work, "rootfs")
	run("debootstrap", "--variant=minbase", "bookworm", rootfs, DebianMirror())
	// Leave out what a container image should not carry.
	os.RemoveAll(filepath.Join(rootfs, "var/cache/apt/archives"))
	os.MkdirAll(filepath.Join(rootfs, "var/cache/apt/archives/partial"), 0o755)
	layer := filepath.Join(work, "layer.tar")
	run("tar", "--numeric-owner", "--xattrs", "--xattrs-include=*", "-C", rootfs, "-cf", layer, ".")
	layout := filepath.Join(work, "oci")
	run("umoci", "init", "--layout", layout)
	run("umoci", "new", "--image", layout+":bookworm")
	run("umoci", "raw", "add-layer", "--image", layout+":bookworm", layer)
	run("umoci", "config", "--image", layout+":bookworm", "--config.cmd", "bash",
		"--config.env", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	os.RemoveAll(dir)
	if err := os.Rename(layout, dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

func tail(b []byte) string {
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return fmt.Sprintf("%s", b)
}

// Run runs a command and fails the test if it fails.
func Run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, tail(out))
	}
	return string(out)
}
