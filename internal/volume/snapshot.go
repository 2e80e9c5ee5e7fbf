package volume

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"

	"github.com/opencontainers/go-digest"
	"golang.org/x/sync/errgroup"

	"github.com/slacker-dev/slacker/internal/blockmap"
	"github.com/slacker-dev/slacker/internal/store"
)

// DefaultChunkSize is the largest chunk Snapshot cuts from a run of written blocks.
// See docs/design-notes.md for how it was chosen.
const DefaultChunkSize = 256 << 10

// SnapshotOptions tune Snapshot.
type SnapshotOptions struct {
	// ChunkSize is the largest chunk, a multiple of BlockSize; chunks are cut at
	// multiples of ChunkSize in the volume so rewrites of a region cut alike.
	// Zero means DefaultChunkSize.
	ChunkSize int64
	// Parallel uploads; zero means 4.
	Parallel int
	// OnChunk, if set, is called with each chunk written to or found in the store,
	// with its bytes (e.g. to seed the node cache). It must not keep data.
	OnChunk func(c blockmap.Chunk, data []byte)
	// Progress, if set, is called after each chunk with the bytes done and total.
	Progress func(done, total int64)
}

// SnapshotResult describes a snapshot taken.
type SnapshotResult struct {
	ID            digest.Digest
	Map           *blockmap.Map
	DeltaBytes    int64 // bytes of written blocks examined
	ZeroBytes     int64 // of which all zeros (recorded as holes)
	NewChunks     int   // chunks uploaded
	NewBytes      int64 // bytes uploaded
	ReusedChunks  int   // chunks the store already had
	EncodedMapLen int
}

// Snapshot makes the volume's current content an immutable snapshot in st: it cuts
// the written blocks into chunks, uploads those st lacks, then uploads the new map,
// and returns its ID. Writes wait while it runs; reads go on. The volume is
// unchanged and stays writable. The caller quiesces the guest filesystem first
// (e.g. FIFREEZE) if it is mounted.
func (v *Volume) Snapshot(ctx context.Context, st store.Store, opts SnapshotOptions) (*SnapshotResult, error) {
	if v.closed.Load() {
		return nil, ErrClosed
	}
	chunkSize := opts.ChunkSize
	if chunkSize == 0 {
		chunkSize = DefaultChunkSize
	}
	if chunkSize <= 0 || chunkSize%BlockSize != 0 {
		return nil, fmt.Errorf("snapshot: chunk size %d is not a positive multiple of %d", chunkSize, BlockSize)
	}
	parallel := opts.Parallel
	if parallel <= 0 {
		parallel = 4
	}
	v.writeMu.Lock()
	defer v.writeMu.Unlock()
	v.mu.Lock()
	runs := v.present.runs()
	v.mu.Unlock()

	// Cut runs into pieces at multiples of chunkSize.
	type piece struct{ off, length int64 }
	var pieces []piece
	var total int64
	chunkBlocks := chunkSize / BlockSize
	for _, r := range runs {
		for b := r.start; b < r.end; {
			next := min((b/chunkBlocks+1)*chunkBlocks, r.end)
			pieces = append(pieces, piece{b * BlockSize, (next - b) * BlockSize})
			total += (next - b) * BlockSize
			b = next
		}
	}

	res := &SnapshotResult{DeltaBytes: total}
	patchesOf := make([][]blockmap.Patch, len(pieces))
	var done, newBytes, zeroBytes atomic.Int64
	var newChunks, reused atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(parallel)
	for i, pc := range pieces {
		g.Go(func() error {
			buf := make([]byte, pc.length)
			if _, err := v.data.ReadAt(buf, pc.off); err != nil {
				return fmt.Errorf("snapshot: read delta at %d: %w", pc.off, err)
			}
			// Split the piece into runs of zero and non-zero blocks.
			for pos := int64(0); pos < pc.length; {
				zero := bytes.Equal(buf[pos:pos+BlockSize], zeroBlock)
				n := int64(BlockSize)
				for pos+n < pc.length && bytes.Equal(buf[pos+n:pos+n+BlockSize], zeroBlock) == zero {
					n += BlockSize
				}
				p := blockmap.Patch{Offset: pc.off + pos, Length: n}
				if zero {
					zeroBytes.Add(n)
				} else {
					data := buf[pos : pos+n]
					c := blockmap.Chunk{Digest: digest.FromBytes(data), Size: n}
					ok, err := store.Exists(gctx, st, c.Digest)
					if err != nil {
						return fmt.Errorf("snapshot: %w", err)
					}
					if ok {
						reused.Add(1)
					} else {
						if err := st.Put(gctx, c.Digest, n, bytes.NewReader(data)); err != nil {
							return fmt.Errorf("snapshot: upload chunk at %d: %w", pc.off+pos, err)
						}
						newChunks.Add(1)
						newBytes.Add(n)
					}
					if opts.OnChunk != nil {
						opts.OnChunk(c, data)
					}
					p.Chunk = c
				}
				patchesOf[i] = append(patchesOf[i], p)
				pos += n
			}
			d := done.Add(pc.length)
			if opts.Progress != nil {
				opts.Progress(d, total)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	var patches []blockmap.Patch
	for _, ps := range patchesOf {
		patches = append(patches, ps...)
	}
	base := v.base
	if base.Size != v.meta.Size {
		base = blockmap.Resize(base, v.meta.Size)
	}
	m, err := blockmap.Overlay(base, patches)
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	enc, err := blockmap.Encode(m)
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	// Data before metadata: every chunk is durable in the store before the map.
	id, err := store.PutBytes(ctx, st, enc)
	if err != nil {
		return nil, fmt.Errorf("snapshot: upload map: %w", err)
	}
	res.ID, res.Map, res.EncodedMapLen = id, m, len(enc)
	res.NewChunks, res.ReusedChunks = int(newChunks.Load()), int(reused.Load())
	res.NewBytes, res.ZeroBytes = newBytes.Load(), zeroBytes.Load()
	return res, nil
}
