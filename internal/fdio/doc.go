// Package fdio reads files, links, directories and extended attributes through
// file descriptors the caller already holds, never by path from the root, so that
// code walking an untrusted tree (package fstree comparing trees, package archive
// writing a layer from one) follows no symlink it did not choose to.
//
// It is a leaf: no state, no knowledge of layers or trees. It never follows a
// final symlink, and never closes a descriptor it was given.
package fdio
