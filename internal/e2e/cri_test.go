package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	cri "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/slacker-dev/slacker/internal/api"
	"github.com/slacker-dev/slacker/internal/testenv"
	"github.com/slacker-dev/slacker/internal/testenv/services"
	"github.com/slacker-dev/slacker/internal/testutil"
)

// pushPause pushes the Debian layout as a pod sandbox image: its entrypoint
// sleeps until stopped, as the pause image's does (no registry.k8s.io here).
func pushPause(t *testing.T, layoutDir, ref string) {
	t.Helper()
	img := layoutImage(t, layoutDir)
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cfg := cf.Config
	cfg.Entrypoint, cfg.Cmd = []string{"sleep", "infinity"}, nil
	if img, err = mutate.Config(img, cfg); err != nil {
		t.Fatal(err)
	}
	pushImage(t, img, ref)
}

// criClients dials containerd's CRI service as the kubelet does.
func criClients(t testing.TB, socket string) (cri.RuntimeServiceClient, cri.ImageServiceClient) {
	t.Helper()
	conn, err := grpc.Dial("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return cri.NewRuntimeServiceClient(conn), cri.NewImageServiceClient(conn)
}

// TestCRI drives containerd's CRI plugin, configured with the Slacker
// snapshotter as docs/containerd.md says, the way the kubelet does: a Slacker
// image is pulled (nothing downloaded or unpacked: the snapshotter logs a remote
// snapshot prepared by label) and its container started lazily in a pod, its log
// read back; an ordinary image runs in the same pod; a second pod of the Slacker
// image reuses what the first fetched; both pods are stopped and removed. An image
// whose snapshot is not in the node's store fails the pull with the message
// `slacker pull` gives.
func TestCRI(t *testing.T) {
	testutil.RequireTool(t, "runc", "docker-registry", "containerd", "ctr")
	layoutDir := testenv.DebianOCI(t)
	ctx := context.Background()
	work := t.TempDir()
	store := filepath.Join(work, "store")
	pub := publishDebian(t, work, store, "")
	reg := pub.reg
	slackerRef := pub.ref
	plainRef := reg.Addr + "/oci/debian:whiteouts"
	pauseRef := reg.Addr + "/oci/pause:test"
	elsewhereRef := reg.Addr + "/slacker/elsewhere:v1"
	// An image whose chunks went to another store.
	other := testenv.StartProcess(t, filepath.Join(work, "nodeOther"), filepath.Join(work, "otherstore"))
	cli(t, other, 0, "convert", "-q", "oci:"+layoutDir+":bookworm", "elsewhere:v1")
	cli(t, other, 0, "run", "--name", "w", "elsewhere:v1", "--", "sh", "-c", "echo mine > /etc/motd")
	cli(t, other, 0, "commit", "w", "elsewhere:v2")
	cli(t, other, 0, "push", "elsewhere:v2", elsewhereRef)
	other.Stop()
	pushOrdinary(t, layoutDir, plainRef)
	pushPause(t, layoutDir, pauseRef)

	b := testenv.StartProcess(t, filepath.Join(work, "nodeB"), store)
	_, pods := startCRI(t, b, reg.Addr, pauseRef, filepath.Join(work, "pods"))
	if v, err := pods.rt.Version(ctx, &cri.VersionRequest{}); err != nil {
		t.Fatalf("CRI version: %v", err)
	} else {
		t.Logf("CRI: %s %s, API %s", v.RuntimeName, v.RuntimeVersion, v.RuntimeApiVersion)
	}
	stats := func() api.NodeStats {
		t.Helper()
		st, err := api.NewClient(b.Socket).Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}

	// The sandbox first: its image is an ordinary one, unpacked into the node's
	// store, and what that moves is not the Slacker image's lazy start, measured
	// from the pull of the image to its container's exit.
	start := stats()
	pod1 := pods.sandbox("pod1")
	before := stats()
	t.Logf("the first sandbox (an ordinary image, unpacked) moved %d bytes from the store",
		before.Fetch.FetchedBytes-start.Fetch.FetchedBytes)
	log1 := pods.container(pod1, slackerRef, "cat", "/etc/debian_version")
	if got := criLogLine(log1); !strings.HasPrefix(got, "12.") {
		t.Fatalf("the Slacker image's container logged %q", log1)
	}
	if !strings.Contains(b.Log(), `"msg":"remote-snapshot-prepared"`) || !strings.Contains(b.Log(), `"via":"label"`) {
		t.Fatalf("no remote-snapshot-prepared via=label in slackerd's log: CRI did not pass the layer's labels")
	}
	after := stats()
	first := after.Fetch.FetchedBytes - before.Fetch.FetchedBytes
	t.Logf("the first pod's container: cache misses %d, read in place %d bytes, fetched whole %d bytes, read ahead %d chunks, replayed %d chunks",
		after.Cache.Misses-before.Cache.Misses, after.Cache.InPlaceBytes-before.Cache.InPlaceBytes,
		after.Cache.FetchedBytes-before.Cache.FetchedBytes, after.Prefetch.ReadaheadChunks-before.Prefetch.ReadaheadChunks,
		after.Prefetch.ReplayedChunks-before.Prefetch.ReplayedChunks)
	checkLazyShare(t, "a CRI pod of the Slacker image", first, pub.dataSize)

	// An ordinary image in the same pod's node: unpacked, and it runs.
	plainPod, logPlain := pods.run("plain", plainRef, "cat", "/etc/added")
	if got := criLogLine(logPlain); got != "added" {
		t.Fatalf("the ordinary image's container logged %q", logPlain)
	}
	if !strings.Contains(b.Log(), `"msg":"snapshot-not-lazy"`) {
		t.Fatal("no snapshot-not-lazy for the ordinary image in slackerd's log")
	}

	// A second pod of the Slacker image reuses what the first fetched.
	pod2 := pods.sandbox("pod2")
	before = stats()
	log2 := pods.container(pod2, slackerRef, "cat", "/etc/debian_version")
	if got := criLogLine(log2); !strings.HasPrefix(got, "12.") {
		t.Fatalf("the second pod's container logged %q", log2)
	}
	if second := stats().Fetch.FetchedBytes - before.Fetch.FetchedBytes; second > first/4 {
		t.Fatalf("the second pod fetched %d bytes, the first %d: want the node's cache reused", second, first)
	}

	pods.remove(pod1.id, plainPod, pod2.id)

	// An image whose snapshot is not in this node's store: the pull fails with
	// slacker pull's message.
	_, err := pods.is.PullImage(ctx, &cri.PullImageRequest{Image: &cri.ImageSpec{Image: elsewhereRef}})
	_, pullErr, code := b.CLI(t, "pull", elsewhereRef)
	if err == nil || code == 0 {
		t.Fatalf("pull of an image from another store: CRI %v, slacker pull exit %d", err, code)
	}
	want := "which is not in this node's store"
	if !strings.Contains(err.Error(), want) || !strings.Contains(pullErr, want) {
		t.Fatalf("CRI says %q\nslacker pull says %q\nwant both to say %q", err, pullErr, want)
	}
	if msg := fmt.Sprint(err); !strings.Contains(msg, "the node that pushed it must share the store") {
		t.Fatalf("CRI's error gives no advice: %s", msg)
	}
}

// readFile returns a file's content, or why it could not be read (for a
// failure message).
func readFile(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// startCRI starts containerd with its CRI plugin on the Slacker snapshotter of
// node, pods' sandboxes of sandboxImage pulled over plain HTTP from registry, and
// returns it and a kubelet of sorts whose pods log under logs. Both are stopped at
// the test's end.
func startCRI(t *testing.T, node *testenv.Process, registry, sandboxImage, logs string) (*services.Containerd, criPods) {
	t.Helper()
	dir, err := os.MkdirTemp("", "cri-") // short: it holds sockets
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	c, err := services.StartContainerd(context.Background(), services.ContainerdOptions{Dir: dir,
		ProxySnapshotters: map[string]string{"slacker": filepath.Join(node.Root, "snapshotter.sock")},
		CRI:               &services.CRIOptions{Snapshotter: "slacker", SandboxImage: sandboxImage, PlainHTTP: []string{registry}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Stop() })
	rt, is := criClients(t, c.Socket)
	return c, criPods{t: t, rt: rt, is: is, logs: logs, containerdLog: filepath.Join(dir, "containerd.log")}
}

// criPods runs pods through CRI as the kubelet does, their logs under logs.
type criPods struct {
	t    *testing.T
	rt   cri.RuntimeServiceClient
	is   cri.ImageServiceClient
	logs string
	// containerdLog, for failure messages.
	containerdLog string
}

// pod is a running sandbox.
type pod struct {
	name string
	id   string
	cfg  *cri.PodSandboxConfig
}

// sandbox runs a pod's sandbox (the sandbox image pulled by containerd itself,
// as for the kubelet).
func (p criPods) sandbox(podName string) pod {
	t := p.t
	t.Helper()
	cfg := &cri.PodSandboxConfig{
		Metadata:     &cri.PodSandboxMetadata{Name: podName, Namespace: "default", Uid: podName + "-uid"},
		LogDirectory: filepath.Join(p.logs, podName),
		Linux: &cri.LinuxPodSandboxConfig{SecurityContext: &cri.LinuxSandboxSecurityContext{
			NamespaceOptions: &cri.NamespaceOption{Network: cri.NamespaceMode_NODE}}},
	}
	sb, err := p.rt.RunPodSandbox(context.Background(), &cri.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		t.Fatalf("RunPodSandbox %s: %v\ncontainerd's log:\n%s", podName, err, tailString(readFile(p.containerdLog), 4000))
	}
	return pod{name: podName, id: sb.PodSandboxId, cfg: cfg}
}

// run pulls image, then runs a sandbox and, in it, a container of image with cmd
// (see container); it returns the pod's ID and the container's log. The image is
// pulled before the sandbox's: the test images share their Debian layer with the
// sandbox image, and the one pulled first prepares it.
func (p criPods) run(podName, image string, cmd ...string) (string, string) {
	p.t.Helper()
	if _, err := p.is.PullImage(context.Background(), &cri.PullImageRequest{Image: &cri.ImageSpec{Image: image}}); err != nil {
		p.t.Fatalf("PullImage %s: %v", image, err)
	}
	sb := p.sandbox(podName)
	return sb.id, p.container(sb, image, cmd...)
}

// container pulls image and runs one container of it with cmd in the sandbox sb;
// it returns the container's log once it exited 0.
func (p criPods) container(sb pod, image string, cmd ...string) string {
	t := p.t
	t.Helper()
	ctx := context.Background()
	podName, sbCfg := sb.name, sb.cfg
	if _, err := p.is.PullImage(ctx, &cri.PullImageRequest{Image: &cri.ImageSpec{Image: image}, SandboxConfig: sbCfg}); err != nil {
		t.Fatalf("PullImage %s: %v", image, err)
	}
	ct, err := p.rt.CreateContainer(ctx, &cri.CreateContainerRequest{PodSandboxId: sb.id, SandboxConfig: sbCfg,
		Config: &cri.ContainerConfig{Metadata: &cri.ContainerMetadata{Name: "main"}, Image: &cri.ImageSpec{Image: image},
			Command: cmd, LogPath: "main.log"}})
	if err != nil {
		t.Fatalf("CreateContainer in %s: %v", podName, err)
	}
	if _, err := p.rt.StartContainer(ctx, &cri.StartContainerRequest{ContainerId: ct.ContainerId}); err != nil {
		t.Fatalf("StartContainer in %s: %v", podName, err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		st, err := p.rt.ContainerStatus(ctx, &cri.ContainerStatusRequest{ContainerId: ct.ContainerId})
		if err != nil {
			t.Fatalf("ContainerStatus: %v", err)
		}
		if st.Status.State == cri.ContainerState_CONTAINER_EXITED {
			if st.Status.ExitCode != 0 {
				t.Fatalf("container in %s exited %d: %s", podName, st.Status.ExitCode, st.Status.Message)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("container in %s still %s after a minute", podName, st.Status.State)
		}
		time.Sleep(100 * time.Millisecond)
	}
	b, err := os.ReadFile(filepath.Join(p.logs, podName, "main.log"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// remove stops and removes the pods ids, and checks that none is left.
func (p criPods) remove(ids ...string) {
	t := p.t
	t.Helper()
	ctx := context.Background()
	for _, id := range ids {
		if _, err := p.rt.StopPodSandbox(ctx, &cri.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
			t.Fatalf("StopPodSandbox: %v", err)
		}
		if _, err := p.rt.RemovePodSandbox(ctx, &cri.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
			t.Fatalf("RemovePodSandbox: %v", err)
		}
	}
	if list, err := p.rt.ListPodSandbox(ctx, &cri.ListPodSandboxRequest{}); err != nil || len(list.Items) != 0 {
		t.Fatalf("pods left: %v %v", list, err)
	}
}

// criLogLine returns the first stdout line of a CRI container log ("TIME stdout F
// LINE").
func criLogLine(log string) string {
	for _, l := range strings.Split(log, "\n") {
		if f := strings.SplitN(l, " ", 4); len(f) == 4 && f[1] == "stdout" {
			return f[3]
		}
	}
	return ""
}
