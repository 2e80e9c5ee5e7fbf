package node

import (
	"bytes"
	"crypto/rand"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/blockmap"
	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/runs"
	"github.com/slacker-dev/slacker/internal/store"
	"github.com/slacker-dev/slacker/internal/trace"
)

// storeImage stores a map of nchunks random chunks of chunkBlocks blocks each and
// returns its ID, the map and the volume's bytes.
func storeImage(t *testing.T, st store.Store, nchunks, chunkBlocks int64) (digest.Digest, *blockmap.Map, []byte) {
	t.Helper()
	ctx := t.Context()
	size := nchunks * chunkBlocks * blockmap.BlockSize
	vol := make([]byte, size)
	rand.Read(vol)
	var patches []blockmap.Patch
	for off := int64(0); off < size; off += chunkBlocks * blockmap.BlockSize {
		data := vol[off : off+chunkBlocks*blockmap.BlockSize]
		d, err := store.PutBytes(ctx, st, data)
		if err != nil {
			t.Fatal(err)
		}
		patches = append(patches, blockmap.Patch{Offset: off, Length: int64(len(data)), Chunk: blockmap.Chunk{Digest: d, Size: int64(len(data))}})
	}
	m, err := blockmap.Overlay(blockmap.Empty(size), patches)
	if err != nil {
		t.Fatal(err)
	}
	enc, err := blockmap.Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	id, err := store.PutBytes(ctx, st, enc)
	if err != nil {
		t.Fatal(err)
	}
	return id, m, vol
}

// readSnapshot reads every byte of snapshot id from the store, through its map.
func readSnapshot(t *testing.T, n *Node, st store.Store, id digest.Digest) []byte {
	t.Helper()
	m, err := n.Map(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]byte, m.Size)
	for _, p := range m.Lookup(0, m.Size) {
		if p.Hole {
			continue
		}
		b, err := st.GetRange(t.Context(), p.Chunk.Digest, p.ChunkOffset, p.Length)
		if err != nil {
			t.Fatal(err)
		}
		copy(out[p.Offset:], b)
	}
	return out
}

func putTrace(t *testing.T, st store.Refs, tr *trace.Trace) {
	t.Helper()
	b, err := trace.Encode(tr)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.PutRef(t.Context(), trace.RefName(tr.Snapshot), b); err != nil {
		t.Fatal(err)
	}
}

// A start-up that reads two blocks of each of 16 chunks fetches 16 chunks; laid
// out, it fetches one, and the image reads the same bytes.
func TestLayoutStartupGathersScatteredReads(t *testing.T) {
	n, st := newNode(t)
	ctx := t.Context()
	id, m, vol := storeImage(t, st, 16, 64) // 16 chunks of 256 KiB
	var rs []runs.Run
	for c := int64(0); c < 16; c++ {
		rs = append(rs, runs.Run{Start: c*64 + 10, End: c*64 + 12})
	}
	tr := trace.New(id, 30*time.Second, m.Chunks)
	tr.SetRuns(rs)
	putTrace(t, st, tr)

	res, err := n.LayoutStartup(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if res.Unchanged || res.Snapshot == id || res.NewChunks != 1 || res.GatheredBytes != 32*blockmap.BlockSize {
		t.Fatalf("layout %+v; want one new chunk of the 32 blocks read", res)
	}
	if res.ReadBytes != 32*blockmap.BlockSize || res.FetchBefore != 16*256<<10 || res.FetchAfter != 32*blockmap.BlockSize {
		t.Fatalf("layout %+v; want 16 chunks fetched before, the one new chunk after", res)
	}
	if got := readSnapshot(t, n, st, res.Snapshot); !bytes.Equal(got, vol) {
		t.Fatal("the laid-out snapshot reads other bytes")
	}
	// Its trace names the new chunk first and keeps the runs.
	b, err := st.GetRef(ctx, trace.RefName(res.Snapshot))
	if err != nil {
		t.Fatal(err)
	}
	nt, err := trace.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	nm, err := n.Map(ctx, res.Snapshot)
	if err != nil {
		t.Fatal(err)
	}
	first := nm.Lookup(10*blockmap.BlockSize, blockmap.BlockSize)[0].Chunk
	if nt.Snapshot != res.Snapshot || len(nt.Chunks) == 0 || nt.Chunks[0].Digest != first.Digest || len(nt.Runs) != 16 {
		t.Fatalf("trace of the laid-out snapshot: %+v", nt)
	}
	// Laying it out again gathers nothing.
	again, err := n.LayoutStartup(ctx, res.Snapshot)
	if err != nil || !again.Unchanged || again.Snapshot != res.Snapshot {
		t.Fatalf("second layout: %+v, %v", again, err)
	}
}

// Start-up reads four chunks whole and a little of four others, the last chunks
// first. Laid out in chunks of up to 1 MiB (DefaultStartupChunkSize), the dense
// chunks are gathered too: two requests instead of eight, the first holding what
// start-up read first.
func TestLayoutStartupGathersDenseChunksInTraceOrder(t *testing.T) {
	n, st := newNode(t)
	ctx := t.Context()
	id, m, vol := storeImage(t, st, 8, 64) // 8 chunks of 256 KiB
	rs := []runs.Run{{Start: 0, End: 4 * 64}}
	for c := int64(4); c < 8; c++ {
		rs = append(rs, runs.Run{Start: c*64 + 5, End: c*64 + 7})
	}
	order := append([]blockmap.Chunk(nil), m.Chunks...)
	slices.Reverse(order)
	tr := trace.New(id, 30*time.Second, order)
	tr.SetRuns(rs)
	putTrace(t, st, tr)

	res, err := n.LayoutStartup(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	read := int64(4*256<<10 + 8*blockmap.BlockSize)
	if res.NewChunks != 2 || res.GatheredBytes != read || res.FetchBefore != 8*256<<10 || res.FetchAfter != read {
		t.Fatalf("layout %+v; want the %d bytes read in two new chunks", res, read)
	}
	if got := readSnapshot(t, n, st, res.Snapshot); !bytes.Equal(got, vol) {
		t.Fatal("the laid-out snapshot reads other bytes")
	}
	nm, err := n.Map(ctx, res.Snapshot)
	if err != nil {
		t.Fatal(err)
	}
	// The first new chunk begins with the last chunk's blocks, read first.
	p := nm.Lookup((7*64+5)*blockmap.BlockSize, blockmap.BlockSize)[0]
	if p.ChunkOffset != 0 || p.Chunk.Size != 1<<20 {
		t.Fatalf("the blocks start-up read first are at %d of a chunk of %d bytes; want at 0 of the first, 1 MiB", p.ChunkOffset, p.Chunk.Size)
	}
	again, err := n.LayoutStartup(ctx, res.Snapshot)
	if err != nil || !again.Unchanged {
		t.Fatalf("second layout: %+v, %v", again, err)
	}
}

func TestLayoutStartupRefuses(t *testing.T) {
	n, st := newNode(t)
	ctx := t.Context()
	id, m, _ := storeImage(t, st, 2, 4)
	if _, err := n.LayoutStartup(ctx, id); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("no trace: %v, want ErrNotFound", err)
	}
	putTrace(t, st, &trace.Trace{Version: 1, Snapshot: id, Created: time.Now(), Chunks: []trace.Chunk{{Digest: m.Chunks[0].Digest, Size: m.Chunks[0].Size}}})
	if _, err := n.LayoutStartup(ctx, id); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("a version 1 trace: %v, want ErrInvalid", err)
	}
}
