// Package atomicfile replaces a file's content atomically and durably: the content
// goes to a temporary file in the target's directory (or a given directory on the
// same filesystem), which is written, fsynced and closed, then renamed over the
// target, and then the directory is fsynced. A reader sees the old content or the
// new, never a mix; a crash at any step leaves the old file or the new one, plus at
// most one temporary file (IsTemp names it) that later writes ignore. Every record
// the node, the name store, the local store, volumes, containers, the graph driver
// and the snapshotter keep is written through it; the chunk cache uses it with the
// fsyncs off (a torn chunk fails verification and is fetched again).
//
// The file operations go through FS, the seam where tests inject an error or a
// crash at each step (package atomicfiletest). A failed write removes its temporary
// file and returns an *Error naming the step and the target.
//
// This package owns the order of those steps and nothing else: it never decides
// what a file holds, never locks (two writers of one target race, and the last
// rename wins), never removes a file it did not create, and never touches a
// temporary file of another write.
package atomicfile
