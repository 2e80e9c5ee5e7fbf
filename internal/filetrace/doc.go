// Package filetrace is the file side of a start-up trace, for a filesystem the
// node mounts itself (a shared root's image root, a block clone): which files a
// start opened, and which byte ranges of them it read; and, on the next start, the
// same files read into the page cache ahead of the container, many at once.
//
// Why: the chunk replay (package prefetch) brings a start's chunks onto the node
// ahead of its reads, but every read of the container still goes through the
// kernel one file at a time (a program loads its modules in order), each a round
// trip through the loop device and FUSE to slackerd. Reading the same ranges ahead
// from a pool of goroutines puts many of those round trips in flight at once, so
// that the container finds its files in the page cache, as it would on a warm
// node (docs/design.md, "Warming the image root's page cache").
//
//   - Watch (fanotify, FAN_MARK_FILESYSTEM) reports each regular file opened on
//     one filesystem, through any mount of it: the container's overlay opens the
//     image root's files, and those opens are reported on the image root. A file
//     seen once is ignored from then on (an ignore mark on its inode), so a
//     server opening one file per request pays for its first open only.
//   - Recorder, on Watch, notes each file opened with its extents (FIEMAP) and,
//     given the volume blocks the start read (the chunk trace's runs), returns the
//     trace's files: each path with the byte ranges of it those blocks hold.
//   - Warm opens a trace's files under a mount's root (openat2, resolved inside
//     the root, regular files only) and reads their ranges into the page cache
//     (FADV_RANDOM: those ranges, no readahead around them), a few files at a
//     time, in the trace's order.
//
// Everything here is a hint: a wrong or stale trace costs reads, never what a
// read returns. It needs Linux and root (fanotify on a filesystem, FIEMAP).
package filetrace
