package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/slacker-dev/slacker/internal/api"
	"github.com/slacker-dev/slacker/internal/testenv"
	"github.com/slacker-dev/slacker/internal/testenv/services"
	"github.com/slacker-dev/slacker/internal/testutil"
)

// whiteoutLayer deletes /etc/debian_version (an OCI whiteout), makes /var/log
// opaque (removing everything under it), and adds /etc/added.
func whiteoutLayer(t *testing.T) v1.Layer {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range []*tar.Header{
		{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "etc/.wh.debian_version", Typeflag: tar.TypeReg, Mode: 0o644},
		{Name: "etc/added", Typeflag: tar.TypeReg, Mode: 0o644, Size: 6},
		{Name: "var/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "var/log/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "var/log/.wh..wh..opq", Typeflag: tar.TypeReg, Mode: 0o644},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			tw.Write([]byte("added\n"))
		}
	}
	tw.Close()
	b := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// layoutImage returns the first image of the OCI layout at dir.
func layoutImage(t *testing.T, dir string) v1.Image {
	t.Helper()
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil || len(m.Manifests) == 0 {
		t.Fatalf("layout index: %v", err)
	}
	img, err := idx.Image(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// pushImage pushes img to ref, a plain-HTTP registry.
func pushImage(t *testing.T, img v1.Image, ref string) {
	t.Helper()
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img); err != nil {
		t.Fatal(err)
	}
}

// pushOrdinary pushes the Debian layout plus the whiteout layer to ref as an
// ordinary two-layer OCI image.
func pushOrdinary(t *testing.T, layoutDir, ref string) {
	img, err := mutate.AppendLayers(layoutImage(t, layoutDir), whiteoutLayer(t))
	if err != nil {
		t.Fatal(err)
	}
	pushImage(t, img, ref)
}

func ctr(t *testing.T, c *services.Containerd, args ...string) string {
	t.Helper()
	out, err := c.Ctr(context.Background(), args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestContainerdSnapshotter drives a real containerd 1.6 with slackerd's
// snapshotter as a proxy plugin: a Slacker image is pulled without downloading or
// unpacking anything (remote snapshot) and run lazily with runc; an ordinary
// two-layer image with whiteouts is pulled through the same snapshotter (unpacked
// into clones, logged as not lazy) and runs with the right files; a stock
// containerd (overlayfs) pulls the Slacker image but cannot run it, and finds the
// README that says why. A container run through containerd outlives a kill -9
// of slackerd (the next one takes the node over).
func TestContainerdSnapshotter(t *testing.T) {
	testutil.RequireTool(t, "runc", "docker-registry", "umoci", "containerd", "ctr")
	layoutDir := testenv.DebianOCI(t)
	ctx := context.Background()
	work := t.TempDir()
	store := filepath.Join(work, "store")
	// Publish: convert and push on a node of its own; push the ordinary image too.
	pub := publishDebian(t, work, store, "")
	slackerRef, plainRef := pub.ref, pub.reg.Addr+"/oci/debian:whiteouts"
	pushOrdinary(t, layoutDir, plainRef)

	// Node B: empty state, same store, serving the snapshotter to containerd.
	b := testenv.StartProcess(t, filepath.Join(work, "nodeB"), store)
	cdir, err := os.MkdirTemp("", "ctrd-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(cdir) })
	c, err := services.StartContainerd(ctx, services.ContainerdOptions{Dir: cdir,
		ProxySnapshotters: map[string]string{"slacker": filepath.Join(b.Root, "snapshotter.sock")}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Stop() })
	if out := ctr(t, c, "plugins", "ls"); !strings.Contains(out, "slacker") {
		t.Fatalf("containerd does not list the slacker snapshotter:\n%s", out)
	}

	// The Slacker image: ctr 1.6 passes no labels, so containerd fetches the
	// few-KB Slacker layer and unpacks it; the snapshotter recognises it at commit
	// and the snapshot stands for the image's filesystem.
	ctr(t, c, "images", "pull", "--plain-http", "--snapshotter", "slacker", slackerRef)
	if !strings.Contains(b.Log(), `"msg":"remote-snapshot-prepared"`) || !strings.Contains(b.Log(), `"via":"layer"`) {
		t.Fatalf("no remote-snapshot-prepared via the layer in slackerd's log:\n%s", b.Log())
	}
	if out := ctr(t, c, "run", "--rm", "--snapshotter", "slacker", slackerRef, "lazy1", "cat", "/etc/debian_version"); !strings.HasPrefix(out, "12.") {
		t.Fatalf("debian_version through containerd: %q", out)
	}
	st, err := api.NewClient(b.Socket).Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("fetched ahead: %+v", st.Prefetch) // to tell readahead or a trace from the start's own reads
	checkLazyShare(t, "pull + run through containerd", st.Fetch.FetchedBytes, pub.dataSize)
	// A container's writes stay in its own volume.
	ctr(t, c, "run", "--rm", "--snapshotter", "slacker", slackerRef, "w1", "sh", "-c", "echo mine > /etc/motd")
	if out := ctr(t, c, "run", "--rm", "--snapshotter", "slacker", slackerRef, "w2", "cat", "/etc/motd"); strings.Contains(out, "mine") {
		t.Fatal("a container saw another container's write")
	}

	// A containerd container outlives slackerd: killed with SIGKILL while the
	// container writes and fsyncs, a new slackerd takes the node over; the
	// container finishes with every file it wrote, and containerd removes it
	// through the new slackerd's snapshotter.
	script := `set -e; i=0; while [ $i -lt 60 ]; do seq $i $((i+2000)) > /data-$i; sync /data-$i; sleep 0.05; i=$((i+1)); done
i=0; while [ $i -lt 60 ]; do seq $i $((i+2000)) | cmp -s - /data-$i; i=$((i+1)); done; echo survived`
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := c.Ctr(ctx, "run", "--rm", "--snapshotter", "slacker", slackerRef, "survivor", "sh", "-c", script)
		done <- result{out, err}
	}()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if out, _ := c.Ctr(ctx, "tasks", "ls"); strings.Contains(out, "RUNNING") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the survivor container did not start in a minute")
		}
	}
	time.Sleep(time.Second)
	b.Kill9()
	time.Sleep(time.Second)
	b.Restart()
	select {
	case r := <-done:
		if r.err != nil || strings.TrimSpace(r.out) != "survived" {
			t.Fatalf("a containerd container across a slackerd kill -9: %v %q\n%s", r.err, r.out, b.Log())
		}
	case <-time.After(3 * time.Minute):
		t.Fatal("the survivor container did not finish in 3 minutes")
	}
	if !strings.Contains(b.Log(), "fuse-connection-taken-over") {
		t.Error("the new slackerd did not take the node over")
	}

	// The ordinary image: unpacked into clones with OCI whiteouts, logged as not lazy.
	// containerd's connection to the snapshotter socket broke with the killed
	// slackerd, and gRPC redials with a backoff (1 s, then longer), failing calls
	// at once meanwhile with the last dial's error ("connection refused": the
	// socket had no listener between the kill and the restart). A pull right
	// after the take-over sometimes fell in that window; it is retried while the
	// snapshotter is unavailable to containerd, for up to 30 s.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		_, err := c.Ctr(context.Background(), "images", "pull", "--plain-http", "--snapshotter", "slacker", plainRef)
		if err == nil {
			break
		}
		if !strings.Contains(err.Error(), "connection refused") || time.Now().After(deadline) {
			t.Fatalf("%v\nthe new slackerd's log:\n%s", err, b.Log())
		}
	}
	if !strings.Contains(b.Log(), `"msg":"snapshot-not-lazy"`) {
		t.Fatal("no snapshot-not-lazy in slackerd's log after pulling an ordinary image")
	}
	out := ctr(t, c, "run", "--rm", "--snapshotter", "slacker", plainRef, "plain1", "sh", "-c",
		"cat /etc/added; test -e /etc/debian_version && echo whiteout-ignored; ls -A /var/log | wc -l; test -d /lost+found && echo lost+found; true")
	if out != "added\n0\n" {
		t.Fatalf("ordinary image through the snapshotter: %q, want added, no /etc/debian_version, empty /var/log, no lost+found", out)
	}

	// nerdctl, when it is installed (scripts/setup.sh builds it).
	if _, err := exec.LookPath("nerdctl"); err == nil || os.Getenv("SLACKER_CI") != "" {
		out, err := exec.Command("nerdctl", "--address", c.Socket, "--namespace", "nerd", "--data-root", filepath.Join(cdir, "nerdctl"),
			"--snapshotter", "slacker", "--insecure-registry", "run", "--rm", "--net", "none", slackerRef, "cat", "/etc/debian_version").CombinedOutput()
		lines := strings.Split(strings.TrimSpace(string(out)), "\n") // pull progress, then the output
		if err != nil || !strings.HasPrefix(lines[len(lines)-1], "12.") {
			t.Fatalf("nerdctl run: %v\n%s", err, out)
		}
		// nerdctl passes the layer's annotations: containerd skips the layer.
		if !strings.Contains(b.Log(), `"via":"label"`) {
			t.Fatalf("nerdctl's pull was not a remote snapshot by label:\n%s", b.Log())
		}
	}

	// A stock containerd (overlayfs) pulls the Slacker image as any other, and the
	// container holds only .slacker/: the image's command cannot start.
	ctr(t, c, "-n", "stock", "images", "pull", "--plain-http", slackerRef)
	out, err = c.Ctr(ctx, "-n", "stock", "run", "--rm", slackerRef, "stock1", "cat", "/etc/debian_version")
	if err == nil {
		t.Fatalf("a stock containerd ran the Slacker image: %q", out)
	}
	t.Logf("stock containerd: %v", err)
	// ctr images mount holds a lease on the view it mounts (a bare `ctr snapshots
	// view` does not: containerd may collect the view before it is mounted).
	mnt := filepath.Join(cdir, "readme")
	os.MkdirAll(mnt, 0o755)
	ctr(t, c, "-n", "stock", "images", "mount", slackerRef, mnt)
	readme, err := os.ReadFile(filepath.Join(mnt, ".slacker", "README"))
	ctr(t, c, "-n", "stock", "images", "unmount", "--rm", mnt)
	if err != nil || !strings.Contains(string(readme), "--snapshotter slacker") {
		t.Fatalf("README in the stock unpack: %v %q", err, readme)
	}
}
