package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/slacker-dev/slacker/internal/api"
	"github.com/slacker-dev/slacker/internal/testenv"
	"github.com/slacker-dev/slacker/internal/testutil"
)

// objectFiles lists a local store's object files.
func objectFiles(t *testing.T, storeDir string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	filepath.Walk(filepath.Join(storeDir, "sha256"), func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			out[p] = true
		}
		return nil
	})
	return out
}

func flipByte(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x01
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestFlippedByteNeverServed flips one byte in each chunk of a file, in the store
// and then in the node cache, and reads the file in a container. Damage in the
// store: the read fails with EIO and a log line, never with wrong bytes, and works
// again once the store is repaired. Damage in the cache: it is detected, logged,
// and the chunk fetched again, so the read returns the right bytes.
func TestFlippedByteNeverServed(t *testing.T) {
	testutil.RequireTool(t, "runc", "umoci")
	layout := testenv.DebianOCI(t)
	ctx := context.Background()
	work := t.TempDir()
	storeDir := filepath.Join(work, "store")
	cfg := filepath.Join(work, "slackerd.toml")
	if err := os.WriteFile(cfg, []byte("[fetch]\nmax_wait = \"3s\"\nattempt_timeout = \"1s\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := testenv.StartProcess(t, filepath.Join(work, "node"), storeDir, "--config", cfg, "--cache-disk", "on")
	c := api.NewClient(p.Socket)
	cli(t, p, 0, "convert", "-q", "oci:"+layout+":bookworm", "debian:bookworm")
	cli(t, p, 0, "run", "--name", "maker", "debian:bookworm", "--", "sh", "-c",
		"head -c 3000000 /dev/urandom > /data && sha256sum /data > /data.sum")
	before := objectFiles(t, storeDir)
	cli(t, p, 0, "commit", "maker", "img:data")
	cli(t, p, 0, "rm", "maker")
	var fresh []string // the commit's new chunks: /data's, and some ext4 metadata
	for f := range objectFiles(t, storeDir) {
		if fi, err := os.Stat(f); err == nil && !before[f] && fi.Size() >= 64<<10 && fi.Size()%4096 == 0 {
			fresh = append(fresh, f)
		}
	}
	if len(fresh) == 0 {
		t.Fatal("the commit stored no data chunks")
	}
	if err := c.DropCaches(ctx, true); err != nil {
		t.Fatal(err)
	}
	for _, f := range fresh {
		flipByte(t, f)
	}
	out, errOut, code := p.CLI(t, "run", "--rm", "img:data", "--", "sha256sum", "/data")
	if code == 0 || !strings.Contains(errOut, "Input/output error") || strings.Contains(out, "/data") {
		t.Fatalf("reading a file whose chunks are damaged in the store: exit %d\nstdout %q\nstderr %q", code, out, errOut)
	}
	log := p.Log()
	if !strings.Contains(log, `"msg":"chunk-fetch-failed"`) || !strings.Contains(log, "object content does not match its digest") {
		t.Fatalf("no chunk-fetch-failed line naming the damage in the log")
	}

	// Repaired, the store serves the file again, without a restart.
	for _, f := range fresh {
		flipByte(t, f)
	}
	cli(t, p, 0, "run", "--rm", "img:data", "--", "sha256sum", "-c", "/data.sum")

	// Damage in the node cache's disk tier: caught, and fetched again.
	if err := c.DropCaches(ctx, false); err != nil { // the memory tier only
		t.Fatal(err)
	}
	cached, err := filepath.Glob(filepath.Join(p.Root, "node", "cache", "*"))
	if err != nil || len(cached) == 0 {
		t.Fatalf("nothing in the cache's disk tier: %v", err)
	}
	for _, f := range cached {
		flipByte(t, f)
	}
	cli(t, p, 0, "run", "--rm", "img:data", "--", "sha256sum", "-c", "/data.sum")
	if !strings.Contains(p.Log(), `"msg":"cache-chunk-corrupt"`) {
		t.Fatal("no cache-chunk-corrupt line in the log")
	}
	st, err := c.Stats(ctx)
	if err != nil || st.Cache.Corrupt == 0 {
		t.Fatalf("cache stats: %+v %v", st.Cache, err)
	}
}
