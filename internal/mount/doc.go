// Package mount owns the kernel side of a container root: loop devices attached to
// volume files (LOOP_CONFIGURE with direct I/O and a 4 KiB logical block size),
// ext4 filesystems made and mounted on them, overlays over image roots, filesystem freeze for consistent
// snapshots of a live container, and the discovery and teardown of mounts and loop
// devices left behind by a crashed daemon.
//
// Everything here is a thin, checked wrapper over syscalls and e2fsprogs; it never
// knows what a volume is.
package mount
