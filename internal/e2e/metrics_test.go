package e2e

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slacker-dev/slacker/internal/api"
	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/testenv"
	"github.com/slacker-dev/slacker/internal/testutil"
)

// metricsOf scrapes http://addr/metrics and returns each sample's value by its
// name and labels as Prometheus's text format writes them
// (`slacker_cache_misses_total`, `slacker_errors_total{kind="not_found",where="api"}`);
// a histogram is its _count.
func metricsOf(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("GET /metrics: %s, %s", resp.Status, resp.Header.Get("Content-Type"))
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		name, labels, _ := strings.Cut(line[:i], "{")
		if labels != "" {
			labels = "{" + labels
		}
		out[strings.TrimSuffix(name, "_count")+labels] = v
	}
	return out
}

// TestMetricsScrape: slackerd with metrics_address serves /metrics, and a real
// container start moves its counters: the store requests and bytes of the pull and
// the start, the FUSE reads of the container's first reads, the cache's misses,
// the volumes; an API error is counted by its kind. A malformed address, or one in
// use, fails slackerd's start with a message that names the setting.
func TestMetricsScrape(t *testing.T) {
	testutil.RequireTool(t, "runc", "docker-registry")
	ctx := context.Background()
	work := t.TempDir()
	store := filepath.Join(work, "store")
	// Pushed without the block map in its manifest: the pull looks the map up in
	// the store, a request the metrics must show (a local store's chunks are
	// read in place, not requested).
	ref := publishDebian(t, work, store, "", "--embed-layer=false").ref

	addr := freeAddr(t, "127.0.0.1")
	b := testenv.StartProcess(t, filepath.Join(work, "nodeB"), store, "--metrics-address", addr)
	if !strings.Contains(b.Log(), `"msg":"metrics-listening"`) {
		t.Fatalf("no metrics-listening in slackerd's log:\n%s", b.Log())
	}
	before := metricsOf(t, addr) // (the snapshotter's blank base may have read a little already)
	cli(t, b, 0, "pull", ref)
	if out := cli(t, b, 0, "run", "--name", "hello", ref, "--", "cat", "/etc/debian_version"); !strings.HasPrefix(out, "12.") {
		t.Fatalf("run: %q", out)
	}
	if _, err := api.NewClient(b.Socket).Volume(ctx, "no-such-volume"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("a volume that is not there: %v", err)
	}
	after := metricsOf(t, addr)
	for _, name := range []string{
		`slacker_store_request_duration_seconds{backend="local",op="get"}`, // the image's block map
		`slacker_fuse_request_duration_seconds{op="read"}`,
		"slacker_cache_misses_total",
		"slacker_node_store_bytes_total",
		`slacker_cache_hits_total{tier="file"}`,
		`slacker_volumes{kind="container",mode="shared"}`,
		`slacker_errors_total{kind="not_found",where="api"}`,
	} {
		if after[name] <= before[name] {
			t.Errorf("%s: %v before the container, %v after; want it to have moved", name, before[name], after[name])
		}
	}
	cli(t, b, 0, "rm", "hello")

	// Bad input: slackerd refuses to start, and says which setting is wrong.
	for _, bad := range []string{"not-an-address", addr} {
		_, slackerd := testenv.Binaries(t)
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		out, err := exec.CommandContext(cctx, slackerd, "--root", filepath.Join(work, "nodeC"), "--socket",
			filepath.Join(work, "nodeC", "sock"), "--store", store, "--metrics-address", bad).CombinedOutput()
		cancel()
		if err == nil || !strings.Contains(string(out), "metrics_address") {
			t.Errorf("slackerd --metrics-address %s: %v, said %q; want a failed start naming metrics_address", bad, err, out)
		}
	}
	testenv.CheckNoMounts(t, filepath.Join(work, "nodeC"))
}
