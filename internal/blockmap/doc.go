// Package blockmap is the snapshot format: a block map describes the bytes of a
// virtual disk (a flattened ext4 image) as extents, each pointing into a
// content-addressed chunk. Ranges no extent covers read as zeros (holes).
//
// A snapshot's ID is the sha256 digest of its encoded map, so the encoding is
// canonical: Encode always produces the same bytes for the same logical map. The
// format is versioned and documented in docs/format.md; Decode rejects anything
// malformed (bad magic, unknown version, misaligned, overlapping or out-of-range
// extents, references past a chunk's end, trailing bytes) with an error, and is fuzzed.
//
// Two granularities live in one map: base data is cut into large chunks (up to
// MaxChunkSize, set by the writer) and copy-on-write changes are recorded at
// BlockSize (4 KiB). Overlay replaces ranges of a base map with new extents in time
// proportional to the base's extent count plus the change, never to the data.
//
// A start-up layout (gather.go) plans which bytes read at start-up to gather into
// new chunks (PlanGathers) and points a map at them (Regather, an Overlay): the
// volume reads the same bytes, from fewer chunks.
//
// This package is pure: no I/O, no store, no knowledge of volumes.
package blockmap
