package node

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/slacker-dev/slacker/internal/store/local"
	"github.com/slacker-dev/slacker/internal/testutil"
)

// holdMount starts a process in a new mount namespace, made while dir is mounted,
// whose working directory is dir there: it keeps its copy of the mount busy, so
// that neither unmounting dir here nor removing the mountpoint (which detaches
// idle copies elsewhere) shuts the filesystem down. A container starting, or any
// unshare, makes such copies. It returns once the process sits in dir; it is
// killed in t.Cleanup.
func holdMount(t *testing.T, dir string) *exec.Cmd {
	t.Helper()
	testutil.RequireTool(t, "unshare", "sh", "sleep")
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", `cd "$1" && exec sleep 600`, "sh", dir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	self, _ := os.Readlink("/proc/self/ns/mnt")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", cmd.Process.Pid))
		ns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", cmd.Process.Pid))
		if strings.TrimSpace(string(comm)) == "sleep" && ns != "" && ns != self {
			return cmd
		}
		if time.Now().After(deadline) {
			t.Fatalf("unshare did not settle in a new mount namespace in 10s (comm %q, ns %q)", comm, ns)
		}
	}
}

// TestUnmountWhileAnotherNamespaceHoldsTheMount writes files into a mounted volume
// (no fsync) while another mount namespace holds a busy copy of the mount, then
// unmounts and snapshots the volume. The unmount here succeeds without shutting
// the filesystem down (the copy holds it), so unless the node flushes the
// filesystem before unmounting, the volume and its snapshot miss what was written,
// every chunk sound: an image converted so runs without its files. The snapshot,
// cloned and mounted (as a container's root is) while the copy still lives, has
// every file.
func TestUnmountWhileAnotherNamespaceHoldsTheMount(t *testing.T) {
	requirePrivileged(t)
	testutil.RequireTool(t, "debugfs")
	ctx := context.Background()
	dir := t.TempDir()
	st, err := local.Open(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	n := openNode(t, filepath.Join(dir, "node"), st)
	t.Cleanup(func() { n.Close(ctx) })
	blank, err := n.MakeFilesystem(ctx, 256<<20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.CreateVolume(ctx, CreateOptions{ID: "w", Snapshot: blank.ID}); err != nil {
		t.Fatal(err)
	}
	v, err := n.MountVolume(ctx, "w", false)
	if err != nil {
		t.Fatal(err)
	}
	holder := holdMount(t, v.Mountpoint)
	files := map[string][]byte{}
	for i := range 40 {
		b := make([]byte, 1000*i)
		rand.Read(b)
		name := filepath.Join("usr", "bin", fmt.Sprintf("f%02d", i))
		os.MkdirAll(filepath.Join(v.Mountpoint, "usr", "bin"), 0o755)
		if err := os.WriteFile(filepath.Join(v.Mountpoint, name), b, 0o755); err != nil {
			t.Fatal(err)
		}
		files[name] = b
	}
	if err := n.UnmountVolume(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	// Right away, the volume has every file in place (debugfs replays no journal).
	if out, err := exec.Command("debugfs", "-R", "stat /usr/bin/f39", v.File).CombinedOutput(); err != nil || !strings.Contains(string(out), "Size: 39000") {
		t.Errorf("just after the unmount, the volume's filesystem lacks /usr/bin/f39: %v\n%s", err, out)
	}
	snap, err := n.SnapshotVolume(ctx, "w", SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n2 := openNode(t, filepath.Join(dir, "node2"), st)
	t.Cleanup(func() { n2.Close(ctx) })
	if _, err := n2.CreateVolume(ctx, CreateOptions{ID: "r", Snapshot: snap.ID}); err != nil {
		t.Fatal(err)
	}
	r, err := n2.MountVolume(ctx, "r", false)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(r.Mountpoint, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s is not in the snapshot taken after the unmount, or differs (err %v)", name, err)
		}
	}
	holder.Process.Kill()
	holder.Wait()
}

// TestUnmountReportsLostWrites fills the disk under a volume's delta while its
// filesystem holds unwritten data: the kernel cannot write it back, which an
// unmount alone would only log (and a snapshot then silently miss). UnmountVolume
// fails, saying writes were lost, and the volume can still be deleted.
func TestUnmountReportsLostWrites(t *testing.T) {
	requirePrivileged(t)
	ctx := context.Background()
	dir := t.TempDir()
	small := filepath.Join(dir, "small")
	if err := os.MkdirAll(small, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", small, "tmpfs", 0, "size=48m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(small, unix.MNT_DETACH) }) // after the node closes
	st, err := local.Open(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	n, err := Open(ctx, Config{Root: filepath.Join(small, "node"), Store: st, CacheNoDisk: true, DefaultSize: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close(ctx) })
	blank, err := n.MakeFilesystem(ctx, 512<<20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.CreateVolume(ctx, CreateOptions{ID: "full", Snapshot: blank.ID}); err != nil {
		t.Fatal(err)
	}
	v, err := n.MountVolume(ctx, "full", false)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 96<<20)
	rand.Read(b)
	// The filesystem has room: the write succeeds into the page cache.
	if err := os.WriteFile(filepath.Join(v.Mountpoint, "big"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	err = n.UnmountVolume(ctx, "full")
	if err == nil || !strings.Contains(err.Error(), "flush its filesystem") {
		t.Fatalf("unmount of a volume whose writes could not be stored: %v, want an error", err)
	}
	t.Logf("unmount: %v", err)
	if err := n.DeleteVolume(ctx, "full"); err != nil {
		t.Fatal(err)
	}
}
