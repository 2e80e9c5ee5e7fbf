// Package local is the embedded default store backend: objects are files in a local
// directory, <root>/sha256/<first two hex digits>/<hex digest>.
//
// Writes are atomic and durable (package atomicfile): content goes to a temporary file
// under <root>/tmp, is hashed while written, fsynced, renamed into place, and the
// directory is fsynced. A write cut short by a crash leaves at most its temporary
// file there, which nothing reads.
// Every read is verified against the object's digest: Get hashes as it streams and
// GetRange reads and hashes the whole object before returning the range. A file whose
// bytes no longer match its name is reported as errdefs.ErrCorrupt, never served.
// ObjectFile names an object's file for a reader on this machine that verifies on
// its own (the node cache, with no disk tier, reads blocks of chunks it verified
// whole before from there); this package reads nothing through it.
//
// The directory may be shared by several processes on one machine; nothing here holds
// a lock across calls.
package local
