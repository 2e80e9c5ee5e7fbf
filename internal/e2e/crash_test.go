package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/slacker-dev/slacker/internal/api"
	"github.com/slacker-dev/slacker/internal/labels"
	"github.com/slacker-dev/slacker/internal/mount"
	"github.com/slacker-dev/slacker/internal/testenv"
	"github.com/slacker-dev/slacker/internal/testutil"
)

// background is a `slacker run` left running, its stdout read line by line; what
// the test writes to stdin reaches a container run with -i.
type background struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	mu    sync.Mutex
	lines []string
	done  chan struct{}
	code  int
}

func runBackground(t *testing.T, p *testenv.Process, args ...string) *background {
	t.Helper()
	bin, _ := testenv.Binaries(t)
	b := &background{cmd: exec.Command(bin, args...), done: make(chan struct{})}
	b.cmd.Env = append(os.Environ(), "SLACKER_SOCKET="+p.Socket)
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := b.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if b.stdin, err = b.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	b.cmd.Stderr = &stderr
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			b.mu.Lock()
			b.lines = append(b.lines, sc.Text())
			b.mu.Unlock()
		}
		b.cmd.Wait()
		b.code = b.cmd.ProcessState.ExitCode()
		close(b.done)
	}()
	t.Cleanup(func() {
		select {
		case <-b.done:
		default:
			syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
			<-b.done
		}
	})
	return b
}

func (b *background) output() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.lines...)
}

func (b *background) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-b.done:
		return b.code
	case <-time.After(timeout):
		t.Fatalf("slacker %v still running after %v", b.cmd.Args[1:], timeout)
		return -1
	}
}

// seqContent is what `seq i i+2000` prints.
func seqContent(i int) []byte {
	var b bytes.Buffer
	for k := i; k <= i+2000; k++ {
		b.WriteString(strconv.Itoa(k))
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// TestContainersSurviveSlackerd kills slackerd with SIGKILL (or has it hand the
// node over, SIGUSR2, to a different build of itself) while containers write and
// fsync files in their root filesystems, and starts a new slackerd a second
// later. The new one takes the FUSE connection over from the holder: every
// container finishes its work with no I/O error (each writer exits 0 having
// written every file), a sleeping container lives on, each writer's commit holds
// every file it wrote, byte for byte, and a block root's filesystem is clean
// (e2fsck -fn) once unmounted. In each container root mode, and with 16
// containers at once (both modes).
func TestContainersSurviveSlackerd(t *testing.T) {
	testutil.RequireTool(t, "runc", "umoci")
	testutil.RequireOverlay(t)
	layout := testenv.DebianOCI(t)
	for _, c := range []struct {
		name, how string
		modes     []string // one writer per entry
		files     int      // each writer's
		killAt    int      // files written by each writer before the kill
	}{
		{"kill9/shared", "kill9", []string{"shared"}, 100, 20},
		{"kill9/block", "kill9", []string{"block"}, 100, 20},
		{"upgrade/shared", "upgrade", []string{"shared"}, 100, 20},
		{"upgrade/block", "upgrade", []string{"block"}, 100, 20},
		{"kill9/16", "kill9", []string{"shared", "block", "shared", "block", "shared", "block", "shared", "block",
			"shared", "block", "shared", "block", "shared", "block", "shared", "block"}, 150, 3},
	} {
		t.Run(c.name, func(t *testing.T) { surviveSlackerd(t, layout, c.how, c.modes, c.files, c.killAt) })
	}
}

func surviveSlackerd(t *testing.T, layout, how string, modes []string, files, killAt int) {
	ctx := context.Background()
	work := t.TempDir()
	p := testenv.StartProcess(t, filepath.Join(work, "node"), filepath.Join(work, "store"))
	cli(t, p, 0, "convert", "-q", "oci:"+layout+":bookworm", "debian:bookworm")
	next := ""
	if how == "upgrade" {
		next = testenv.NextSlackerd(t)
	}

	// Each writer writes files 0..files-1 with seq (read from the image), fsyncs
	// each and prints its number; any error ends it with a non-zero status. After
	// killAt files it waits for a line on stdin, so that none can finish before
	// every container runs (starting 17 containers on a loaded machine took
	// minutes once, and the writers that started first had ended).
	script := fmt.Sprintf(`set -e; i=0; while [ $i -lt %d ]; do if [ $i -eq %d ]; then read go; fi; seq $i $((i+2000)) > /data-$i; sync /data-$i; echo $i; i=$((i+1)); done`, files, killAt)
	writers := make([]*background, len(modes))
	for i, mode := range modes {
		writers[i] = runBackground(t, p, "run", "-i", "--root-mode", mode, "--name", fmt.Sprintf("writer%d", i), "debian:bookworm", "--", "sh", "-c", script)
	}
	sleeper := runBackground(t, p, "run", "--root-mode", modes[0], "--name", "sleeper", "debian:bookworm", "--", "sleep", "100000")
	// On a failure, the containers go before slackerd does (a killed `slacker run`
	// leaves its container running).
	t.Cleanup(func() {
		if t.Failed() {
			p.CLI(t, append([]string{"rm", "-f", "sleeper"}, containerNames(len(modes))...)...)
		}
	})
	deadline := time.Now().Add(5 * time.Minute)
	for i, w := range writers {
		for len(w.output()) < killAt {
			select {
			case <-w.done:
				t.Fatalf("writer%d exited %d after %d files, before the kill\n%s", i, w.code, len(w.output()), p.Log())
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("writer%d reported %d files in 5 minutes\n%s", i, len(w.output()), p.Log())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	for {
		out := cli(t, p, 0, "ps", "-q")
		if len(strings.Fields(out)) == len(modes)+1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("running before: %q", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Every writer goes on, and slackerd goes at once: they write through the gap.
	for i, w := range writers {
		if _, err := io.WriteString(w.stdin, "go\n"); err != nil {
			t.Fatalf("writer%d's stdin: %v", i, err)
		}
	}
	if how == "upgrade" {
		p.Handover()
	} else {
		p.Kill9()
	}
	t.Logf("%s of slackerd after %d files (writer0)", how, len(writers[0].output()))
	time.Sleep(time.Second) // nobody serves: the containers' I/O waits
	if how == "upgrade" {
		p.RestartWith(next)
	} else {
		p.Restart()
	}
	log := p.Log()
	for _, want := range []string{"fuse-connection-taken-over", "volume-adopted", `"msg":"container-kept","container":"sleeper"`} {
		if !strings.Contains(log, want) {
			t.Errorf("the new slackerd did not log %s", want)
		}
	}
	for _, bad := range []string{"reconcile-killed-container", "reconcile-unmounted", "volume-io-error"} {
		if strings.Contains(log, bad) {
			t.Errorf("slackerd logged %s", bad)
		}
	}
	if how == "upgrade" {
		if n := strings.Count(log, `"msg":"volume-handed-over"`); n < len(modes)+1 {
			t.Errorf("%d volume-handed-over lines, want one per volume (at least %d)", n, len(modes)+1)
		}
		if !strings.Contains(log, `next","taken_over":true`) && !strings.Contains(log, `"taken_over":true`) {
			t.Errorf("the new build did not log taking the node over")
		}
		if !strings.Contains(log, ` next"`) {
			t.Errorf("the node-ready line of the new build does not name it (build tag next)")
		}
	}
	for i, w := range writers {
		if code := w.wait(t, 3*time.Minute); code != 0 {
			t.Errorf("writer%d exited %d after %d files\n%s", i, code, len(w.output()), p.Log())
		}
		if got := len(w.output()); got != files {
			t.Errorf("writer%d wrote %d files, want %d", i, got, files)
		}
	}
	select {
	case <-sleeper.done:
		t.Fatalf("the sleeping container ended (%d)", sleeper.code)
	default:
	}
	if t.Failed() {
		t.FailNow()
	}

	// Each writer's commit holds every file it wrote; a block root is clean.
	check := fmt.Sprintf(`i=0; while [ $i -lt %d ]; do seq $i $((i+2000)) | cmp -s - /data-$i || { echo bad $i; exit 1; }; i=$((i+1)); done; echo ok`, files)
	var ps []struct {
		ID   string `json:"id"`
		Name string `json:"name"`
	}
	if err := json.Unmarshal([]byte(cli(t, p, 0, "ps", "-a", "--json")), &ps); err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{}
	for _, c := range ps {
		ids[c.Name] = c.ID
	}
	c := api.NewClient(p.Socket)
	for i, mode := range modes {
		name := fmt.Sprintf("writer%d", i)
		cli(t, p, 0, "commit", name, "debian:"+name)
		if out := cli(t, p, 0, "run", "--rm", "debian:"+name, "--", "sh", "-c", check); strings.TrimSpace(out) != "ok" {
			t.Errorf("%s's commit: %s", name, out)
		}
		if mode == "block" {
			vol, err := c.Volume(ctx, ids[name])
			if err != nil {
				t.Fatal(err)
			}
			if err := c.UnmountVolume(ctx, ids[name]); err != nil {
				t.Fatal(err)
			}
			if out, err := mount.Fsck(ctx, vol.File); err != nil {
				t.Errorf("%s's root filesystem: %v\n%s", name, err, out)
			}
		}
	}
	cli(t, p, 0, "rm", "-f", "sleeper")
	sleeper.wait(t, time.Minute)
	for i := range modes {
		cli(t, p, 0, "rm", fmt.Sprintf("writer%d", i))
	}
	if out := cli(t, p, 0, "ps", "-a", "-q"); out != "" {
		t.Fatalf("containers left: %q", out)
	}
	// What is left goes with drop-caches: the idle image root, and a local image
	// being written from a clone of it (a long test's root idles long enough to
	// start one), once that write ends.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if err := c.DropCaches(ctx, false); err != nil {
			t.Fatal(err)
		}
		vols, err := c.Volumes(ctx)
		if err == nil && len(vols) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("volumes left after drop-caches: %+v %v", vols, err)
		}
	}
}

// containerNames are the names of n writers: writer0, writer1, ...
func containerNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("writer%d", i)
	}
	return out
}

// TestKill9WithoutHolder: with fuse_hold off, a slackerd killed with SIGKILL
// ends its containers' I/O, and the next one reconciles as before the holder
// existed: the containers are stopped and recorded as exited; their roots are
// remounted with every fsynced file; the filesystem is clean; the writer's root
// can be committed and run; removing the containers leaves nothing behind. The
// same when no slackerd comes within fuse_hold (2s): the holder ends the
// connection, the writer's I/O fails (it stops writing), and the next slackerd
// reconciles; in block mode, whose writes go through slackerd (a shared root's
// go to its upper layer on the node's disk: only its reads of the image wait).
func TestKill9WithoutHolder(t *testing.T) {
	testutil.RequireTool(t, "runc", "umoci")
	testutil.RequireOverlay(t)
	layout := testenv.DebianOCI(t)
	for _, c := range []struct{ hold, mode string }{{"off", "shared"}, {"off", "block"}, {"2s", "block"}} {
		t.Run("hold-"+c.hold+"/"+c.mode, func(t *testing.T) { kill9WithoutHolder(t, layout, c.mode, c.hold) })
	}
}

func kill9WithoutHolder(t *testing.T, layout, mode, hold string) {
	ctx := context.Background()
	work := t.TempDir()
	p := testenv.StartProcess(t, filepath.Join(work, "node"), filepath.Join(work, "store"), "--fuse-hold", hold)
	cli(t, p, 0, "convert", "-q", "oci:"+layout+":bookworm", "debian:bookworm")

	writer := runBackground(t, p, "run", "--root-mode", mode, "--name", "writer", "debian:bookworm", "--", "sh", "-c",
		`i=0; while :; do seq $i $((i+2000)) > /data-$i && sync /data-$i && echo $i; i=$((i+1)); done`)
	sleeper := runBackground(t, p, "run", "--root-mode", mode, "--name", "sleeper", "debian:bookworm", "--", "sleep", "100000")
	deadline := time.Now().Add(2 * time.Minute)
	for len(writer.output()) < 30 {
		if time.Now().After(deadline) {
			t.Fatalf("the writer container reported %d files in 2 minutes\n%s", len(writer.output()), p.Log())
		}
		time.Sleep(10 * time.Millisecond)
	}
	var ps []struct {
		ID     string `json:"id"`
		Name   string `json:"name"`
		Status string `json:"status"`
	}
	if err := json.Unmarshal([]byte(cli(t, p, 0, "ps", "--json")), &ps); err != nil || len(ps) != 2 {
		t.Fatalf("ps before the crash: %v %+v", err, ps)
	}
	p.Kill9()
	if hold != "off" {
		// Past the limit, the holder ends the connection: the writer's next
		// fsync fails, and it writes no more.
		time.Sleep(2 * time.Second)
		for n, deadline := len(writer.output()), time.Now().Add(10*time.Second); ; n = len(writer.output()) {
			time.Sleep(500 * time.Millisecond)
			if len(writer.output()) == n {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the writer still writes %s after the kill, fuse_hold %s", 12*time.Second, hold)
			}
		}
		if b, err := os.ReadFile(filepath.Join(p.Root, "fuse-holder.log")); err != nil || !strings.Contains(string(b), "fuse-connection-ended") {
			t.Errorf("the holder did not end the connection: %v\n%s", err, b)
		}
	}
	durable := writer.output() // every line was printed after its file's fsync
	t.Logf("killed slackerd after %d fsynced files", len(durable))

	p.Restart("--fuse-hold", hold)
	log := p.Log()
	for _, want := range []string{"reconcile-unmounted", "volume-remounted", "reconcile-killed-container"} {
		if !strings.Contains(log, want) {
			t.Errorf("restarted slackerd did not log %s", want)
		}
	}
	// The sleeper touches nothing and lives on until reconciliation kills it; the
	// writer may have died on its own already (SIGBUS paging in from a dead root).
	if !strings.Contains(log, `"msg":"reconcile-killed-container","container":"sleeper"`) {
		t.Errorf("reconciliation did not kill the sleeping container\n%s", log)
	}
	t.Logf("writer exit %d, sleeper exit %d", writer.wait(t, time.Minute), sleeper.wait(t, time.Minute))

	if err := json.Unmarshal([]byte(cli(t, p, 0, "ps", "-a", "--json")), &ps); err != nil || len(ps) != 2 {
		t.Fatalf("ps after the restart: %v %+v", err, ps)
	}
	ids := map[string]string{}
	for _, c := range ps {
		if c.Status != "exited" {
			t.Errorf("container %s is %q after the restart, want exited", c.Name, c.Status)
		}
		ids[c.Name] = c.ID
	}
	if out := cli(t, p, 0, "ps", "-q"); out != "" {
		t.Errorf("running after the restart: %q", out)
	}

	// Every fsynced file is in the writer's remounted volume.
	c := api.NewClient(p.Socket)
	vol, err := c.Volume(ctx, ids["writer"])
	if err != nil || !vol.Mounted {
		t.Fatalf("writer's volume after the restart: %+v %v", vol, err)
	}
	for _, line := range durable {
		i, err := strconv.Atoi(line)
		if err != nil {
			t.Fatalf("writer printed %q", line)
		}
		got, err := os.ReadFile(filepath.Join(vol.Mountpoint, fmt.Sprintf("data-%d", i)))
		if err != nil || !bytes.Equal(got, seqContent(i)) {
			t.Fatalf("fsynced file data-%d after the crash: %v", i, err)
		}
	}
	last := durable[len(durable)-1]
	cli(t, p, 0, "commit", "writer", "debian:after-crash")
	if out := cli(t, p, 0, "run", "--rm", "debian:after-crash", "--", "cat", "/data-"+last); out != string(seqContent(atoi(t, last))) {
		t.Fatalf("committed image's last fsynced file: %d bytes", len(out))
	}
	if err := c.UnmountVolume(ctx, ids["writer"]); err != nil {
		t.Fatal(err)
	}
	fsckFile := vol.File
	if mode == "shared" { // the writer's changes are files on the node's disk; the image root is the ext4
		vols, err := c.Volumes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vols {
			if v.Labels[labels.Kind] == labels.KindImageRoot {
				fsckFile = v.File
			}
		}
	}
	if out, err := mount.Fsck(ctx, fsckFile); err != nil {
		t.Fatalf("%s root's filesystem after kill -9: %v\n%s", mode, err, out)
	}
	cli(t, p, 0, "rm", "writer", "sleeper")
	if out := cli(t, p, 0, "ps", "-a", "-q"); out != "" {
		t.Fatalf("containers left: %q", out)
	}
	if ents, _ := os.ReadDir(filepath.Join(p.Root, "runc")); len(ents) != 0 {
		t.Errorf("runc state left: %v", ents)
	}
	// The image root lingers, idle, for the image's next container; dropping the
	// caches ends it, and then nothing is left.
	vols, err := c.Volumes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vols {
		if v.Labels[labels.Kind] != labels.KindImageRoot || !v.Idle {
			t.Errorf("volume left after rm: %+v", v)
		}
	}
	if err := c.DropCaches(ctx, false); err != nil {
		t.Fatal(err)
	}
	if vols, err = c.Volumes(ctx); err != nil || len(vols) != 0 {
		t.Errorf("volumes left after drop-caches: %+v %v", vols, err)
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	i, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return i
}

// TestKill9DuringSnapshot kills slackerd while it snapshots a mounted volume, that
// is while the volume's filesystem is frozen. The restarted daemon thaws and
// remounts it: the volume takes writes again, holds every fsynced file, is clean,
// and the loop device of the dead mount is freed rather than held by a frozen
// filesystem.
func TestKill9DuringSnapshot(t *testing.T) {
	ctx := context.Background()
	work := t.TempDir()
	storeDir := filepath.Join(work, "store")
	p := testenv.StartProcess(t, filepath.Join(work, "node"), storeDir)
	c := api.NewClient(p.Socket)
	blank, err := c.Mkfs(ctx, api.MkfsRequest{Size: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprintf("frozen-%d", time.Now().UnixNano())
	vol, err := c.CreateVolume(ctx, api.CreateVolumeRequest{ID: id, Snapshot: blank.ID, Mount: true})
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for i := range 8 {
		name := fmt.Sprintf("big%d", i)
		files[name] = randomBytes(t, 32<<20)
		writeSynced(t, filepath.Join(vol.Mountpoint, name), files[name])
	}
	before := countObjects(t, storeDir)
	go c.SnapshotVolume(ctx, id, api.SnapshotRequest{}) // fails when the daemon dies
	deadline := time.Now().Add(time.Minute)
	for countObjects(t, storeDir) < before+4 {
		if time.Now().After(deadline) {
			t.Fatal("the snapshot uploaded nothing in a minute")
		}
		time.Sleep(time.Millisecond)
	}
	p.Kill9()
	p.Restart()
	if !strings.Contains(p.Log(), "reconcile-thawed") {
		t.Errorf("restarted slackerd did not thaw the frozen filesystem")
	}
	vol, err = c.Volume(ctx, id)
	if err != nil || !vol.Mounted {
		t.Fatalf("volume after the restart: %+v %v", vol, err)
	}
	written := make(chan struct{})
	go func() {
		defer close(written)
		files["after"] = []byte("written after the restart")
		writeSynced(t, filepath.Join(vol.Mountpoint, "after"), files["after"])
	}()
	select {
	case <-written:
	case <-time.After(time.Minute):
		t.Fatal("a write to the remounted volume blocked for a minute: still frozen")
	}
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(vol.Mountpoint, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("fsynced file %s: %v", name, err)
		}
	}
	if err := c.UnmountVolume(ctx, id); err != nil {
		t.Fatal(err)
	}
	if out, err := mount.Fsck(ctx, vol.File); err != nil {
		t.Fatalf("filesystem after kill -9 during a snapshot: %v\n%s", err, out)
	}
	if err := c.DeleteVolume(ctx, id); err != nil {
		t.Fatal(err)
	}
	// The dead mount's loop device (its backing file now shows as "/ID") is gone.
	deadline = time.Now().Add(10 * time.Second)
	for {
		loops, err := mount.ListLoops()
		if err != nil {
			t.Fatal(err)
		}
		held := ""
		for _, l := range loops {
			if strings.HasSuffix(l.BackingFile, "/"+id) {
				held = l.Path
			}
		}
		if held == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("loop device %s of the crashed mount is still attached", held)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func countObjects(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	filepath.WalkDir(filepath.Join(dir, "sha256"), func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			n++
		}
		return nil
	})
	return n
}
