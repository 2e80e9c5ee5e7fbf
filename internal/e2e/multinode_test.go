package e2e

import (
	"context"
	"encoding/json"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/slacker-dev/slacker/internal/testenv"
	"github.com/slacker-dev/slacker/internal/testenv/services"
	"github.com/slacker-dev/slacker/internal/testutil"
)

// node is a slackerd in its own network namespace, and its CLI there.
type node struct {
	t  *testing.T
	ns *testenv.Netns
	p  *testenv.Process
}

func (n node) cli(want int, args ...string) string {
	n.t.Helper()
	out, errOut, code := n.ns.CLI(n.t, n.p.Socket, args...)
	if code != want {
		n.t.Fatalf("[%s] slacker %s: exit %d, want %d\nstdout: %s\nstderr: %s", n.ns.Name, strings.Join(args, " "), code, want, out, errOut)
	}
	return out
}

// fetched is what the node's fetcher moved from the store so far, and how many
// chunks of it were fetched ahead (readahead and start-up trace replays).
// fetched returns what the node has fetched, once its fetches have settled: loads
// ahead of a run that has ended (its image root lingers) may still be landing.
func (n node) fetched() (bytes, prefetched int64) {
	n.t.Helper()
	bytes, prefetched = n.fetchedNow()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		time.Sleep(300 * time.Millisecond)
		b, p := n.fetchedNow()
		if b == bytes && p == prefetched {
			break
		}
		bytes, prefetched = b, p
	}
	return bytes, prefetched
}

func (n node) fetchedNow() (bytes, prefetched int64) {
	n.t.Helper()
	var info struct {
		Stats struct {
			Fetch struct {
				FetchedBytes int64 `json:"fetched_bytes"`
			} `json:"fetch"`
			Prefetch struct {
				Readahead int64 `json:"readahead_chunks"`
				Replayed  int64 `json:"replayed_chunks"`
			} `json:"prefetch"`
		} `json:"stats"`
	}
	if err := json.Unmarshal([]byte(n.cli(0, "info", "--json")), &info); err != nil {
		n.t.Fatal(err)
	}
	return info.Stats.Fetch.FetchedBytes, info.Stats.Prefetch.Readahead + info.Stats.Prefetch.Replayed
}

// freeAddr returns ip:PORT for a port free on ip a moment ago.
func freeAddr(t *testing.T, ip string) string {
	l, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestManyNodesSharedStore: two nodes in their own network namespaces share one
// store and one registry, both reached over veth pairs and a bridge (not
// loopback). Node A converts and pushes a real Debian image; node B pulls it
// (kilobytes) and runs it lazily; A commits a change and pushes it; B runs the new
// image fetching only the chunks it lacks: about the changed chunks, far below
// the image's size. The store is MinIO (S3), then the registry itself (packs).
func TestManyNodesSharedStore(t *testing.T) {
	testutil.RequireTool(t, "runc", "docker-registry", "umoci", "go")
	layout := testenv.DebianOCI(t)
	for _, backend := range []string{"s3", "registry"} {
		t.Run(backend, func(t *testing.T) { testManyNodes(t, layout, backend) })
	}
}

func testManyNodes(t *testing.T, layout, backend string) {
	ctx := context.Background()
	nw := testenv.NewNetwork(t, 2)
	work := t.TempDir()
	reg, err := services.StartRegistry(ctx, services.RegistryOptions{Dir: filepath.Join(work, "registry"), Addr: freeAddr(t, nw.HostIP)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Stop() })
	var loc string
	switch backend {
	case "s3":
		minio, err := services.StartMinIO(ctx, services.MinIOOptions{Dir: filepath.Join(work, "minio"), Addr: freeAddr(t, nw.HostIP)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { minio.Stop() })
		for _, ns := range nw.Nodes {
			ns.Dial(t, minio.Addr)
		}
		loc = minio.Location("slacker", "chunks")
	case "registry":
		loc = "registry://" + reg.Addr + "/slacker/chunks"
	}
	for _, ns := range nw.Nodes {
		ns.Dial(t, reg.Addr)
	}
	a := node{t, nw.Nodes[0], testenv.StartProcessIn(t, nw.Nodes[0], filepath.Join(work, "nodeA"), loc)}
	// B loads nothing ahead of a first start's reads: it does so only from a
	// store 5 ms or more away, and on a busy CI machine a store behind this
	// bridge can answer that slowly, which made B's first run fetch more than
	// the lazy start the docs measured, in some runs only (docs/design.md, "A
	// first start loads the inode tables").
	b := node{t, nw.Nodes[1], testenv.StartProcessIn(t, nw.Nodes[1], filepath.Join(work, "nodeB"), loc, "--first-start-readahead", "off")}

	// A: convert (every chunk goes to the store over the veth) and push the name.
	start := time.Now()
	a.cli(0, "convert", "-q", "oci:"+layout+":bookworm", "debian:v1")
	t.Logf("A converted the image into the %s store in %v", backend, time.Since(start).Round(time.Millisecond))
	var images []struct {
		Name       string `json:"name"`
		Descriptor struct {
			DataSize int64 `json:"dataSize"`
		} `json:"descriptor"`
	}
	if err := json.Unmarshal([]byte(a.cli(0, "images", "--json")), &images); err != nil || len(images) != 1 {
		t.Fatalf("images --json: %v %+v", err, images)
	}
	size := images[0].Descriptor.DataSize
	ref1, ref2 := reg.Addr+"/slacker/debian:v1", reg.Addr+"/slacker/debian:v2"
	a.cli(0, "push", "debian:v1", ref1)

	// B: pull moves kilobytes; a run moves a small share of the image.
	var pulled struct {
		BytesMoved int64 `json:"bytes_moved"`
	}
	if err := json.Unmarshal([]byte(b.cli(0, "pull", "--json", ref1)), &pulled); err != nil || pulled.BytesMoved > 64<<10 {
		t.Fatalf("pull on B: %v, %d bytes moved", err, pulled.BytesMoved)
	}
	probe := []string{"--", "sh", "-c", "cat /f 2>/dev/null; cat /etc/debian_version"}
	if out := b.cli(0, append([]string{"run", "--rm", ref1}, probe...)...); !strings.HasPrefix(out, "12.") {
		t.Fatalf("run on B: %q", out)
	}
	first, firstAhead := b.fetched()
	t.Logf("B's first run: %d chunks of it fetched ahead (readahead, trace replay)", firstAhead)
	checkLazyShare(t, "B's first run", first, size)

	// A: a change, committed and pushed; the commit uploads only changed chunks.
	a.cli(0, "run", "--name", "c", "debian:v1", "--", "sh", "-c", "echo x > /f")
	var snap struct {
		NewBytes  int64 `json:"new_bytes"`
		NewChunks int   `json:"new_chunks"`
		MapBytes  int64 `json:"map_bytes"`
	}
	if err := json.Unmarshal([]byte(a.cli(0, "commit", "--json", "c", "debian:v2")), &snap); err != nil {
		t.Fatal(err)
	}
	t.Logf("A's commit uploaded %d bytes in %d chunks and a map of %d bytes", snap.NewBytes, snap.NewChunks, snap.MapBytes)
	if snap.NewBytes == 0 || snap.NewBytes > size/20 {
		t.Fatalf("commit of a one-line change uploaded %d bytes of a %d-byte image", snap.NewBytes, size)
	}
	a.cli(0, "push", "debian:v2", ref2)
	a.cli(0, "rm", "c")

	// B: the new image, same command. What B lacks is the changed chunks (and the
	// new map); everything else is in its cache already.
	b.cli(0, "pull", ref2)
	if out := b.cli(0, append([]string{"run", "--rm", ref2}, probe...)...); !strings.HasPrefix(out, "x\n12.") {
		t.Fatalf("new image on B: %q", out)
	}
	total, ahead := b.fetched()
	second, ahead := total-first, ahead-firstAhead
	changed := snap.NewBytes + snap.MapBytes
	t.Logf("B's run of the new image fetched %d bytes (%d chunks of them read ahead); the change was %d bytes of chunks and map",
		second, ahead, changed)
	// What the run needed is the changed chunks it read and the new map; loads
	// ahead may add chunks the first run did not get to, none bigger than a chunk
	// (256 KiB): readahead, or the replay of the start-up trace of v1 (B's, or
	// A's, whose start read what B's did not) when it was written before B's run.
	if second < snap.MapBytes || second > changed+ahead*(256<<10) || second-ahead*(256<<10) > size/50 {
		t.Fatalf("B fetched %d bytes for the new image (%d chunks read ahead); want at least the %d-byte map and at most the %d bytes that changed plus the chunks read ahead, under 2%% of the image",
			second, ahead, snap.MapBytes, changed)
	}
}
