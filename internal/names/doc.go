// Package names is the embedded local name store, the default that needs no service:
// image names (normalized references such as docker.io/library/debian:latest or plain
// local names like debian:latest) mapped to image descriptors, and the conversion
// cache that maps OCI chain IDs to the snapshots made from them, so that images which
// share layers share snapshots and chunks.
//
// One JSON file per entry, replaced atomically and durably by package atomicfile
// (temp, fsync, rename, fsync of the directory); safe for several processes at once. It never touches the chunk store or a registry.
package names
