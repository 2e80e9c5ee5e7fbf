// Package ext4meta reads where an ext4 filesystem keeps its inodes: from the
// superblock and the group descriptors, the byte ranges of the inode tables that
// hold inodes in use. A start with no trace to replay loads those ranges ahead
// (package prefetch, Options.FirstStartRanges): every file a program opens is an
// inode read, and without them each first open of a file in another part of the
// table is one more dependent fetch from the store (docs/design.md, "A first
// start loads the inode tables").
//
// It only reads, through an io.ReaderAt over the volume, a few kilobytes (the
// superblock and the descriptor table). Everything it returns is a hint: ranges
// are clipped to the volume, and a filesystem that is not ext4, or whose
// superblock or descriptors make no sense, is an error (ErrNotExt4), never a
// panic or an unbounded read. The decoder is fuzzed.
package ext4meta
