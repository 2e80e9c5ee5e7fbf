package corpus

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/slacker-dev/slacker/internal/mount"
	"github.com/slacker-dev/slacker/internal/testutil"
)

// A mount table as a helper inherits it while slackerd, containerd and a test's
// network namespace are busy on the host (lines in proc(5)'s mountinfo format).
const hostTable = `22 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw
23 22 0:5 / /dev rw,nosuid shared:2 - devtmpfs udev rw
24 22 0:21 / /proc rw,nosuid shared:12 - proc proc rw
25 22 0:22 / /sys rw,nosuid shared:7 - sysfs sysfs rw
30 22 0:40 / /run rw,nosuid shared:5 - tmpfs tmpfs rw
40 22 0:50 / /var/lib/slacker/fuse rw shared:20 - fuse.slackerd slackerd rw,user_id=0
41 22 7:3 / /var/lib/slacker/mounts/c1 rw shared:21 - ext4 /dev/loop3 rw
42 41 0:51 / /var/lib/slacker/mounts/c1/dev/shm rw shared:22 - tmpfs shm rw
50 22 0:60 / /run/containerd/io.containerd.runtime.v2.task/default/web/rootfs rw shared:30 - overlay overlay rw,lowerdir=/a:/b
51 30 0:4 net:[4026532555] /run/netns/slk-a rw shared:31 - nsfs nsfs rw
60 22 7:5 / /var/tmp/corpus\040dir rw shared:40 - ext4 /dev/loop5 rw
61 22 0:70 / /mnt/other\040fuse rw shared:41 - fuse sshfs rw
`

func TestHostMountsToDrop(t *testing.T) {
	table, err := mount.ParseMountInfo(strings.NewReader(hostTable), "/")
	if err != nil {
		t.Fatal(err)
	}
	// The corpus directory is on a loop-backed ext4 here: the job's paths keep it.
	job := &helperJob{Upper: "/var/tmp/corpus dir/layers/3/upper", Lowers: []string{"/var/tmp/corpus dir/layers/2/upper"},
		Result: "/var/tmp/corpus dir/tmp/result.json"}
	got := hostMountsToDrop(table, job.keptPaths())
	want := []string{
		"/mnt/other fuse",
		"/run/netns/slk-a",
		"/run/containerd/io.containerd.runtime.v2.task/default/web/rootfs",
		"/var/lib/slacker/mounts/c1",
		"/var/lib/slacker/fuse",
	}
	if !slices.Equal(got, want) {
		t.Errorf("dropped %q,\nwant %q (deepest first; the root, system mounts and the job's own filesystem kept)", got, want)
	}
	// A host whose root filesystem is an overlay (inside a container) keeps it.
	table, err = mount.ParseMountInfo(strings.NewReader("1 0 0:30 / / rw - overlay overlay rw,lowerdir=/x\n"), "/")
	if err != nil {
		t.Fatal(err)
	}
	if got := hostMountsToDrop(table, job.keptPaths()); len(got) != 0 {
		t.Errorf("dropped %q of an overlay root", got)
	}
}

// TestHelperDetachesHostMounts runs a real helper while the host has an ext4 on a
// loop device mounted (as slackerd has for each container): the helper's
// namespace must not keep it.
func TestHelperDetachesHostMounts(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "mkfs.ext4")
	dir := t.TempDir()
	img := filepath.Join(dir, "volume.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 32<<20); err != nil {
		t.Fatal(err)
	}
	if err := mount.Mkfs(t.Context(), img, mount.MkfsOptions{}); err != nil {
		t.Fatal(err)
	}
	loop, err := mount.AttachLoop(img, mount.LoopOptions{Autoclear: true})
	if err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(dir, "container root")
	err = mount.MountExt4(loop.Path, target, false, "")
	loop.Close() // the mount holds the device now; autoclear detaches it after
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(target, 0); err != nil {
			t.Errorf("unmount %s: %v", target, err)
		}
	})

	work := filepath.Join(dir, "job")
	job := helperJob{Op: opUnpack, Upper: filepath.Join(work, "upper"), Result: filepath.Join(work, "result.json")}
	if err := os.MkdirAll(job.Upper, 0o755); err != nil {
		t.Fatal(err)
	}
	logFile := filepath.Join(work, "helper.log")
	if _, err := runHelper(t.Context(), job, logFile); err != nil {
		t.Fatal(err)
	}
	log, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), "detached") || !strings.Contains(string(log), " "+target) {
		t.Fatalf("the helper did not detach %s (a loop-backed ext4 of the host); its log:\n%s", target, log)
	}
}
