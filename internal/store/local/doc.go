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
//
// The directory may be shared by several processes on one machine; nothing here holds
// a lock across calls.
package local
