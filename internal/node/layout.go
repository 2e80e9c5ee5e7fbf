package node

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/opencontainers/go-digest"
	"golang.org/x/sync/errgroup"

	"github.com/slacker-dev/slacker/internal/blockmap"
	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/store"
	"github.com/slacker-dev/slacker/internal/trace"
)

// LayoutResult is what a start-up layout made (LayoutStartup).
type LayoutResult struct {
	// Snapshot is the re-laid snapshot; the one given when nothing was worth
	// gathering (Unchanged).
	Snapshot  digest.Digest
	Unchanged bool
	// NewChunks and GatheredBytes are the chunks made of gathered start-up data.
	NewChunks     int
	GatheredBytes int64
	// ReadBytes is the data start-up read (the trace's runs, holes left out);
	// FetchBefore and FetchAfter the chunk bytes a node fetches to read it, before
	// and after the layout.
	ReadBytes, FetchBefore, FetchAfter int64
	Took                               time.Duration
}

// LayoutStartup re-lays snapshot for start-up (docs/design.md, "Start-up layout"):
// the blocks that the store's trace of snapshot says a container read in its
// start-up window, where they are scattered over chunks of which start-up reads
// little, are gathered in volume order into new chunks. The new snapshot reads the
// same bytes as snapshot; it is stored with a trace that names the new chunks
// first, so a node that starts it fetches about what it reads.
//
// errdefs.ErrNotFound if the store has no trace of snapshot (no container has run
// it yet), errdefs.ErrInvalid if the trace has no block runs (recorded by an older
// slackerd), errdefs.ErrUnsupported if the store keeps no records.
func (n *Node) LayoutStartup(ctx context.Context, snapshot digest.Digest) (*LayoutResult, error) {
	start := time.Now()
	refs, ok := n.cfg.Store.(store.Refs)
	if !ok {
		return nil, fmt.Errorf("start-up layout: the store keeps no start-up traces: %w", errdefs.ErrUnsupported)
	}
	b, err := refs.GetRef(ctx, trace.RefName(snapshot))
	if err != nil {
		return nil, fmt.Errorf("start-up layout of %s: its start-up trace (run a container of the image first): %w", snapshot, err)
	}
	t, err := trace.Decode(b)
	if err != nil {
		return nil, fmt.Errorf("start-up layout of %s: %w", snapshot, err)
	}
	if len(t.Runs) == 0 {
		return nil, fmt.Errorf("start-up layout of %s: its trace names no blocks (recorded by an older slackerd: run a container of the image once more, which records them): %w",
			snapshot, errdefs.ErrInvalid)
	}
	m, err := n.Map(ctx, snapshot)
	if err != nil {
		return nil, err
	}
	ranges := make([][2]int64, len(t.Runs))
	for i, r := range t.Runs {
		ranges[i] = [2]int64{r[0] * blockmap.BlockSize, min(r[1]*blockmap.BlockSize, m.Size)}
	}
	for len(ranges) > 0 && ranges[len(ranges)-1][0] >= ranges[len(ranges)-1][1] {
		ranges = ranges[:len(ranges)-1] // past the end of the volume
	}
	res := &LayoutResult{Snapshot: snapshot}
	res.ReadBytes, res.FetchBefore = startupCost(m, ranges)
	rank := map[digest.Digest]int{}
	for i, c := range t.BlockmapChunks() {
		if _, ok := rank[c.Digest]; !ok {
			rank[c.Digest] = i
		}
	}
	gathers, err := blockmap.PlanGathers(m, ranges, cmp.Or(n.cfg.StartupChunkSize, DefaultStartupChunkSize), rank)
	if err != nil {
		return nil, fmt.Errorf("start-up layout of %s: %w", snapshot, err)
	}
	if len(gathers) == 0 {
		res.Unchanged, res.FetchAfter, res.Took = true, res.FetchBefore, time.Since(start)
		return res, nil
	}

	// Read each gather's bytes through the cache (verified chunk by chunk).
	datas := make([][]byte, len(gathers))
	chunks := make([]blockmap.Chunk, len(gathers))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i, ga := range gathers {
		g.Go(func() error {
			data := make([]byte, ga.Size)
			var at int64
			for _, p := range ga.Pieces {
				if _, err := n.cache.ReadChunk(gctx, p.Chunk, data[at:at+p.Length], p.ChunkOffset); err != nil {
					return fmt.Errorf("read start-up data at %d: %w", p.Offset, err)
				}
				at += p.Length
			}
			datas[i] = data
			chunks[i] = blockmap.Chunk{Digest: digest.FromBytes(data), Size: ga.Size}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, fmt.Errorf("start-up layout of %s: %w", snapshot, err)
	}
	nm, err := blockmap.Regather(m, gathers, chunks)
	if err != nil {
		return nil, fmt.Errorf("start-up layout of %s: %w", snapshot, err)
	}
	enc, err := blockmap.Encode(nm)
	if err != nil {
		return nil, fmt.Errorf("start-up layout of %s: %w", snapshot, err)
	}
	id := blockmap.ID(enc)

	// The new chunks and the map, under the node's lease as a snapshot's are.
	var up *upload
	var written digest.Digest
	if n.lease != nil {
		if up, err = n.lease.beginUpload(ctx, "layout-"+snapshot.Encoded()[:12], nm.Chunks); err != nil {
			return nil, err
		}
		defer func() { up.end(written) }()
	}
	st := n.fetcher.Bounded()
	g, gctx = errgroup.WithContext(ctx)
	g.SetLimit(4)
	for i, c := range chunks {
		g.Go(func() error {
			if err := st.Put(gctx, c.Digest, c.Size, bytes.NewReader(datas[i])); err != nil {
				return fmt.Errorf("store start-up chunk %s: %w", c.Digest, err)
			}
			if err := n.cache.Put(c, datas[i]); err != nil {
				n.log.Warn("cache-seed-failed", "chunk", c.Digest, "err", err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, fmt.Errorf("start-up layout of %s: %w", snapshot, err)
	}
	if up != nil {
		again, err := up.clear(ctx, id)
		if err == nil && again {
			err = n.checkBase(ctx, m, snapshot)
		}
		if err != nil {
			return nil, fmt.Errorf("start-up layout of %s: %w", snapshot, err)
		}
	}
	if err := st.Put(ctx, id, int64(len(enc)), bytes.NewReader(enc)); err != nil {
		return nil, fmt.Errorf("start-up layout of %s: store the map: %w", snapshot, err)
	}
	written = id
	n.mapsMu.Lock()
	n.maps[id] = nm
	n.mapsMu.Unlock()

	// Its trace: the gathered chunks first, then, in the old trace's order, the old
	// chunks that still hold start-up data (not those whose start-up blocks all
	// moved: a replay would fetch them for nothing).
	nt := trace.New(id, t.Window, append(append([]blockmap.Chunk(nil), chunks...), keptChunks(nm, ranges, t)...))
	nt.Runs = t.Runs
	nt.Files = t.Files // the filesystem is the same: its files are where they were
	tb, err := trace.Encode(nt)
	if err == nil {
		err = refs.PutRef(ctx, trace.RefName(id), tb)
	}
	if err != nil {
		return nil, fmt.Errorf("start-up layout of %s: write the trace of %s: %w", snapshot, id, err)
	}
	res.Snapshot, res.NewChunks = id, len(chunks)
	for _, c := range chunks {
		res.GatheredBytes += c.Size
	}
	_, res.FetchAfter = startupCost(nm, ranges)
	res.Took = time.Since(start)
	n.log.Info("startup-layout-written", "snapshot", snapshot, "relaid", id, "new_chunks", res.NewChunks,
		"gathered_bytes", res.GatheredBytes, "read_bytes", res.ReadBytes, "fetch_before", res.FetchBefore,
		"fetch_after", res.FetchAfter, "took", res.Took)
	return res, nil
}

// startupCost returns the data bytes of m inside ranges, and the bytes of the
// distinct chunks that hold them (what a node fetches to read them).
func startupCost(m *blockmap.Map, ranges [][2]int64) (read, fetch int64) {
	seen := map[digest.Digest]bool{}
	for _, r := range ranges {
		for _, p := range m.Lookup(r[0], r[1]-r[0]) {
			if p.Hole {
				continue
			}
			read += p.Length
			if !seen[p.Chunk.Digest] {
				seen[p.Chunk.Digest] = true
				fetch += p.Chunk.Size
			}
		}
	}
	return read, fetch
}

// keptChunks returns the chunks of trace t that hold data of m inside ranges, in
// t's order.
func keptChunks(m *blockmap.Map, ranges [][2]int64, t *trace.Trace) []blockmap.Chunk {
	in := map[digest.Digest]bool{}
	for _, r := range ranges {
		for _, p := range m.Lookup(r[0], r[1]-r[0]) {
			if !p.Hole {
				in[p.Chunk.Digest] = true
			}
		}
	}
	var out []blockmap.Chunk
	for _, c := range t.BlockmapChunks() {
		if in[c.Digest] {
			out = append(out, c)
		}
	}
	return out
}
