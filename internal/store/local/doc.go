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
// its own (the node cache, with no disk tier, reads blocks of chunks from there);
// this package reads nothing through it. ObjectSums gives that reader the
// checksums of the file's 4 KiB blocks (store.BlockSums, in the file's xattr
// user.slacker.blocksums), taken from the bytes a Put verified, or, for an object
// stored without them, from its first whole read that matched its digest; with them
// a reader checks a few blocks without reading and hashing the object whole. On
// ext4 the xattr takes a 4 KiB block of its own per object (1.6% of a 256 KiB
// chunk); on a filesystem without user xattrs there are none, and readers verify
// objects whole.
//
// The directory may be shared by several processes on one machine; nothing here holds
// a lock across calls.
package local
