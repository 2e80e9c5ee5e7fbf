package corpus

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/slacker-dev/slacker/internal/testenv/services"
	"github.com/slacker-dev/slacker/internal/testutil"
)

const smokeDoc = `
[[workload]]
name = "busybox"
category = "distro"
base = "scratch"
layers = [["busybox-static"]]
files = { "/etc/motd" = "MOTD1\n" }
cmd = ["/bin/busybox", "echo", "hello"]
ready = { exit = 0 }
timeout_s = 60

[[workload]]
name = "hello-world"
category = "other"
base = "scratch"
layers = []
cmd = ["/hello"]
ready = { exit = 0 }
timeout_s = 30
`

// brokenDoc has one workload that cannot be built and one whose cmd is not in
// its image; they share busybox's cached layer.
const brokenDoc = `
[[workload]]
name = "nopkg"
category = "other"
base = "scratch"
layers = [["no-such-package-hellobench"]]
cmd = ["/x"]
ready = { exit = 0 }
timeout_s = 10

[[workload]]
name = "nocmd"
category = "other"
base = "scratch"
layers = [["busybox-static"]]
cmd = ["/bin/nothere", "/etc/missing.conf"]
ready = { exit = 0 }
timeout_s = 10
`

func noMountsUnder(t *testing.T, dir string) {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte(dir)) {
		t.Fatalf("mounts left under %s:\n%s", dir, b)
	}
}

// TestSmokeBuildUnpackPush builds two tiny scratch images for real (apt
// download of busybox-static, overlay + chroot for the app layer, gcc -static
// for /hello), checks that umoci unpacks them and that busybox runs, rebuilds
// incrementally, and pushes them to a docker-registry started for the test.
func TestSmokeBuildUnpackPush(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "apt-get", "dpkg-deb", "gcc", "umoci", "docker-registry")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()
	t.Cleanup(func() { noMountsUnder(t, dir) })
	var progress bytes.Buffer
	c, err := Open(Options{Dir: dir, MinFree: 256 << 20, Progress: &progress})
	if err != nil {
		t.Fatal(err)
	}
	ws := parse(t, smokeDoc)

	rep, err := c.Build(ctx, ws)
	if err != nil {
		t.Fatalf("build: %v\n%s", err, progress.String())
	}
	for _, r := range rep.Results {
		if r.Status != StatusBuilt {
			t.Fatalf("%s: %s %v\n%s", r.Name, r.Status, r.Err, progress.String())
		}
		if len(r.Record.Problems) > 0 {
			t.Errorf("%s: problems %v", r.Name, r.Record.Problems)
		}
	}
	bb := rep.Results[0].Record
	if len(bb.Layers) != 2 || bb.Layers[0].Added[0].Name != "busybox-static" || bb.Layers[0].Added[0].Version == "" {
		t.Fatalf("busybox record: %+v", bb.Layers)
	}
	if hw := rep.Results[1].Record; len(hw.Layers) != 1 || hw.Layers[0].Kind != StepApp {
		t.Fatalf("hello-world record: %+v", hw.Layers)
	}
	if _, err := os.Stat(filepath.Join(dir, "work")); !os.IsNotExist(err) {
		t.Errorf("work directory left behind: %v", err)
	}
	noMountsUnder(t, dir)

	// umoci accepts the layout, applies the whiteout-capable layers, and the
	// result runs.
	for _, img := range []struct{ name, bin, want string }{
		{"busybox", "/bin/busybox", "hello"},
		{"hello-world", "/hello", "hello"},
	} {
		bundle := filepath.Join(t.TempDir(), "bundle")
		if out, err := exec.CommandContext(ctx, "umoci", "unpack", "--image", filepath.Join(dir, "oci")+":"+img.name, bundle).CombinedOutput(); err != nil {
			t.Fatalf("umoci unpack %s: %v\n%s", img.name, err, out)
		}
		args := []string{filepath.Join(bundle, "rootfs"), img.bin}
		if img.name == "busybox" {
			args = append(args, "echo", "hello")
		}
		out, err := exec.CommandContext(ctx, "chroot", args...).CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != img.want {
			t.Fatalf("run %s in %s: %v %q", img.bin, img.name, err, out)
		}
		if img.name == "busybox" {
			if b, err := os.ReadFile(filepath.Join(bundle, "rootfs/etc/motd")); err != nil || string(b) != "MOTD1\n" {
				t.Fatalf("motd: %q %v", b, err)
			}
		}
	}

	// Unchanged definitions are not rebuilt.
	rep, err = c.Build(ctx, ws)
	if err != nil {
		t.Fatal(err)
	}
	if rep.LayersBuilt != 0 || rep.Results[0].Status != StatusUpToDate || rep.Results[1].Status != StatusUpToDate {
		t.Fatalf("second build was not a no-op: %+v", rep)
	}

	// A changed file rebuilds only the app layer; the package layer blob stays.
	ws2 := parse(t, strings.Replace(smokeDoc, "MOTD1", "MOTD2", 1))
	rep, err = c.Build(ctx, ws2[:1])
	if err != nil {
		t.Fatal(err)
	}
	r := rep.Results[0]
	if r.Status != StatusBuilt || rep.LayersBuilt != 1 {
		t.Fatalf("incremental build: %s, %d layers built", r.Status, rep.LayersBuilt)
	}
	if r.Record.Layers[0].Digest != bb.Layers[0].Digest || r.Record.Layers[1].Digest == bb.Layers[1].Digest {
		t.Fatalf("incremental build did not keep layer 1 and replace layer 2")
	}

	// A workload that cannot be built fails with apt's reason; one whose cmd is
	// not in the image is built with the problem recorded.
	rep, err = c.Build(ctx, parse(t, brokenDoc))
	if err != nil {
		t.Fatal(err)
	}
	if r := rep.Results[0]; r.Status != StatusFailed || !strings.Contains(firstLine(r.Err), "Unable to locate package no-such-package-hellobench") {
		t.Errorf("nopkg: %s %v", r.Status, r.Err)
	}
	if r := rep.Results[1]; r.Status != StatusBuilt || len(r.Record.Problems) != 2 ||
		!strings.Contains(r.Record.Problems[0], `"/bin/nothere"`) || !strings.Contains(r.Record.Problems[1], "/etc/missing.conf") {
		t.Errorf("nocmd: %s %+v", r.Status, r.Record)
	}
	if err := c.Remove([]string{"nocmd"}); err != nil {
		t.Fatal(err)
	}

	// Rebuilding an image whose layers are all the same blobs again (here:
	// --recheck, which rebuilds app layers) gives the very same manifest.
	before, _ := c.Layout.Tags()
	c.opts.Recheck = true
	rep, err = c.Build(ctx, ws)
	c.opts.Recheck = false
	if err != nil {
		t.Fatal(err)
	}
	after, _ := c.Layout.Tags()
	if rep.LayersBuilt != 2 || after["hello-world"].Digest != before["hello-world"].Digest {
		t.Errorf("recheck: %d layers built, hello-world %s -> %s", rep.LayersBuilt, before["hello-world"].Digest, after["hello-world"].Digest)
	}

	// Push to a real registry and read the manifests back.
	reg, err := services.StartRegistry(ctx, services.RegistryOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Stop() })
	res, err := Push(ctx, dir, PushOptions{Registry: reg.Addr})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 {
		t.Fatalf("pushed %d images", len(res))
	}
	tags, _ := c.Layout.Tags()
	for _, p := range res {
		ref, err := name.ParseReference(p.Ref, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		desc, err := remote.Get(ref, remote.WithContext(ctx))
		if err != nil {
			t.Fatalf("get %s: %v", p.Ref, err)
		}
		if desc.Digest != tags[p.Name].Digest {
			t.Errorf("%s: registry has %s, layout %s", p.Name, desc.Digest, tags[p.Name].Digest)
		}
		img, err := desc.Image()
		if err != nil {
			t.Fatal(err)
		}
		layers, _ := img.Layers()
		for _, l := range layers {
			if mt, _ := l.MediaType(); !strings.Contains(string(mt), "tar+gzip") {
				t.Errorf("%s: layer media type %s", p.Name, mt)
			}
		}
	}
}
