// Package archive applies OCI image layers (tar changesets) onto a directory tree.
//
// It owns one job: given the root of a mounted snapshot and one layer stream, make the
// tree equal to what the image-spec changeset rules say (regular files, directories,
// symlinks, hardlinks, fifos, device nodes, PAX xattrs, ownership, modes, times,
// whiteouts and opaque whiteouts), with the same result as umoci or containerd unpack.
// Decompress turns a stored layer blob (gzip, zstd or plain tar) into the tar stream.
//
// It must never write, remove, chown or chmod anything outside root, whatever the layer
// says and whatever the tree already holds: every path is resolved inside root with
// chroot semantics (openat2 RESOLVE_IN_ROOT) and every final operation is an *at call
// relative to the resolved parent's file descriptor, never following a final symlink.
// Hostile or malformed input is refused with an *EntryError wrapping ErrUnsafe. It never
// opens or reads a device node, never reads the whole layer into memory, and never
// fsyncs: the caller owns durability of the filesystem it mounted.
//
// Linux only: it needs openat2(2) (Linux 5.6 or later) and a mounted /proc.
// See docs/layers.md for the rules and the safety policy, and why absolute symlinks are
// kept while relative ones that climb above root are refused.
package archive
