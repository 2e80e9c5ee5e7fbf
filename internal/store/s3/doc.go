// Package s3 is the store backend for S3-compatible object storage (AWS S3, MinIO,
// Ceph RGW, ...), through minio-go. One object per store object, named
// <prefix>sha256/<first two hex digits>/<hex digest> in one bucket.
//
// Writes: Put reads an object of up to BufferLimit bytes into memory and checks its
// digest before sending anything, then uploads it in one PUT whose signed
// x-amz-content-sha256 header is the object's digest, so the server, too, refuses
// bytes that do not hash to the name (and a transfer damaged on the way). An S3 PUT
// is atomic: the key shows nothing or the whole object, so no temporary key and
// server-side copy are needed (they would cost two more requests per chunk and a
// window where a stray temporary is billed). A larger object is streamed, still
// under the same signed hash. A Put that returned is durable and visible to every
// node (S3 and MinIO have strong read-after-write consistency).
//
// Compression (Options.Compress, on in locations unless compress=none): an object
// of up to store.MaxEncodedObject bytes is stored as a zstd frame when that saves at
// least a sixteenth (store.EncodeObject), with user metadata slacker-encoding and
// slacker-size; the signed hash is then the frame's. Get reads such an object
// whole and returns it only decoded and verified (store.DecodeObject).
//
// Reads: Get streams the object through store.VerifyingReader. GetRange reads and
// verifies the whole object, then returns the range: an object is one chunk, the
// unit of verification, so a sub-range cannot be checked alone and is never served
// unchecked. The node always reads whole chunks (package fetch), so this costs
// nothing on the read path.
//
// Every native error is mapped once, in mapErr: NoSuchKey (and a missing bucket) to
// errdefs.ErrNotFound, a hash mismatch to errdefs.ErrCorrupt, network failures, timeouts,
// 5xx and throttling to errdefs.ErrUnavailable, and a cancelled or expired ctx to an
// error wrapping ctx.Err(). Access denied is reported as such (with what to check),
// and is not a sentinel.
//
// Deadlines: every call is bounded by its ctx and, if the ctx has no earlier one, by
// Options.Timeout; a Get's bound covers the reading of its body. Retries of reads
// belong to the caller (package fetch); the client itself retries only what it
// can replay (buffered Puts) a few times.
//
// This package must never know about chunks, maps or caches; it must never return
// bytes it has not verified.
package s3
