// Package cache is the node's chunk cache: one per node, shared by every volume and
// image on it, keyed by chunk digest, so containers and images that share data share
// one fetch and one cached copy.
//
// Two tiers. A disk tier (one file per chunk under the cache directory) bounded by
// MaxBytes and evicted by hotness (segmented LRU: a chunk read twice is protected from
// a scan of chunks read once). A memory tier bounded by MemBytes holding chunks
// verified against their digest when loaded; every byte served comes from it. A chunk
// file whose bytes no longer match its digest is dropped with a log line and fetched
// again, never served. Concurrent misses of one chunk share one fetch. Chunk files are
// replaced atomically but never fsynced (package atomicfile with NoSync): after a
// crash a torn file fails verification like any other and is fetched again; Open
// removes the temporary files a crash left.
//
// Every read reports where its chunk came from (Origin: memory, disk, the store, or
// another load in flight), so the caller can account for the bytes its reads moved.
// Load brings several chunks in at once, through the Source as one batch when it
// can batch (BatchSource), so a store that packs chunks serves neighbours in one
// request.
//
// The cache never decides what to fetch ahead, runs nothing in the background but
// its disk writes (package prefetch owns fetching ahead and its goroutines), and
// never writes to the store.
package cache
