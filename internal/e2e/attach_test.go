package e2e

import (
	"context"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/slacker-dev/slacker/internal/api"
	"github.com/slacker-dev/slacker/internal/image"
	"github.com/slacker-dev/slacker/internal/registry"
	"github.com/slacker-dev/slacker/internal/testenv"
	"github.com/slacker-dev/slacker/internal/testenv/services"
	"github.com/slacker-dev/slacker/internal/testutil"
)

// dataSize returns the bytes of data of the one image named on p.
func dataSize(t *testing.T, p *testenv.Process) int64 {
	t.Helper()
	var images []struct {
		Descriptor struct {
			DataSize int64 `json:"dataSize"`
		} `json:"descriptor"`
	}
	if err := json.Unmarshal([]byte(cli(t, p, 0, "images", "--json")), &images); err != nil || len(images) != 1 {
		t.Fatalf("images --json: %v %+v", err, images)
	}
	return images[0].Descriptor.DataSize
}

// fetchedBy returns what the node moved from its store so far.
func fetchedBy(t *testing.T, p *testenv.Process) int64 {
	t.Helper()
	st, err := api.NewClient(p.Socket).Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st.Fetch.FetchedBytes
}

// manifestDigest returns the digest of the manifest ref names.
func manifestDigest(t *testing.T, ref string) v1.Hash {
	t.Helper()
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	d, err := remote.Head(r)
	if err != nil {
		t.Fatal(err)
	}
	return d.Digest
}

// attachArtifact attaches by hand an artifact of Slacker's type, holding blob as
// its descriptor, to the manifest subject of repo.
func attachArtifact(t *testing.T, repo string, subject v1.Hash, blob []byte) {
	t.Helper()
	r, err := name.NewRepository(repo, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []v1.Layer{static.NewLayer([]byte("{}"), types.MediaType(registry.ArtifactType)),
		static.NewLayer(blob, types.MediaType(image.MediaType))} {
		if err := remote.WriteLayer(r, l); err != nil {
			t.Fatal(err)
		}
	}
	sub, err := remote.Head(r.Digest(subject.String()))
	if err != nil {
		t.Fatal(err)
	}
	m := ocispec.Manifest{MediaType: ocispec.MediaTypeImageManifest, ArtifactType: registry.ArtifactType,
		Config:  ocispec.Descriptor{MediaType: registry.ArtifactType, Digest: digest.FromString("{}"), Size: 2},
		Layers:  []ocispec.Descriptor{{MediaType: image.MediaType, Digest: digest.FromBytes(blob), Size: int64(len(blob))}},
		Subject: &ocispec.Descriptor{MediaType: string(sub.MediaType), Digest: digest.Digest(subject.String()), Size: sub.Size}}
	m.SchemaVersion = 2
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Put(r.Digest(digest.FromBytes(b).String()), rawManifest(b)); err != nil {
		t.Fatal(err)
	}
}

// rawManifest is an OCI image manifest to put as it is.
type rawManifest []byte

func (r rawManifest) RawManifest() ([]byte, error)        { return r, nil }
func (r rawManifest) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }

// TestAttached: one name for every node. An ordinary image is converted from the
// registry, and its Slacker descriptor attached to it (Debian's registry: the
// referrers tag schema); the image itself is unchanged, and a stock containerd
// pulls and runs it as before. A node with Slacker pulls and runs the same name
// lazily from the attached descriptor, with slacker and through containerd's CRI
// with the Slacker snapshotter (a remote snapshot per layer, nothing unpacked). When the tag moves to another image, the old
// descriptor is not used for it; an artifact whose descriptor was made from another
// image, or that is malformed, is passed over with a message, never used: the node
// converts the image instead.
func TestAttached(t *testing.T) {
	testutil.RequireTool(t, "runc", "docker-registry", "containerd", "ctr")
	for _, tc := range []struct {
		name string
		// start starts the registry and returns its address.
		start func(t *testing.T, dir string) string
		api   bool // it serves the referrers API (else the referrers tag is used)
	}{
		{"distribution-2.8", func(t *testing.T, dir string) string {
			reg, err := services.StartRegistry(context.Background(), services.RegistryOptions{Dir: dir})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { reg.Stop() })
			return reg.Addr
		}, false},
		// go-containerregistry's registry serves GET /v2/<name>/referrers/<digest>.
		{"referrers-api", func(t *testing.T, dir string) string {
			srv := httptest.NewServer(ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0)), ggcrregistry.WithReferrersSupport(true)))
			t.Cleanup(srv.Close)
			return srv.Listener.Addr().String()
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) { testAttached(t, tc.start, tc.api) })
	}
}

func testAttached(t *testing.T, start func(t *testing.T, dir string) string, api bool) {
	layoutDir := testenv.DebianOCI(t)
	work := t.TempDir()
	store := filepath.Join(work, "store")
	regAddr := start(t, filepath.Join(work, "registry"))
	ref := regAddr + "/app/debian:v1"
	pushImage(t, layoutImage(t, layoutDir), ref)
	before := manifestDigest(t, ref)

	// CI: convert the image from the registry, attach the result to it.
	a := testenv.StartProcess(t, filepath.Join(work, "nodeA"), store)
	cli(t, a, 0, "--insecure-registry", "convert", "-q", ref, "app:v1")
	out := cli(t, a, 0, "--insecure-registry", "push", "--attach", "app:v1", ref)
	if !strings.Contains(out, "pushed ") {
		t.Fatalf("push --attach said: %s", out)
	}
	if after := manifestDigest(t, ref); after != before {
		t.Fatalf("attaching changed the image: %s, was %s", after, before)
	}
	// Where the registry has no referrers API, the referrers tag holds the artifact;
	// where it has one, the API lists it.
	if !api {
		manifestDigest(t, regAddr+"/app/debian:"+strings.Replace(before.String(), ":", "-", 1))
	} else {
		resp, err := http.Get("http://" + regAddr + "/v2/app/debian/referrers/" + before.String())
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), registry.ArtifactType) {
			t.Fatalf("the referrers API: %s %s", resp.Status, b)
		}
	}
	a.Stop()

	// A node with Slacker: the same name, lazily.
	b := testenv.StartProcess(t, filepath.Join(work, "nodeB"), store)
	_, errOut, code := b.CLI(t, "--insecure-registry", "pull", ref)
	if code != 0 || !strings.Contains(errOut, "attached to it") || strings.Contains(errOut, "converting it") {
		t.Fatalf("pull of the attached image: exit %d: %s", code, errOut)
	}
	if out := cli(t, b, 0, "images"); !strings.Contains(out, "to "+strings.TrimPrefix(before.String(), "sha256:")[:12]) {
		t.Fatalf("images does not show the attachment:\n%s", out)
	}
	if out := cli(t, b, 0, "--insecure-registry", "run", "--rm", ref, "--", "cat", "/etc/debian_version"); !strings.HasPrefix(out, "12.") {
		t.Fatalf("run of the attached image: %q", out)
	}
	checkLazyShare(t, "run of the attached image", fetchedBy(t, b), dataSize(t, b))

	// containerd: with overlayfs (stock), the name runs as it always did; with the
	// Slacker snapshotter, through CRI (which passes the image's name in the
	// layers' labels), the layers are prepared from the attached descriptor:
	// nothing downloaded or unpacked, and the pod's start is lazy.
	pushPause(t, layoutDir, regAddr+"/oci/pause:test")
	c, pods := startCRI(t, b, regAddr, regAddr+"/oci/pause:test", filepath.Join(work, "pods"))
	ctr(t, c, "images", "pull", "--plain-http", ref)
	if out := ctr(t, c, "run", "--rm", ref, "stock", "cat", "/etc/debian_version"); !strings.HasPrefix(out, "12.") {
		t.Fatalf("stock containerd: %q", out)
	}
	fetchedBefore := fetchedBy(t, b)
	id, log := pods.run("attached", ref, "cat", "/etc/debian_version")
	if got := criLogLine(log); !strings.HasPrefix(got, "12.") {
		t.Fatalf("the attached image's pod logged %q", log)
	}
	if !strings.Contains(b.Log(), `"via":"attached"`) || !strings.Contains(b.Log(), `"msg":"attached-descriptor-found"`) ||
		strings.Contains(b.Log(), `"msg":"snapshot-not-lazy","image":"`+ref) {
		t.Fatalf("CRI's pull through the Slacker snapshotter did not use the attached descriptor:\n%s", tailString(b.Log(), 3000))
	}
	// (The node's cache holds what slacker run read: the pod fetches at most as much.)
	if got := fetchedBy(t, b) - fetchedBefore; got > dataSize(t, b)/10 {
		t.Fatalf("the pod of the attached image fetched %d bytes: not lazy", got)
	}
	pods.remove(id)

	// The tag moves to another image: the old descriptor is not used for it.
	pushOrdinary(t, layoutDir, ref)
	moved := manifestDigest(t, ref)
	cnode := testenv.StartProcess(t, filepath.Join(work, "nodeC"), store)
	if _, errOut, code := cnode.CLI(t, "--insecure-registry", "pull", "--no-convert", ref); code == 0 || strings.Contains(errOut, "attached to it") {
		t.Fatalf("pull of a moved tag used the old descriptor: exit %d: %s", code, errOut)
	}
	// Attached by hand to the new image: the old image's descriptor, and garbage.
	entry := cli(t, b, 0, "images", "--json")
	var images []struct {
		Name       string          `json:"name"`
		Descriptor json.RawMessage `json:"descriptor"`
	}
	if err := json.Unmarshal([]byte(entry), &images); err != nil || len(images) != 1 {
		t.Fatalf("images --json: %v", err)
	}
	repo := regAddr + "/app/debian"
	attachArtifact(t, repo, moved, images[0].Descriptor)
	attachArtifact(t, repo, moved, []byte("not a descriptor"))
	_, errOut, code = cnode.CLI(t, "--insecure-registry", "pull", "--no-convert", ref)
	if code == 0 || strings.Count(errOut, "is not used") != 2 || !strings.Contains(errOut, "converted from") {
		t.Fatalf("pull with a copied and a malformed attachment: exit %d: %s", code, errOut)
	}
	_, errOut, code = cnode.CLI(t, "--insecure-registry", "pull", ref)
	if code != 0 || !strings.Contains(errOut, "converting it") {
		t.Fatalf("pull of the moved tag: exit %d: %s", code, errOut)
	}
	if out := cli(t, cnode, 0, "--insecure-registry", "run", "--rm", ref, "--", "cat", "/etc/added"); out != "added\n" {
		t.Fatalf("the moved tag's image: %q", out)
	}
}
