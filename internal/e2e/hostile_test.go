package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/api"
	"github.com/slacker-dev/slacker/internal/blockmap"
	"github.com/slacker-dev/slacker/internal/image"
	"github.com/slacker-dev/slacker/internal/registry"
	"github.com/slacker-dev/slacker/internal/store"
	"github.com/slacker-dev/slacker/internal/store/local"
	"github.com/slacker-dev/slacker/internal/testenv"
	"github.com/slacker-dev/slacker/internal/testenv/services"
	"github.com/slacker-dev/slacker/internal/testutil"
)

type rawExtent struct{ off, length, chunk, chunkOff uint64 }

// rawMap encodes a block map byte by byte, without the checks blockmap.Encode
// makes, so it can say what a hostile store or pusher would.
func rawMap(sizeBlocks uint64, chunkBlocks []uint64, extents []rawExtent, trailer []byte) []byte {
	b := []byte(blockmap.Magic)
	u := func(v uint64) { b = binary.AppendUvarint(b, v) }
	u(1)
	u(4096)
	u(sizeBlocks)
	u(uint64(len(chunkBlocks)))
	for i, n := range chunkBlocks {
		sum := sha256.Sum256([]byte{byte(i)})
		b = append(b, sum[:]...)
		u(n)
	}
	u(uint64(len(extents)))
	for _, e := range extents {
		u(e.off)
		u(e.length)
		u(e.chunk)
		u(e.chunkOff)
	}
	return append(b, trailer...)
}

// TestPullHostileMetadata is the pull-level catalogue of hostile metadata, with a
// real registry and store: descriptors naming block maps that are malformed
// (overlapping extents, extents outside the volume or their chunk, trailing bytes),
// a map naming chunks the store does not have, and a snapshot that is not there.
// Each is refused with a clear one-line error (a map naming missing chunks pulls,
// since pulls are lazy, but cannot be run, and check names every missing chunk);
// nothing already stored is lost: the image pulled before still runs and checks.
func TestPullHostileMetadata(t *testing.T) {
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
	p := testenv.StartProcess(t, filepath.Join(work, "node"), storeDir, "--lease-interval", "200ms")
	cli(t, p, 0, "convert", "-q", "oci:"+layout+":bookworm", "debian:bookworm")
	st, err := local.Open(storeDir)
	if err != nil {
		t.Fatal(err)
	}
	publish := func(name string, mapBytes []byte, size int64) string {
		t.Helper()
		id, err := store.PutBytes(ctx, st, mapBytes)
		if err != nil {
			t.Fatal(err)
		}
		ref := reg.Addr + "/hostile/" + name + ":v1"
		d := &image.Descriptor{Snapshot: id, Size: size, Created: time.Now().UTC()}
		if _, err := registry.Push(ctx, ref, d, registry.Options{}); err != nil {
			t.Fatal(err)
		}
		return ref
	}
	const blocks = 64 << 20 / 4096
	tests := []struct {
		name string
		ref  func() string
		msg  string
	}{
		{"overlapping extents", func() string {
			return publish("overlap", rawMap(blocks, []uint64{4, 4}, []rawExtent{{0, 4, 0, 0}, {2, 4, 1, 0}}, nil), 64<<20)
		}, "malformed block map"},
		{"extent past the volume's end", func() string {
			return publish("pastend", rawMap(blocks, []uint64{4}, []rawExtent{{blocks - 2, 4, 0, 0}}, nil), 64<<20)
		}, "malformed block map"},
		{"extent past its chunk's end", func() string {
			return publish("pastchunk", rawMap(blocks, []uint64{4}, []rawExtent{{0, 4, 0, 2}}, nil), 64<<20)
		}, "malformed block map"},
		{"extent naming no chunk", func() string {
			return publish("nochunk", rawMap(blocks, []uint64{4}, []rawExtent{{0, 4, 7, 0}}, nil), 64<<20)
		}, "malformed block map"},
		{"trailing bytes", func() string {
			return publish("trailing", rawMap(blocks, []uint64{4}, []rawExtent{{0, 4, 0, 0}}, []byte("more")), 64<<20)
		}, "malformed block map"},
		{"not a block map", func() string { return publish("notamap", []byte("{\"hello\":1}"), 64<<20) }, "malformed block map"},
		{"snapshot not in the store", func() string {
			ref := reg.Addr + "/hostile/absent:v1"
			d := &image.Descriptor{Snapshot: digest.FromString("absent"), Size: 64 << 20, Created: time.Now().UTC()}
			if _, err := registry.Push(ctx, ref, d, registry.Options{}); err != nil {
				t.Fatal(err)
			}
			return ref
		}, "not in this node's store"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ref := tc.ref()
			_, errOut, code := p.CLI(t, "pull", ref)
			if code == 0 || !strings.Contains(errOut, tc.msg) || strings.Count(strings.TrimSpace(errOut), "\n") > 0 {
				t.Fatalf("pull: exit %d, %q; want one line with %q", code, errOut, tc.msg)
			}
			if out := cli(t, p, 0, "images", "-q"); strings.Contains(out, ref) {
				t.Fatalf("a refused image was named: %q", out)
			}
		})
	}

	// A valid map whose chunks the store lacks: the pull is lazy and succeeds;
	// running it fails clearly; check names each missing chunk.
	var chunks []blockmap.Chunk
	m := &blockmap.Map{Size: 64 << 20}
	for i := range 4 {
		c := blockmap.Chunk{Digest: digest.FromString("missing chunk " + string(rune('a'+i))), Size: 1 << 20}
		chunks = append(chunks, c)
		m.Chunks = append(m.Chunks, c)
		m.Extents = append(m.Extents, blockmap.Extent{Offset: int64(i) << 20, Length: 1 << 20, Chunk: i})
	}
	enc, err := blockmap.Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	ref := publish("holes", enc, 64<<20)
	cli(t, p, 0, "pull", ref)
	_, errOut, code := p.CLI(t, "run", "--rm", ref, "--", "true")
	if code != 125 || !strings.Contains(errOut, "mount") || strings.Count(strings.TrimSpace(errOut), "\n") > 0 {
		t.Fatalf("run of an image whose chunks are missing: exit %d, %q", code, errOut)
	}
	if !strings.Contains(p.Log(), `"msg":"chunk-fetch-failed"`) {
		t.Fatal("no chunk-fetch-failed line for the missing chunks")
	}
	out, _, code := p.CLI(t, "check")
	for _, c := range chunks {
		if code != 1 || !strings.Contains(out, "missing "+c.Digest.String()+" (name "+ref) {
			t.Fatalf("check: exit %d, no line for missing chunk %s:\n%s", code, c.Digest, out)
		}
	}
	if vs, _ := api.NewClient(p.Socket).Volumes(ctx); len(vs) != 0 {
		t.Fatalf("volumes left: %+v", vs)
	}
	// Nothing stored was lost.
	cli(t, p, 0, "rmi", ref)
	time.Sleep(time.Second) // the node's lease forgets the name
	if out := cli(t, p, 0, "check", "--read-data"); !strings.Contains(out, ": 0 problems") {
		t.Fatalf("check: %s", out)
	}
	if out := cli(t, p, 0, "run", "--rm", "debian:bookworm", "--", "cat", "/etc/debian_version"); !strings.HasPrefix(out, "12.") {
		t.Fatalf("the image pulled before: %q", out)
	}
}
