package rig_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/slacker-dev/slacker/bench/rig"
	"github.com/slacker-dev/slacker/internal/mount"
	"github.com/slacker-dev/slacker/internal/testenv"
	"github.com/slacker-dev/slacker/internal/testenv/services"
	"github.com/slacker-dev/slacker/internal/testutil"
)

// startRegistry starts a registry under dir, stopped at the end of the test.
func startRegistry(t *testing.T, dir string) *services.Registry {
	t.Helper()
	reg, err := services.StartRegistry(context.Background(), services.RegistryOptions{Dir: filepath.Join(dir, "registry")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Stop() })
	return reg
}

// waitEnd waits up to a minute for c, what the failure calls it, to end.
func waitEnd(t *testing.T, c *rig.Container, what string) {
	t.Helper()
	select {
	case <-c.Done():
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not end; stderr %q", what, c.StderrTail())
	}
}

// The stargz system end to end on the Debian image: publish as eStargz, record a
// run on the original layers, convert again with the files it read first, then a
// cold pull that mounts the layers lazily (FUSE, nothing applied) and a container
// that reads them; a change pushed on top and run from a cold node; Close leaves
// nothing mounted.
func TestStargz(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireFile(t, "/dev/fuse")
	testutil.RequireTool(t, "containerd", "ctr", "runc", "skopeo", "docker-registry")
	layout := testenv.DebianOCI(t)
	bin := testenv.StargzBinary(t)
	ctx := context.Background()
	dir := t.TempDir()
	reg := startRegistry(t, dir)
	sz, err := rig.NewStargz(rig.StargzOptions{Dir: filepath.Join(dir, "sz"), CtrdDir: filepath.Join(dir, "c"), Bin: bin})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sz.Close() })
	img := rig.Image{Name: "minbase", Layout: layout, Tag: "bookworm"}
	ref, _, err := sz.Publish(ctx, img, reg.Addr)
	if err != nil {
		t.Fatal(err)
	}

	// The recorded run: the files it read, in the order it first read them.
	var recOut strings.Builder
	c, watch, release, err := sz.StartRecording(ctx, img, reg.Addr, rig.RunSpec{Name: "rec",
		Args: []string{"sh", "-c", "cat /etc/debian_version; ls /usr/share/doc > /dev/null"}, Stdout: &recOut})
	if err != nil {
		t.Fatal(err)
	}
	waitEnd(t, c, "the recorded run")
	files, err := watch.Stop()
	c.Remove(ctx)
	release()
	if err != nil {
		t.Fatal(err)
	}
	want := recOut.String() // bookworm: "12.N\n"
	if c.ExitCode() != 0 || !strings.HasPrefix(want, "12.") {
		t.Fatalf("recorded run: exit %d, output %q (want bookworm's version), stderr %q", c.ExitCode(), want, c.StderrTail())
	}
	for _, f := range []string{"/etc/debian_version", "/usr/bin/cat", "/usr/bin/ls"} {
		if !slices.Contains(files, f) {
			t.Errorf("the recording lacks %s: %q", f, files)
		}
	}
	if i, j := slices.Index(files, "/usr/bin/cat"), slices.Index(files, "/usr/bin/ls"); i > j {
		t.Errorf("cat ran before ls, but the recording has it after: %q", files)
	}
	for _, f := range files {
		if strings.HasPrefix(f, "/usr/share/doc/") {
			t.Errorf("ls of a directory recorded a file in it: %s", f)
		}
	}
	sz.EndRecording()
	if _, err := sz.Optimize(ctx, img, reg.Addr, files); err != nil {
		t.Fatal(err)
	}

	if err := sz.Cold(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := sz.Pull(ctx, ref); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "sz", "state")
	ms, err := mount.Mounts(state)
	if err != nil {
		t.Fatal(err)
	}
	fuse := 0
	for _, m := range ms {
		if strings.HasPrefix(m.FSType, "fuse") {
			fuse++
		}
	}
	if fuse == 0 {
		t.Fatalf("after the pull no layer is mounted lazily under %s: %+v", state, ms)
	}
	var out strings.Builder
	ct, err := sz.Start(ctx, ref, rig.RunSpec{Name: "run", Args: []string{"cat", "/etc/debian_version"}, Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	waitEnd(t, ct, "the container")
	ct.Remove(ctx)
	if ct.ExitCode() != 0 || out.String() != want {
		t.Fatalf("exit %d, output %q, stderr %q", ct.ExitCode(), out.String(), ct.StderrTail())
	}

	// The development cycle: a one-file change pushed on top of the eStargz layers,
	// then a cold pull and a container that sees the file and the image.
	pr, err := sz.PushChange(ctx, img, ref, rig.Change{Tag: "dev-1", Path: "/hellobench/change", Content: []byte("changed\n")})
	if err != nil {
		t.Fatal(err)
	}
	if err := sz.Cold(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := sz.Pull(ctx, pr.Ref); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	ct, err = sz.Start(ctx, pr.Ref, rig.RunSpec{Name: "dev", Args: []string{"cat", "/hellobench/change", "/etc/debian_version"}, Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	waitEnd(t, ct, "the container of the changed image")
	ct.Remove(ctx)
	if ct.ExitCode() != 0 || out.String() != "changed\n"+want {
		t.Fatalf("changed image: exit %d, output %q, stderr %q", ct.ExitCode(), out.String(), ct.StderrTail())
	}

	sz.Close()
	if ms, _ := mount.Mounts(dir); len(ms) > 0 {
		t.Fatalf("Close left mounts: %+v", ms)
	}
}

// FileWatch records regular files opened or read on the watched filesystem, in
// first-access order, once each; a stat or a directory listing is not a read.
func TestFileWatch(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=4m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	for _, f := range []string{"a", "b", "c", "sub/d"} {
		os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o755)
		os.WriteFile(filepath.Join(dir, f), []byte(f), 0o644)
	}
	w, err := rig.WatchFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	os.ReadFile(filepath.Join(dir, "b"))
	os.Stat(filepath.Join(dir, "c"))
	os.ReadDir(filepath.Join(dir, "sub"))
	os.ReadFile(filepath.Join(dir, "a"))
	os.ReadFile(filepath.Join(dir, "b"))
	os.ReadFile(filepath.Join(dir, "sub", "d"))
	time.Sleep(100 * time.Millisecond) // events are read asynchronously
	files, err := w.Stop()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"/b", "/a", "/sub/d"}; !slices.Equal(files, want) {
		t.Fatalf("recorded %q, want %q", files, want)
	}
}
