package e2e

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/api"
	"github.com/slacker-dev/slacker/internal/fstree"
	"github.com/slacker-dev/slacker/internal/testenv"
	"github.com/slacker-dev/slacker/internal/testenv/services"
	"github.com/slacker-dev/slacker/internal/testutil"
)

// TestOptimize is the start-up layout as a user runs it: a container of the image
// records its start-up trace, `slacker optimize` re-lays the image from it, and
// the new image holds the same files, runs, and fetches no more than the old one
// to start on a cold node.
func TestOptimize(t *testing.T) {
	testutil.RequireTool(t, "runc", "docker-registry")
	layout := testenv.DebianOCI(t)
	ctx := context.Background()
	work := t.TempDir()
	store := filepath.Join(work, "store")
	a := testenv.StartProcess(t, filepath.Join(work, "nodeA"), store)
	cli(t, a, 0, "convert", "-q", "oci:"+layout+":bookworm", "debian:bookworm")

	// Before any container ran, there is nothing to lay out from.
	_, errOut, code := a.CLI(t, "optimize", "debian:bookworm")
	if code == 0 || !strings.Contains(errOut, "run a container of the image first") {
		t.Fatalf("optimize with no trace: exit %d: %s", code, errOut)
	}
	const start = "cat /etc/debian_version; ls -lR /usr/lib/x86_64-linux-gnu > /dev/null; apt-cache policy > /dev/null; echo ok"
	cli(t, a, 0, "run", "--rm", "debian:bookworm", "--", "sh", "-c", start)

	// The trace is written when the container's volume goes, in the background.
	var res struct {
		Name   string     `json:"name"`
		Layout api.Layout `json:"layout"`
	}
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		out, errOut, code := a.CLI(t, "optimize", "--json", "debian:bookworm", "debian:opt")
		if code == 0 {
			if err := json.Unmarshal([]byte(out), &res); err != nil {
				t.Fatal(err)
			}
			break
		}
		if time.Now().After(deadline) || !strings.Contains(errOut, "run a container of the image first") {
			t.Fatalf("optimize: exit %d: %s", code, errOut)
		}
	}
	l := res.Layout
	if res.Name != "debian:opt" || l.Unchanged || l.NewChunks == 0 || l.ReadBytes <= 0 || l.FetchAfter > l.FetchBefore {
		t.Fatalf("optimize: %+v", res)
	}
	t.Logf("start-up reads %d bytes: fetched in chunks of %d before, %d after; %d new chunks of %d bytes",
		l.ReadBytes, l.FetchBefore, l.FetchAfter, l.NewChunks, l.GatheredBytes)

	// The laid-out image holds exactly the files of the original.
	var images []struct {
		Name       string `json:"name"`
		Descriptor struct {
			Snapshot digest.Digest `json:"snapshot"`
			DataSize int64         `json:"dataSize"`
		} `json:"descriptor"`
	}
	if err := json.Unmarshal([]byte(cli(t, a, 0, "images", "--json")), &images); err != nil || len(images) != 2 {
		t.Fatalf("images --json: %v %+v", err, images)
	}
	snap := map[string]digest.Digest{}
	for _, im := range images {
		snap[im.Name] = im.Descriptor.Snapshot
	}
	if snap["debian:opt"] != l.Snapshot || snap["debian:bookworm"] == l.Snapshot {
		t.Fatalf("names: %v, layout %s", snap, l.Snapshot)
	}
	c := api.NewClient(a.Socket)
	mnt := map[string]string{}
	for _, name := range []string{"debian:bookworm", "debian:opt"} {
		id := strings.ReplaceAll(strings.ReplaceAll(name, ":", "-"), ".", "-")
		v, err := c.CreateVolume(ctx, api.CreateVolumeRequest{ID: id, Snapshot: snap[name], Mount: true, ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		mnt[name] = v.Mountpoint
	}
	diffs, err := fstree.Compare(ctx, mnt["debian:bookworm"], mnt["debian:opt"], fstree.Options{
		Mtimes: true, LabelA: "original", LabelB: "optimized"})
	if err != nil {
		t.Fatal(err)
	}
	reportDiffs(t, diffs)

	// Pulled on a cold node sharing the store, the optimized image starts, and its
	// start fetches no more than the original's.
	reg, err := services.StartRegistry(ctx, services.RegistryOptions{Dir: filepath.Join(work, "registry")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Stop() })
	ref := map[string]string{}
	for _, name := range []string{"debian:bookworm", "debian:opt"} {
		ref[name] = reg.Addr + "/slacker/" + name
		cli(t, a, 0, "push", name, ref[name])
	}
	for _, id := range []string{"debian-bookworm", "debian-opt"} {
		if err := c.DeleteVolume(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	a.Stop()
	fetched := map[string]int64{}
	for _, name := range []string{"debian:bookworm", "debian:opt"} {
		b := testenv.StartProcess(t, filepath.Join(work, "node-"+strings.ReplaceAll(name, ":", "-")), store)
		cli(t, b, 0, "pull", ref[name])
		if out := cli(t, b, 0, "run", "--name", "s", ref[name], "--", "sh", "-c", start); !strings.HasSuffix(out, "ok\n") {
			t.Fatalf("%s: %q", name, out)
		}
		var st struct {
			Containers []struct {
				Volume api.VolumeStats `json:"volume"`
			} `json:"containers"`
		}
		if err := json.Unmarshal([]byte(cli(t, b, 0, "stats", "--json", "s")), &st); err != nil || len(st.Containers) != 1 {
			t.Fatalf("stats: %v %+v", err, st)
		}
		fetched[name] = st.Containers[0].Volume.FetchedBytes
		cli(t, b, 0, "rm", "s")
		b.Stop()
	}
	t.Logf("a cold start fetched %d bytes of the original, %d of the optimized image", fetched["debian:bookworm"], fetched["debian:opt"])
	if fetched["debian:opt"] > fetched["debian:bookworm"] {
		t.Errorf("the optimized image fetched %d bytes to start, the original %d", fetched["debian:opt"], fetched["debian:bookworm"])
	}
}
