// Package node is one machine's Slacker state and the operations on it: volumes
// cloned from snapshots, served as files through FUSE, attached to loop devices and
// mounted as ext4; snapshots of volumes; blank filesystems; the shared chunk cache,
// fetcher and prefetch engine (each volume reads its base through a
// prefetch.Reader); and reconciliation after a crash.
//
// Layout under the node root (Config.Root):
//
//	node-id            the node's ID, made on first start
//	volumes/<id>/      a volume's delta (package volume) and its node record node.json
//	maps/<snapshot>    encoded block maps already fetched (verified on load)
//	cache/             the chunk cache (package cache)
//	fuse/              the FUSE mount where volume files appear
//	mnt/<id>/          where a volume's ext4 filesystem is mounted
//	images/<hex>       local images (localimage.go): an image snapshot whose chunks
//	                   are all on the node, as its tree of files (or its ext4
//	                   bytes) that the next image root of it reads through the kernel
//
// Container roots (shared.go) are by default overlays over one read-only image
// root per image snapshot; block clones (RootBlock) are volumes of their own. A
// volume made for a start (an image root, a block clone) records the files the
// start opens into its start-up trace, and reads a replayed trace's files into its
// page cache ahead of the container (startupfiles.go, package filetrace).
//
// The node's own files (node-id, node.json, maps) are replaced atomically through
// package atomicfile, durably but for the maps (verified whenever read) and a
// record's mounted flag (a power cut unmounts everything anyway); a crash in the
// middle leaves at most a temporary file that nothing reads.
//
// On Open, everything a previous daemon left mounted or attached under the root is
// torn down (ext4 mounts, loop devices backed by volume files, the dead FUSE mount),
// volumes are reopened from their journals, and those recorded as mounted are mounted
// again, so their fsynced writes are visible and ext4 replays its journal.
//
// The node keeps its lease in the store (lease.go; package gc explains leases): the
// snapshots its volumes, images and recent snapshots use and the chunks of its
// uploads in progress, so that a garbage collection on any node spares them; a
// snapshot lists its chunks there before checking the store and checks them again
// before writing its map if a collection ran meanwhile.
//
// LayoutStartup (layout.go) re-lays a snapshot for start-up from its stored trace:
// the scattered blocks start-up read are copied into new chunks, under the lease
// like a snapshot's, and the new map gets a trace of its own (docs/design.md).
//
// The node never talks HTTP or gRPC (package daemon does) and never interprets the
// files inside a volume (package convert does; package filetrace reads the ones a
// trace names).
package node
