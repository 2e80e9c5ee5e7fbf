package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/api"
	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/names"
	"github.com/slacker-dev/slacker/internal/testenv"
	"github.com/slacker-dev/slacker/internal/testenv/services"
	"github.com/slacker-dev/slacker/internal/testutil"
)

// ageStore makes every object of a local store look stored two hours ago, so that
// no grace period protects it: only names, leases and fences do.
func ageStore(dir string) {
	old := time.Now().Add(-2 * time.Hour)
	filepath.WalkDir(filepath.Join(dir, "sha256"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			os.Chtimes(p, old, old)
		}
		return nil
	})
}

var deletedRe = regexp.MustCompile(`(?:deleted|would delete) (\d+) \(`)

func gcDeleted(t *testing.T, out string) int {
	t.Helper()
	m := deletedRe.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("gc said: %s", out)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// TestGCAndCheck removes images and containers and collects the store: what no
// name, volume or lease holds goes, everything named still runs, and check finds
// every reference sound; then a chunk removed behind the store's back and a byte
// flipped in another are both reported by check, with the names that lead to them.
func TestGCAndCheck(t *testing.T) {
	testutil.RequireTool(t, "runc", "umoci")
	layout := testenv.DebianOCI(t)
	work := t.TempDir()
	storeDir := filepath.Join(work, "store")
	p := testenv.StartProcess(t, filepath.Join(work, "node"), storeDir,
		"--snapshot-hold", "1s", "--lease-interval", "200ms", "--cache-disk", "on")
	cli(t, p, 0, "convert", "-q", "oci:"+layout+":bookworm", "debian:bookworm")

	// Garbage: an image removed, with its container.
	cli(t, p, 0, "run", "--name", "junk", "debian:bookworm", "--", "sh", "-c", "head -c 8000000 /dev/urandom > /junk")
	cli(t, p, 0, "commit", "junk", "img:junk")
	junkSnap := imageSnapshot(t, p, "img:junk")
	cli(t, p, 0, "rm", "junk")
	cli(t, p, 0, "rmi", "img:junk")
	// Kept: an image removed whose container still exists.
	cli(t, p, 0, "run", "--name", "maker", "debian:bookworm", "--", "sh", "-c", "head -c 4000000 /dev/urandom > /keep && sha256sum /keep > /keep.sum")
	cli(t, p, 0, "commit", "maker", "img:keep")
	cli(t, p, 0, "rm", "maker")
	cli(t, p, 0, "run", "--name", "user", "img:keep", "--", "true")
	cli(t, p, 0, "rmi", "img:keep")
	time.Sleep(1500 * time.Millisecond) // the hold of the snapshots just written passes

	before := countObjects(t, storeDir)
	out := cli(t, p, 0, "gc", "--grace", "0", "--dry-run")
	would := gcDeleted(t, out)
	if would == 0 || countObjects(t, storeDir) != before {
		t.Fatalf("dry run: %s (%d objects before, %d after)", out, before, countObjects(t, storeDir))
	}
	out = cli(t, p, 0, "gc", "--grace", "0")
	deleted := gcDeleted(t, out)
	if deleted != would || countObjects(t, storeDir) != before-deleted || !strings.Contains(out, "lease of node") {
		t.Fatalf("gc: %s (dry run said %d; %d objects before, %d after)", out, would, before, countObjects(t, storeDir))
	}
	t.Logf("gc: %s", strings.TrimSpace(out))
	// The node wrote the junk image's map and keeps it, but the store no longer
	// has it: the snapshot is not found (a conversion cache pointing at it is
	// then stale, not reused).
	if _, err := api.NewClient(p.Socket).Snapshot(context.Background(), junkSnap); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("snapshot %s of the collected image: %v, want not found", junkSnap, err)
	}
	if out := cli(t, p, 0, "gc", "--grace", "0"); gcDeleted(t, out) != 0 {
		t.Fatalf("second gc: %s", out)
	}
	// What is named or used is whole.
	if out := cli(t, p, 0, "run", "--rm", "debian:bookworm", "--", "cat", "/etc/debian_version"); !strings.HasPrefix(out, "12.") {
		t.Fatalf("debian after gc: %q", out)
	}
	// The container whose image was removed still reads its whole root
	// filesystem (its volume's base is in the node's lease).
	var ps []struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(cli(t, p, 0, "ps", "-a", "--json")), &ps); err != nil || len(ps) != 1 {
		t.Fatalf("ps: %v %+v", err, ps)
	}
	if err := api.NewClient(p.Socket).DropCaches(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	vol, err := api.NewClient(p.Socket).Volume(context.Background(), ps[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	keep, err := readDirect(filepath.Join(vol.Mountpoint, "keep"))
	if err != nil {
		t.Fatal(err)
	}
	sum, err := os.ReadFile(filepath.Join(vol.Mountpoint, "keep.sum"))
	if err != nil {
		t.Fatal(err)
	}
	if h := sha256.Sum256(keep); !strings.HasPrefix(string(sum), hex.EncodeToString(h[:])) {
		t.Fatal("the container's file has other content after gc")
	}
	if out := cli(t, p, 0, "check", "--read-data"); !strings.Contains(out, ": 0 problems") {
		t.Fatalf("check after gc: %s", out)
	}
	// The CLI can open the store itself too.
	if out := cli(t, p, 0, "check", "--store", "local:"+storeDir); !strings.Contains(out, ": 0 problems") {
		t.Fatalf("check --store: %s", out)
	}
	// The node cache is trimmed on demand.
	if out := cli(t, p, 0, "gc", "--cache", "--keep", "0"); !strings.Contains(out, "cache: removed") || !strings.Contains(out, "0 B in 0 chunks left") {
		t.Fatalf("gc --cache: %s", out)
	}

	// Damage behind the store's back.
	var chunks []string
	filepath.WalkDir(filepath.Join(storeDir, "sha256"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, _ := d.Info(); fi != nil && fi.Size()%4096 == 0 && fi.Size() >= 64<<10 {
				chunks = append(chunks, p)
			}
		}
		return nil
	})
	if len(chunks) < 2 {
		t.Fatalf("%d chunks in the store", len(chunks))
	}
	os.Remove(chunks[0])
	b, err := os.ReadFile(chunks[1])
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/3] ^= 0x20
	os.WriteFile(chunks[1], b, 0o600)
	out, _, code := p.CLI(t, "check")
	// The report names the root that leads to the chunk: an image's name, or
	// (for a chunk only the container whose image was removed still uses) the
	// node's lease; which one depends on which chunk the walk met first.
	missing := "missing sha256:" + filepath.Base(chunks[0])
	if code != 1 || !strings.Contains(out, missing+" (name ") && !strings.Contains(out, missing+" (lease of node ") {
		t.Fatalf("check after a chunk was removed: exit %d\n%s", code, out)
	}
	out, _, code = p.CLI(t, "check", "--read-data")
	if code != 1 || !strings.Contains(out, "corrupt sha256:"+filepath.Base(chunks[1])) {
		t.Fatalf("check --read-data after a byte was flipped: exit %d\n%s", code, out)
	}
	cli(t, p, 0, "rm", "user")
}

// TestGCAcrossStalledUpload stops node A's slackerd (SIGSTOP) in the middle of a
// commit's upload, for longer than its lease lives, and collects the store from
// node B meanwhile, with no grace period: the collection deletes what A had
// uploaded. When A goes on, its fence sees the collection, it uploads the chunks
// again, and the committed image is whole (check --read-data), runs, and has the
// committed file byte for byte.
func TestGCAcrossStalledUpload(t *testing.T) {
	testutil.RequireTool(t, "runc", "umoci", "docker-registry")
	layout := testenv.DebianOCI(t)
	ctx := context.Background()
	work := t.TempDir()
	storeDir := filepath.Join(work, "store")
	reg, err := services.StartRegistry(ctx, services.RegistryOptions{Dir: filepath.Join(work, "registry")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Stop() })
	// A's lease expires while it is stopped: what only A protected (here, the
	// containerd snapshotter's blank base, so it is off) is then fair game; what
	// matters is that the upload in flight survives.
	a := testenv.StartProcess(t, filepath.Join(work, "a"), storeDir, "--lease-ttl", "2s", "--lease-interval", "500ms",
		"--snapshot-hold", "1s", "--snapshotter-socket", "off")
	b := testenv.StartProcess(t, filepath.Join(work, "b"), storeDir)
	ref := reg.Addr + "/slacker/debian:bookworm"
	cli(t, a, 0, "convert", "-q", "oci:"+layout+":bookworm", "debian:bookworm")
	cli(t, a, 0, "push", "debian:bookworm", ref)
	cli(t, b, 0, "pull", ref) // B names the base image too

	cli(t, a, 0, "run", "--name", "big", "debian:bookworm", "--", "sh", "-c",
		"head -c 80000000 /dev/urandom > /big && sha256sum /big > /big.sum")
	info, err := api.NewClient(a.Socket).Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if stopped {
			syscall.Kill(info.PID, syscall.SIGCONT)
		}
	})
	before := countObjects(t, storeDir)
	commit := runBackground(t, a, "commit", "big", "img:big")
	deadline := time.Now().Add(2 * time.Minute)
	for countObjects(t, storeDir) < before+20 {
		if time.Now().After(deadline) {
			t.Fatal("the commit uploaded nothing in 2 minutes")
		}
		time.Sleep(time.Millisecond)
	}
	if err := syscall.Kill(info.PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped = true
	uploaded := countObjects(t, storeDir) - before
	time.Sleep(3 * time.Second) // A's lease expires

	out := cli(t, b, 0, "gc", "--grace", "0", "--lease-skew", "0")
	t.Logf("gc with A stopped after %d uploads: %s", uploaded, strings.TrimSpace(out))
	if gcDeleted(t, out) == 0 || !strings.Contains(out, "expired") {
		t.Fatalf("the collection did not take A's uploaded chunks (A's lease expired): %s", out)
	}
	if err := syscall.Kill(info.PID, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stopped = false
	if code := commit.wait(t, 3*time.Minute); code != 0 {
		t.Fatalf("commit across the collection: exit %d\n%s", code, a.Log())
	}
	if !strings.Contains(a.Log(), "snapshot-rechecking-chunks") {
		t.Errorf("A did not check its chunks again after the collection")
	}
	if out, _, code := a.CLI(t, "check", "--read-data"); code != 0 {
		leases, _ := filepath.Glob(filepath.Join(storeDir, "refs", "leases", "*"))
		for _, l := range leases {
			b, _ := os.ReadFile(l)
			t.Logf("%s: %s", l, b)
		}
		t.Fatalf("check after the commit: %s\n%s", out, a.Log())
	}
	cli(t, a, 0, "run", "--rm", "img:big", "--", "sha256sum", "-c", "/big.sum")
	cli(t, a, 0, "rm", "big")
}

// TestGCDuringConcurrentConversions converts and pushes one image on two nodes at
// once, sharing a store, while garbage collections run over and over and every
// object in the store is made to look old (so only names, leases and fences
// protect anything). Both conversions and pushes succeed, both nodes run the
// image, every reference is sound, and the old garbage is gone.
func TestGCDuringConcurrentConversions(t *testing.T) {
	testutil.RequireTool(t, "runc", "umoci", "docker-registry")
	layout := testenv.DebianOCI(t)
	ctx := context.Background()
	work := t.TempDir()
	storeDir := filepath.Join(work, "store")
	reg, err := services.StartRegistry(ctx, services.RegistryOptions{Dir: filepath.Join(work, "registry")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Stop() })
	a := testenv.StartProcess(t, filepath.Join(work, "a"), storeDir, "--snapshot-hold", "1s", "--lease-interval", "200ms")
	b := testenv.StartProcess(t, filepath.Join(work, "b"), storeDir, "--snapshot-hold", "1s", "--lease-interval", "200ms")

	// Old garbage: a blank filesystem nothing names.
	junk, err := api.NewClient(a.Socket).Mkfs(ctx, api.MkfsRequest{Size: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	gcs := 0
	var gcErr string
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			ageStore(storeDir)
			out, errOut, code := a.CLI(t, "gc", "--grace", "30m")
			if code != 0 {
				gcErr = out + errOut
				return
			}
			gcs++
			time.Sleep(300 * time.Millisecond)
		}
	}()
	var convWG sync.WaitGroup
	results := make([]string, 2)
	converted := make([]string, 2) // what each conversion said, for a failure's report
	for i, p := range []*testenv.Process{a, b} {
		convWG.Add(1)
		go func() {
			defer convWG.Done()
			out, errOut, code := p.CLI(t, "convert", "oci:"+layout+":bookworm", "debian:bookworm")
			converted[i] = out + errOut
			if code == 0 {
				out, errOut, code = p.CLI(t, "push", "debian:bookworm", reg.Addr+"/slacker/debian:bookworm")
			}
			if code != 0 {
				results[i] = out + errOut
			}
		}()
	}
	convWG.Wait()
	close(stop)
	wg.Wait()
	t.Logf("%d collections ran during the conversions", gcs)
	if gcErr != "" {
		t.Fatalf("gc during the conversions: %s", gcErr)
	}
	for i, r := range results {
		if r != "" {
			t.Fatalf("conversion and push on node %d: %s", i, r)
		}
	}
	if gcs == 0 {
		t.Fatal("no collection ran during the conversions")
	}
	ageStore(storeDir)
	cli(t, a, 0, "gc", "--grace", "30m")
	for i, p := range []*testenv.Process{a, b} {
		if out := cli(t, p, 0, "check", "--read-data"); !strings.Contains(out, ": 0 problems") {
			t.Fatalf("check: %s", out)
		}
		out, errOut, code := p.CLI(t, "run", "--rm", "debian:bookworm", "--", "cat", "/etc/debian_version")
		if code != 0 || !strings.HasPrefix(out, "12.") {
			t.Errorf("slacker run --rm debian:bookworm -- cat /etc/debian_version on node %d: exit %d, want 0, stdout %q\nstderr: %s",
				i, code, out, errOut)
			explainImage(t, p, "debian:bookworm", converted[i], a, b)
			t.FailNow()
		}
	}
	if _, err := os.Stat(filepath.Join(storeDir, "sha256", junk.ID.Encoded()[:2], junk.ID.Encoded())); err == nil {
		t.Fatal("the old unnamed snapshot survived the collections")
	}
}

// imageSnapshot returns the snapshot of an image named on p.
func imageSnapshot(t *testing.T, p *testenv.Process, name string) digest.Digest {
	t.Helper()
	ns, err := names.Open(filepath.Join(p.Root, "images"))
	if err != nil {
		t.Fatal(err)
	}
	e, err := ns.Get(name)
	if err != nil {
		t.Fatal(err)
	}
	return e.Descriptor.Snapshot
}

// explainImage logs what may tell why an image that check finds sound does not run:
// its snapshots (the image's and its layers'), what its conversion said, what its
// filesystem holds (/usr/bin, mounted from a fresh volume), the warnings and errors
// of every daemon, and the kernel's recent complaints.
func explainImage(t *testing.T, p *testenv.Process, name, converted string, all ...*testenv.Process) {
	t.Helper()
	t.Logf("the conversion on this node said:\n%s", converted)
	ns, err := names.Open(filepath.Join(p.Root, "images"))
	if err != nil {
		t.Logf("names: %v", err)
		return
	}
	e, err := ns.Get(name)
	if err != nil {
		t.Logf("name %s: %v", name, err)
		return
	}
	t.Logf("%s: snapshot %s, layers %+v", name, e.Descriptor.Snapshot, e.Descriptor.Layers)
	ctx := context.Background()
	c := api.NewClient(p.Socket)
	vol, err := c.CreateVolume(ctx, api.CreateVolumeRequest{ID: "explain", Snapshot: e.Descriptor.Snapshot, Mount: true})
	if err != nil {
		t.Logf("mount the image's snapshot: %v", err)
	} else {
		ents, err := os.ReadDir(filepath.Join(vol.Mountpoint, "usr", "bin"))
		_, catErr := os.Stat(filepath.Join(vol.Mountpoint, "usr", "bin", "cat"))
		top, _ := os.ReadDir(vol.Mountpoint)
		var topNames []string
		for _, d := range top {
			topNames = append(topNames, d.Name())
		}
		t.Logf("the image's filesystem: / has %v; /usr/bin has %d entries (err %v); stat /usr/bin/cat: %v", topNames, len(ents), err, catErr)
		if err := c.DeleteVolume(ctx, "explain"); err != nil {
			t.Logf("delete the volume: %v", err)
		}
	}
	for i, q := range all {
		var lines []string
		for _, l := range strings.Split(q.Log(), "\n") {
			if strings.Contains(l, `"level":"WARN"`) || strings.Contains(l, `"level":"ERROR"`) {
				lines = append(lines, l)
			}
		}
		t.Logf("node %d's warnings and errors (%d):\n%s", i, len(lines), strings.Join(lines, "\n"))
	}
	if out, err := exec.Command("dmesg").CombinedOutput(); err == nil {
		var lines []string
		for _, l := range strings.Split(string(out), "\n") {
			routine := strings.Contains(l, "mounted filesystem") || strings.Contains(l, "unmounting filesystem") ||
				strings.Contains(l, "capacity change")
			if !routine && (strings.Contains(l, "EXT4") || strings.Contains(l, "I/O error") || strings.Contains(l, "loop") ||
				strings.Contains(l, "fuse")) {
				lines = append(lines, l)
			}
		}
		t.Logf("the kernel's last complaints:\n%s", strings.Join(lines[max(0, len(lines)-40):], "\n"))
	}
}
