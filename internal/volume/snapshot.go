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
// docs/design.md ("Chunk size") says how it was chosen.
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
	// Prepare, if set, is called with every chunk the snapshot will name that is
	// not its base's, once they are all hashed and before any call to the store;
	// an error stops the snapshot. The node lists them in its lease (package gc),
	// so a collection cannot take a chunk this snapshot is about to reuse.
	Prepare func(ctx context.Context, chunks []blockmap.Chunk) error
	// BeforeMap, if set, is called once every chunk is in the store, before the
	// map (whose ID it is given) is written. If it returns again, every chunk is
	// checked (and uploaded if missing) once more, and BeforeMap is called again
	// (the node's fence against a collection that ran meanwhile).
	BeforeMap func(ctx context.Context, id digest.Digest) (again bool, err error)
}

// maxRechecks bounds the passes BeforeMap can ask for.
const maxRechecks = 8

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
	written := v.present.Runs()
	v.mu.Unlock()

	// Cut runs into pieces at multiples of chunkSize.
	type piece struct{ off, length int64 }
	var pieces []piece
	var total int64
	chunkBlocks := chunkSize / BlockSize
	for _, r := range written {
		for b := r.Start; b < r.End; {
			next := min((b/chunkBlocks+1)*chunkBlocks, r.End)
			pieces = append(pieces, piece{b * BlockSize, (next - b) * BlockSize})
			total += (next - b) * BlockSize
			b = next
		}
	}

	res := &SnapshotResult{DeltaBytes: total}
	// Hash first, holding no data: the chunks are known (and can be leased)
	// before the store is asked about any of them.
	patchesOf := make([][]blockmap.Patch, len(pieces))
	var zeroBytes atomic.Int64
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
					p.Chunk = blockmap.Chunk{Digest: digest.FromBytes(buf[pos : pos+n]), Size: n}
				}
				patchesOf[i] = append(patchesOf[i], p)
				pos += n
			}
			return gctx.Err()
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	if opts.Prepare != nil {
		seen := map[digest.Digest]bool{}
		var chunks []blockmap.Chunk
		for _, ps := range patchesOf {
			for _, p := range ps {
				if p.Chunk.Digest != "" && !seen[p.Chunk.Digest] {
					seen[p.Chunk.Digest] = true
					chunks = append(chunks, p.Chunk)
				}
			}
		}
		if err := opts.Prepare(ctx, chunks); err != nil {
			return nil, fmt.Errorf("snapshot: %w", err)
		}
	}
	var newBytes, newChunks, reused atomic.Int64
	// upload checks every chunk and uploads those the store lacks, reading their
	// bytes from the delta again (writes wait while a snapshot runs).
	upload := func(first bool) error {
		var done atomic.Int64
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(parallel)
		for i, pc := range pieces {
			g.Go(func() error {
				for _, p := range patchesOf[i] {
					if p.Chunk.Digest == "" {
						continue
					}
					data := make([]byte, p.Length)
					if _, err := v.data.ReadAt(data, p.Offset); err != nil {
						return fmt.Errorf("snapshot: read delta at %d: %w", p.Offset, err)
					}
					ok, err := store.Exists(gctx, st, p.Chunk.Digest)
					if err != nil {
						return fmt.Errorf("snapshot: %w", err)
					}
					if ok {
						if first {
							reused.Add(1)
						}
					} else {
						if err := st.Put(gctx, p.Chunk.Digest, p.Length, bytes.NewReader(data)); err != nil {
							return fmt.Errorf("snapshot: upload chunk at %d: %w", p.Offset, err)
						}
						newChunks.Add(1)
						newBytes.Add(p.Length)
					}
					if first && opts.OnChunk != nil {
						opts.OnChunk(p.Chunk, data)
					}
				}
				d := done.Add(pc.length)
				if first && opts.Progress != nil {
					opts.Progress(d, total)
				}
				return nil
			})
		}
		return g.Wait()
	}
	if err := upload(true); err != nil {
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
	for pass := 0; opts.BeforeMap != nil; pass++ {
		again, err := opts.BeforeMap(ctx, blockmap.ID(enc))
		if err != nil {
			return nil, fmt.Errorf("snapshot: %w", err)
		}
		if !again {
			break
		}
		if pass == maxRechecks {
			return nil, fmt.Errorf("snapshot: garbage collections kept running while its chunks were checked %d times; try again", pass)
		}
		if err := upload(false); err != nil {
			return nil, err
		}
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
