// Package image defines the Slacker image descriptor: the few kilobytes that name an
// image's snapshot and carry its OCI configuration (entrypoint, cmd, env, working
// directory, user). It is what the local name store keeps, what a registry stores
// as an OCI artifact, and all that `slacker pull` moves; the data stays in the
// chunk store.
//
// Decode is strict and fuzzed: a size bound, a known schema version and media type,
// valid digests, and layer lineage that names snapshots.
package image
