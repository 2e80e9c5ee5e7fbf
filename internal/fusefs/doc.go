// Package fusefs serves volumes as regular files through FUSE (go-fuse v2's raw
// protocol server): one flat directory, one file per attached volume, whose size is
// the volume's size. A loop device attached to such a file turns the volume into a
// block device.
//
// Reads, writes, fsync and fallocate (punch hole, zero range: discards from the loop
// device) map straight onto the volume. Files are opened with FOPEN_DIRECT_IO and
// parallel direct writes, so the kernel keeps no second page cache of a volume (the
// guest filesystem has its own, the node chunk cache has the shared one) and does not
// serialize writes; async direct I/O lets a loop device keep many requests in flight
// (without it the loop device waits for each answer: queue depth 1).
//
// The connection can outlive this process (connection.go): Mount opens /dev/fuse
// and mounts it itself, Session hands out a descriptor of the connection and the
// kernel's INIT request (slackerd gives them to its holder, package fuseholder),
// and Resume serves them in a new process, which asks the kernel to send again the
// requests the dead one had read. So that a new process can answer for whatever
// the kernel holds, a file's node ID is a function of its name (with a generation
// telling a re-created volume from the old one), and nothing is kept per open: a
// loop device keeps its file open across the hand-over. FLUSH is refused (ENOSYS),
// so that no close of a volume file ever waits for a server. Every request buffer
// is written page by page before its first use: a SIGKILL landing while the kernel
// copies a request into an unmapped page would end that request with EIO instead
// of leaving it for the next process.
//
// Errors are translated once, here (Errno, from errdefs.KindOf): an interrupted
// request gives EINTR, a write past the end ENOSPC, anything else EIO with one log
// line naming the volume and offset. A node ID this process does not know is
// ENOENT.
//
// This package never decides what a volume contains; it only carries requests.
package fusefs
