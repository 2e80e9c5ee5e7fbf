// Package ocistore is the store backend that keeps objects as blobs of a repository
// in any OCI distribution registry (Docker's distribution, Harbor, GHCR, ECR, ...),
// so the registry that serves a site's images can serve Slacker's chunks too.
// docs/stores.md has the design and its measurements.
//
// Packs. Objects are packed into larger blobs: each pack blob is objects laid end
// to end, described by an OCI manifest (artifact type application/vnd.slacker.pack.v1,
// the empty config, the blob as its one layer) whose annotation lists the objects
// in order with their sizes. The manifest is tagged p-<hex of the pack blob>, so a
// tag never moves to other content and two nodes that make the same pack make the
// same tag. Every blob is referenced by a tagged manifest, so the registry's own
// garbage collection never removes stored data. A pack is published blob first,
// manifest second: a listed pack always has its bytes.
//
// Compression (Options.Compress, on in locations unless compress=none): Put keeps
// an object as a zstd frame when that saves at least a sixteenth of it
// (store.EncodeObject), and the pack lists it as <hex>:<size>:zstd:<stored>; reads
// decode and verify the plain bytes (store.DecodeObject) whatever the setting.
//
// Writes use group commit: Put verifies the object's digest in memory, then joins
// the pack being filled; a pack is uploaded as soon as no other upload is running
// (or when it reaches PackSize, up to MaxFlushes at once), and Puts that arrive
// meanwhile fill the next one. Put returns when its pack's manifest is stored:
// durable and visible to every node. Concurrent writers (a snapshot uploads four
// chunks at a time) share packs; a lone writer gets a pack per object, which costs
// nothing more than an unpacked blob would. Objects of SoloSize or more get a pack
// of their own; over BufferLimit they are streamed.
//
// The index. Registries cannot list blobs, so the set of pack tags is the index:
// each node keeps the packs it knows in memory. A lookup that misses refreshes it
// (list the tags, read the manifests of packs it has not seen, forget packs whose
// tags are gone), and waits for a refresh that began after the miss, so a Put that
// returned on any node is found by every later Get, Stat or List on every node.
// Concurrent misses share one refresh. Appending needs no coordination between
// nodes at all: tags are immutable and named by content, so there is no shared
// mutable index to race on.
//
// Reads. Get is one HTTP Range request for the object's bytes in its pack,
// verified as it streams (store.VerifyingReader). GetBatch (store.BatchGetter)
// reads neighbours of one pack with one ranged request and verifies each object.
// An object is the unit of verification: GetRange reads the whole object, checks
// it, and cuts the range, so no unverified byte is ever returned. A read that finds
// its pack gone (repacked by a Delete elsewhere) refreshes the index and reads the
// object where it now is.
//
// Delete replaces each pack holding the object by a pack of its other objects (read
// back and verified), then deletes the old manifest and blob. Two concurrent
// Deletes in one pack may each restore the other's victim (a delete lost, never an
// object); deleting an object while some node Puts it again is what the garbage
// collector's leases and grace period exclude. Another node sees a deletion at its
// next refresh, which a Stat forces when its index is older than MaxAge; a Get of
// the deleted object finds the pack gone at once.
//
// Credentials come from the Docker config and its credential helpers, with basic
// and token auth (tokens renewed on 401), through go-containerregistry's transport,
// made on first use so a store opens while its registry is away. Native errors are
// mapped once (client.mapErr): unknown blob, manifest or repository to
// errdefs.ErrNotFound, a digest the registry refuses to errdefs.ErrCorrupt, network
// failures, timeouts, 5xx and 429 to errdefs.ErrUnavailable, 401/403 to an access
// denied error that says to log in. Every call is bounded by its ctx and Timeout.
// Every request is idempotent, so the client retries (client.do, a few times
// within about half a second) an answer a repeat may not get: 5xx, 429, and the
// link race of registries that write link files in place
// (distribution.LinkRace); transport failures are left to the caller's retries.
//
// This package must never know about chunks, maps or caches, and never returns
// bytes it has not verified.
package ocistore
