package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/slacker-dev/slacker/internal/api"
	"github.com/slacker-dev/slacker/internal/graphdriver"
	"github.com/slacker-dev/slacker/internal/labels"
	"github.com/slacker-dev/slacker/internal/testenv"
	"github.com/slacker-dev/slacker/internal/testenv/services"
	"github.com/slacker-dev/slacker/internal/testutil"
)

// pluginDir is where dockerd looks for plugin sockets.
const pluginDir = "/run/docker/plugins"

// dockerNode is a slackerd serving the graph-driver plugin and a dockerd using it.
type dockerNode struct {
	slackerd *testenv.Process
	docker   *services.Dockerd
	driver   string
}

// keepRunDocker removes /run/docker/plugins and /run/docker at the end of the test if
// they did not exist before it (slackerd creates them for its plugin socket).
func keepRunDocker(t testing.TB) {
	_, errRun := os.Stat("/run/docker")
	_, errPlugins := os.Stat(pluginDir)
	t.Cleanup(func() {
		if errPlugins != nil {
			os.Remove(pluginDir) // only if empty: another test process may use it
		}
		if errRun != nil {
			os.Remove("/run/docker")
		}
	})
}

// startDockerNode starts slackerd with the graph-driver plugin on the given store,
// making containers' roots in mode, and a dockerd with it as storage driver. The
// plugin's name is unique to this test process, so test processes running at once
// never share a socket (dockerd finds plugin NAME at /run/docker/plugins/NAME.sock).
func startDockerNode(t *testing.T, dir, store, name string, shared bool, registry, mode string) *dockerNode {
	t.Helper()
	driver := fmt.Sprintf("slacker-e2e-%d-%s", os.Getpid(), name)
	extra := []string{"--graphdriver-socket", filepath.Join(pluginDir, driver+".sock"), "--container-root", mode}
	if shared {
		extra = append(extra, "--graphdriver-shared-store")
	}
	p := testenv.StartProcess(t, filepath.Join(dir, "slackerd-"+name), store, extra...)
	d, err := services.StartDockerd(context.Background(), services.DockerdOptions{Dir: filepath.Join(dir, "d"+name),
		StorageDriver: driver, Experimental: true, InsecureRegistries: []string{registry}})
	if err != nil {
		t.Fatalf("dockerd with the slacker graph driver: %v\nslackerd:\n%s", err, p.Log())
	}
	// Stopped before slackerd (cleanups run last-in first-out).
	t.Cleanup(func() {
		if err := d.Stop(); err != nil {
			t.Error(err)
		}
	})
	return &dockerNode{slackerd: p, docker: d, driver: driver}
}

func dockerOK(t *testing.T, d *services.Dockerd, args ...string) string {
	t.Helper()
	out, err := d.Docker(context.Background(), args...)
	if err != nil {
		t.Fatalf("%v\ndockerd log tail:\n%s", err, tailString(d.Log(), 3000))
	}
	return out
}

func tailString(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// dockerExit runs docker and returns its exit code.
func dockerExit(t *testing.T, d *services.Dockerd, args ...string) int {
	t.Helper()
	err := d.Command(context.Background(), args...).Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0
}

func sortedLines(s string) []string {
	ls := strings.Split(strings.TrimSpace(s), "\n")
	sort.Strings(ls)
	return ls
}

// TestDocker drives real dockerd 20.10s through the slacker graph driver, once with
// containers on shared image roots (the default) and once on block clones: docker
// load and run of an ordinary image, docker pull of an image pushed by slacker push
// (lazy), diff, commit (a Slacker layer with a shared store, an ordinary tar
// without), push and pull between two nodes sharing a store, a container in the
// other mode through --storage-opt root-mode, and a stock dockerd (overlay2) that
// runs what a node without a shared store pushed and refuses a Slacker layer with a
// message that says what to do.
func TestDocker(t *testing.T) {
	testutil.RequireTool(t, "dockerd", "docker", "docker-registry", "skopeo", "umoci", "runc")
	layout := testenv.DebianOCI(t)
	ctx := context.Background()
	keepRunDocker(t)
	reg, err := services.StartRegistry(ctx, services.RegistryOptions{Dir: filepath.Join(t.TempDir(), "registry")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Stop() })
	for _, mode := range []string{"shared", "block"} {
		t.Run(mode, func(t *testing.T) {
			if mode == "shared" {
				testutil.RequireOverlay(t)
			}
			testDocker(t, layout, reg.Addr, mode)
		})
	}
}

func testDocker(t *testing.T, layout, registry, mode string) {
	ctx := context.Background()
	work := t.TempDir()
	store := filepath.Join(work, "store")
	other := map[string]string{"shared": "block", "block": "shared"}[mode]

	// Node A: its store is shared, so commits make Slacker layers.
	a := startDockerNode(t, work, store, "a-"+mode, true, registry, mode)
	info := dockerOK(t, a.docker, "info", "--format", "{{.Driver}}|{{range .DriverStatus}}{{index . 0}}={{index . 1}};{{end}}")
	if !strings.HasPrefix(info, a.driver+"|") || !strings.Contains(info, "Slacker Layers=on") ||
		!strings.Contains(info, "Container Roots="+mode+":") {
		t.Fatalf("docker info: %s", info)
	}

	t.Run("load and run an ordinary image", func(t *testing.T) {
		archive := filepath.Join(work, "debian.tar")
		testenv.Run(t, "skopeo", "copy", "-q", "oci:"+layout+":bookworm", "docker-archive:"+archive+":debian:bookworm")
		dockerOK(t, a.docker, "load", "-i", archive)
		os.Remove(archive)
		if !strings.Contains(a.slackerd.Log(), `"msg":"layer-applied"`) {
			t.Fatal("docker load did not apply the layer into a clone (no layer-applied event)")
		}
		if out := dockerOK(t, a.docker, "run", "--rm", "--network", "none", "debian:bookworm", "cat", "/etc/debian_version"); !strings.HasPrefix(out, "12.") {
			t.Fatalf("debian_version: %q", out)
		}
		if code := dockerExit(t, a.docker, "run", "--rm", "--network", "none", "debian:bookworm", "sh", "-c", "exit 3"); code != 3 {
			t.Fatalf("exit code %d, want 3", code)
		}
	})

	// An image pushed by slacker push is pulled by docker in kilobytes.
	cli(t, a.slackerd, 0, "convert", "-q", "oci:"+layout+":bookworm", "debian:slacker")
	slk := registry + "/slacker/debian:bookworm-" + mode
	cli(t, a.slackerd, 0, "push", "debian:slacker", slk)
	changed := registry + "/slacker/debian:changed-" + mode

	t.Run("a container outlives a kill -9 of slackerd", func(t *testing.T) {
		dockerOK(t, a.docker, "run", "-d", "--name", "survivor", "--network", "none", "debian:bookworm", "sh", "-c",
			`set -e; i=0; while [ $i -lt 60 ]; do seq $i $((i+2000)) > /data-$i; sync /data-$i; sleep 0.05; i=$((i+1)); done
i=0; while [ $i -lt 60 ]; do seq $i $((i+2000)) | cmp -s - /data-$i; i=$((i+1)); done; echo survived`)
		time.Sleep(time.Second)
		a.slackerd.Kill9()
		time.Sleep(time.Second)
		a.slackerd.Restart()
		if code := strings.TrimSpace(dockerOK(t, a.docker, "wait", "survivor")); code != "0" {
			t.Fatalf("the container exited %s across the kill\n%s", code, dockerOK(t, a.docker, "logs", "survivor"))
		}
		if out := dockerOK(t, a.docker, "logs", "survivor"); strings.TrimSpace(out) != "survived" {
			t.Fatalf("the container's output: %q", out)
		}
		if !strings.Contains(a.slackerd.Log(), "fuse-connection-taken-over") {
			t.Error("the new slackerd did not take the node over")
		}
		dockerOK(t, a.docker, "rm", "survivor")
	})

	t.Run("pull, diff, commit and push a Slacker image", func(t *testing.T) {
		dockerOK(t, a.docker, "pull", "-q", slk)
		if !strings.Contains(a.slackerd.Log(), `"format":"image"`) {
			t.Fatal("docker pull of a slacker-pushed image did not record its Slacker layer")
		}
		dockerOK(t, a.docker, "run", "--name", "c1", "--network", "none", slk, "sh", "-c",
			"echo changed > /etc/motd; rm /etc/issue; mkdir /data; echo x > /data/f")
		got := sortedLines(dockerOK(t, a.docker, "diff", "c1"))
		want := []string{"A /data", "A /data/f", "C /etc", "C /etc/motd", "D /etc/issue"}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("docker diff: %q, want %q", got, want)
		}
		if got := dockerOK(t, a.docker, "inspect", "-f", "{{.GraphDriver.Data.RootMode}}", "c1"); strings.TrimSpace(got) != mode {
			t.Fatalf("c1's root mode %q, want %q", got, mode)
		}
		dockerOK(t, a.docker, "commit", "c1", changed)
		if !strings.Contains(a.slackerd.Log(), `"msg":"slacker-layer-made"`) {
			t.Fatal("docker commit with a shared store did not make a Slacker layer")
		}
		out := dockerOK(t, a.docker, "run", "--rm", "--network", "none", changed, "sh", "-c",
			"cat /etc/motd /data/f; test ! -e /etc/issue && echo gone; test ! -e /.slacker && echo clean")
		if out != "changed\nx\ngone\nclean\n" {
			t.Fatalf("the committed image: %q", out)
		}
		// The committed layer, as docker save reassembles it, is a Slacker layer.
		saved := filepath.Join(work, "changed.tar")
		dockerOK(t, a.docker, "save", "-o", saved, changed)
		m := topSlackerLayer(t, saved)
		if m.Store != "local:"+store || m.Size == 0 {
			t.Fatalf("marker %+v", m)
		}
		dockerOK(t, a.docker, "push", changed)
		dockerOK(t, a.docker, "rm", "c1")
	})

	t.Run("containers of one image", func(t *testing.T) { dockerRoots(t, a, slk, mode, other) })

	// Node B shares A's store but not with anyone else: its commits are ordinary tars.
	b := startDockerNode(t, work, store, "b-"+mode, false, registry, mode)
	t.Run("pull lazily on a node sharing the store", func(t *testing.T) {
		dockerOK(t, b.docker, "pull", "-q", changed)
		out := dockerOK(t, b.docker, "run", "--name", "c2", "--network", "none", changed, "sh", "-c", "cat /etc/motd; echo fromB > /etc/motd")
		if out != "changed\n" {
			t.Fatalf("run on B: %q", out)
		}
		st, err := api.NewClient(b.slackerd.Socket).Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// Pull and run moved a fraction of the 185 MiB image.
		if st.Fetch.FetchedBytes == 0 || st.Fetch.FetchedBytes > 40<<20 {
			t.Fatalf("pull + run on B fetched %d bytes; not lazy", st.Fetch.FetchedBytes)
		}
		t.Logf("B: docker pull + run fetched %d bytes", st.Fetch.FetchedBytes)
		dockerOK(t, b.docker, "commit", "c2", "fromb")
		if !strings.Contains(b.slackerd.Log(), `"msg":"layer-diff-tar"`) {
			t.Fatal("docker commit without a shared store did not make an ordinary tar")
		}
		if out := dockerOK(t, b.docker, "run", "--rm", "--network", "none", "fromb", "cat", "/etc/motd"); out != "fromB\n" {
			t.Fatalf("B's commit: %q", out)
		}
	})

	t.Run("stock Docker", func(t *testing.T) {
		c, err := services.StartDockerd(ctx, services.DockerdOptions{Dir: filepath.Join(work, "dc"), InsecureRegistries: []string{registry}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Stop()
		// A Slacker layer fails the pull with a message that says what to do.
		_, err = c.Docker(ctx, "pull", changed)
		if err == nil || !strings.Contains(err.Error(), "SLACKER LAYER - run this image with the slacker graph driver") {
			t.Fatalf("stock pull of a Slacker layer: %v", err)
		}
		// What a node without a shared store commits from an ordinary image runs
		// anywhere.
		tiny := tinyImage(t, work)
		dockerOK(t, b.docker, "load", "-i", tiny)
		dockerOK(t, b.docker, "run", "--name", "c3", "--network", "none", "tiny", "/t", "write", "/msg", "written on B")
		ref := registry + "/plain/tiny:b-" + mode
		dockerOK(t, b.docker, "commit", "c3", ref)
		dockerOK(t, b.docker, "push", ref)
		dockerOK(t, c, "pull", "-q", ref)
		if out := dockerOK(t, c, "run", "--rm", "--network", "none", ref, "/t", "cat", "/msg"); out != "written on B" {
			t.Fatalf("stock Docker running B's commit: %q", out)
		}
	})

	t.Run("removing everything removes every volume", func(t *testing.T) {
		dockerOK(t, b.docker, "rm", "-f", "c2", "c3")
		for _, img := range []string{"fromb", changed, "tiny", registry + "/plain/tiny:b-" + mode} {
			dockerOK(t, b.docker, "rmi", img)
		}
		c := api.NewClient(b.slackerd.Socket)
		vols, err := c.Volumes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vols { // idle image roots linger (image_root_linger)
			if strings.HasPrefix(v.ID, "docker-") || v.Labels[labels.Kind] == labels.KindImageRoot && !v.Idle {
				t.Errorf("volume %s left on B", v.ID)
			}
		}
		if err := c.DropCaches(ctx, false); err != nil {
			t.Fatal(err)
		}
		if vols, err = c.Volumes(ctx); err != nil || len(vols) != 0 {
			t.Errorf("volumes left on B after drop-caches: %+v %v", vols, err)
		}
	})
}

// dockerRoots runs containers of img on node a, whose containers' roots are made
// in mode: two running containers of the image stand on one read-only mount of it
// (shared) or on clones of their own (block); --storage-opt root-mode=OTHER makes
// one in the other mode, which diff and commit like the rest; a root mode that
// does not exist fails docker run with a message naming the two.
func dockerRoots(t *testing.T, a *dockerNode, img, mode, other string) {
	ctx := context.Background()
	c := api.NewClient(a.slackerd.Socket)
	volumeOf := func(name string) api.Volume {
		t.Helper()
		id := strings.TrimSpace(dockerOK(t, a.docker, "inspect", "-f", "{{.GraphDriver.Data.Volume}}", name))
		vols, err := c.Volumes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vols {
			if v.ID == id {
				return v
			}
		}
		t.Fatalf("container %s: no volume %q", name, id)
		return api.Volume{}
	}
	busyImageRoots := func() []api.Volume {
		t.Helper()
		vols, err := c.Volumes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []api.Volume
		for _, v := range vols { // idle roots of earlier containers linger: not these
			if v.Labels[labels.Kind] == labels.KindImageRoot && !v.Idle {
				out = append(out, v)
			}
		}
		return out
	}
	for _, name := range []string{"r1", "r2"} {
		dockerOK(t, a.docker, "run", "-d", "--name", name, "--network", "none", img, "sleep", "600")
	}
	defer dockerOK(t, a.docker, "rm", "-f", "r1", "r2")
	v1, v2 := volumeOf("r1"), volumeOf("r2")
	irs := busyImageRoots()
	if mode == "shared" {
		if len(irs) != 1 || v1.Mode != "shared" || v2.Mode != "shared" || v1.Image != irs[0].Base || v2.Image != v1.Image {
			t.Fatalf("two containers of one image: %+v and %+v over image roots %+v, want one", v1, v2, irs)
		}
	} else if len(irs) != 0 || v1.Mode != "" || v2.Mode != "" || v1.Device == "" || v2.Device == "" {
		t.Fatalf("block containers: %+v and %+v, image roots %+v", v1, v2, irs)
	}

	dockerOK(t, a.docker, "run", "--name", "o1", "--storage-opt", "root-mode="+other, "--network", "none", img,
		"sh", "-c", "echo other > /etc/motd; mkdir /o")
	defer dockerOK(t, a.docker, "rm", "o1")
	if got := strings.TrimSpace(dockerOK(t, a.docker, "inspect", "-f", "{{.GraphDriver.Data.RootMode}}", "o1")); got != other {
		t.Fatalf("--storage-opt root-mode=%s made a %q root", other, got)
	}
	if v := volumeOf("o1"); (v.Mode == "shared") != (other == "shared") {
		t.Fatalf("--storage-opt root-mode=%s: volume %+v", other, v)
	}
	got := sortedLines(dockerOK(t, a.docker, "diff", "o1"))
	if want := []string{"A /o", "C /etc/motd"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("docker diff of a %s root: %q, want %q", other, got, want)
	}
	dockerOK(t, a.docker, "commit", "o1", "other:"+mode)
	defer dockerOK(t, a.docker, "rmi", "other:"+mode)
	if out := dockerOK(t, a.docker, "run", "--rm", "--network", "none", "other:"+mode, "sh", "-c",
		"cat /etc/motd; test -d /o && echo dir"); out != "other\ndir\n" {
		t.Fatalf("the commit of a %s root: %q", other, out)
	}

	_, err := a.docker.Docker(ctx, "run", "--rm", "--storage-opt", "root-mode=fast", "--network", "none", img, "true")
	if err == nil || !strings.Contains(err.Error(), "root-mode=shared") || !strings.Contains(err.Error(), "root-mode=block") {
		t.Fatalf("docker run --storage-opt root-mode=fast: %v", err)
	}
}

// topSlackerLayer reads a docker-archive and decodes its last layer as a Slacker layer.
func topSlackerLayer(t *testing.T, archive string) graphdriver.Marker {
	t.Helper()
	img, err := tarball.ImageFromPath(archive, nil)
	if err != nil {
		t.Fatal(err)
	}
	ls, err := img.Layers()
	if err != nil || len(ls) == 0 {
		t.Fatalf("layers: %v", err)
	}
	rc, err := ls[len(ls)-1].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	m, err := graphdriver.DecodeLayer(b)
	if err != nil {
		t.Fatalf("the committed layer (%d bytes) is not a Slacker layer: %v", len(b), err)
	}
	return m
}

// tinyImage writes a docker-archive of a one-layer image holding /t, a static
// program that writes and prints files (there is no shell in it).
func tinyImage(t *testing.T, dir string) string {
	t.Helper()
	src := filepath.Join(dir, "tiny")
	os.MkdirAll(src, 0o755)
	prog := `package main

import "os"

func main() {
	switch os.Args[1] {
	case "write":
		if err := os.WriteFile(os.Args[2], []byte(os.Args[3]), 0o644); err != nil {
			panic(err)
		}
	case "cat":
		b, err := os.ReadFile(os.Args[2])
		if err != nil {
			panic(err)
		}
		os.Stdout.Write(b)
	}
}
`
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte(prog), 0o644); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(src, "go.mod"), []byte("module tiny\n\ngo 1.22\n"), 0o644)
	build := exec.Command("go", "build", "-o", "t", ".")
	build.Dir = src
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	bin, err := os.ReadFile(filepath.Join(src, "t"))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "t", Mode: 0o755, Size: int64(len(bin)), Typeflag: tar.TypeReg})
	tw.Write(bin)
	tw.Close()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	tag, _ := name.NewTag("tiny:latest")
	out := filepath.Join(dir, "tiny.tar")
	if err := tarball.WriteToFile(out, tag, img); err != nil {
		t.Fatal(err)
	}
	return out
}
