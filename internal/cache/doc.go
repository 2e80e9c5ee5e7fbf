// Package cache is the node's chunk cache: one per node, shared by every volume and
// image on it, keyed by chunk digest, so containers and images that share data share
// one fetch and one cached copy.
//
// Two tiers. A disk tier (one file per chunk under the cache directory) bounded by
// MaxBytes and evicted by hotness (segmented LRU: a chunk read twice is protected from
// a scan of chunks read once). A memory tier bounded by MemBytes holding chunks
// verified against their digest (sha256) when loaded, for as long as their bytes are
// in no local file the cache reads by the block (below): a chunk of a local store,
// or one whose disk-tier file is written, keeps no second copy in memory. A chunk file whose bytes no
// longer match its digest is dropped with a log line and fetched again, never served.
// Concurrent misses of one chunk share one fetch. Chunk files are replaced atomically
// but never fsynced (package atomicfile with NoSync): after a crash a torn file fails
// verification like any other and is fetched again; Open removes the temporary files
// a crash left.
//
// Local data at local speed. Whenever the cache verifies a whole chunk (a fetch, a
// load from the disk tier, a Put) it also keeps a checksum (xxh3-64, with a seed
// drawn at Open) of each of its 4 KiB blocks, for a bounded number of chunks
// (Options.SumChunks, least recently used evicted). A read that misses the memory
// tier, of a chunk with checksums whose bytes are in a local file (its disk-tier
// file, or, with no disk tier, the object file of a store that is a local directory:
// the optional ObjectFiles), reads only the blocks it covers from that file, checks
// each, and copies (Origin FromFile); the files of hot chunks stay open in a small
// LRU. The sha256 stays the root of trust: the block checksums only describe bytes
// this cache verified, so they catch later damage to the files. A block that does not
// match is never served: the chunk's checksums (and its disk-tier file) are dropped,
// a cache-chunk-corrupt line logged, and the chunk loaded whole again and verified
// against its digest (from a local store, a damaged object then fails as any
// corrupt object does). A chunk without checksums is loaded whole, unless the
// local store keeps checksums of its own with the object's file (the optional
// ObjectSums: package store/local takes them as a Put or a whole read verifies the
// object): those are taken instead, so that even the first read of a chunk in a
// local store reads only the blocks it needs, and has the kernel read the rest of
// the chunk's file ahead into the page cache (FADV_WILLNEED), as a whole load did.
//
// Every read reports where its bytes came from (Origin: memory, disk, blocks of a
// local file, the store, or another load in flight), so the caller can account for
// the bytes its reads moved.
// Load brings several chunks in at once, through the Source as one batch when it
// can batch (BatchSource), so a store that packs chunks serves neighbours in one
// request.
//
// The cache never decides what to fetch ahead, runs nothing in the background but
// its disk writes (package prefetch owns fetching ahead and its goroutines), and
// never writes to the store (a local store's files it only reads, named by
// ObjectFiles, and never trusts beyond the checksums of bytes it or the store
// verified).
package cache
