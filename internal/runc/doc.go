// Package runc runs containers with runc (Debian's): it turns an image
// configuration and a mounted root filesystem into an OCI runtime spec with Docker's
// defaults (namespaces, capabilities, masked paths, /proc, /dev, /sys mounts, and
// generated /etc/hosts, hostname and resolv.conf bound in from the container's state
// directory, no tmpfs on /run), resolves users and groups from the container's own
// /etc/passwd and /etc/group without leaving its root, and invokes `runc run` with the caller's stdio, passing the exit
// code through.
//
// It never mounts the root filesystem (package node does) and keeps no state of its
// own beyond runc's state directory.
package runc
