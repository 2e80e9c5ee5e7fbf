// Package fusefs serves volumes as regular files through FUSE (go-fuse v2): one flat
// directory, one file per attached volume, whose size is the volume's size. A loop
// device attached to such a file turns the volume into a block device.
//
// Reads, writes, fsync and fallocate (punch hole, zero range: discards from the loop
// device) map straight onto the volume. Files are opened with FOPEN_DIRECT_IO and
// parallel direct writes, so the kernel keeps no second page cache of a volume (the
// guest filesystem has its own, the node chunk cache has the shared one) and does not
// serialize writes; async direct I/O lets a loop device keep many requests in flight
// (without it the loop device waits for each answer: queue depth 1).
//
// Errors are translated once, here (Errno, from errdefs.KindOf): an interrupted
// request gives EINTR, a write past the end ENOSPC, anything else EIO with one log
// line naming the volume and offset.
//
// This package never decides what a volume contains; it only carries requests.
package fusefs
