// Package trace is the start-up trace format: the chunks of an image's snapshot
// that a container read while it started, in the order it first read them, kept
// as a record of the store (store.Refs) named after the snapshot. A node records
// one from the first container it runs of an image whose store has none, and
// replays it when it clones that snapshot for the next container: the chunks are
// fetched ahead, in parallel and coalesced, instead of one dependent read at a time
// (ARCHITECTURE.md, "Prefetch what start-up reads"; docs/format.md has the format).
// Since version 3 it also lists the files start-up opened and the ranges of them it
// read, which a shared image root reads into its page cache (package filetrace).
//
// A trace is a hint: replaying a wrong or stale one costs fetches, never
// correctness, since every chunk is verified against its digest by the cache and
// the fetcher. Decode still rejects anything malformed (unknown version, bad
// digests, sizes out of range, duplicates, too many chunks), and is fuzzed.
//
// This package is pure: no I/O, no store, no knowledge of volumes or caches.
package trace
