// Package fstree walks directory trees and compares them: the entry set, each entry's
// type, mode (special bits included), owner, size and sha256 of regular files, symlink
// targets, device numbers, the xattrs the caller asks for, hardlink groups (which paths
// share an inode) and, when asked, modification times. Compare returns precise,
// human-readable differences, so a test can show why a snapshot unpacked by Slacker
// differs from the same image unpacked by umoci.
//
// It only reads, and it must never follow a symlink (not even in a parent component:
// every step is an *at call on the parent's fd with O_NOFOLLOW), never open a device
// node, fifo or socket (a past incident: reading /dev/full during a copy filled a disk),
// and never change a timestamp it can avoid (files are opened O_NOATIME when allowed).
package fstree
