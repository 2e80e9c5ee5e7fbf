// Package hpmapper is the evaluation's HP-Mapper experiment (`slacker-bench eval
// hpmapper`): N containers (64) started at once from one image on a cold node,
// Slacker vs containerd + overlayfs, Slacker in its default mode ("slacker": shared
// roots, one read-only mount of the image per node) and, unless left out, in block
// mode ("slacker-block": a block clone and an ext4 per container): the time until
// all are ready, the bytes read from the disk (and, for Slacker, fetched from its
// store), and the memory used (page cache, and the daemon's own cache), then again
// with the containers' memory limited.
//
// Every process of a system's node runs in a cgroup v1 tree of ours
// (/slacker-eval-hp/SYSTEM): the daemon (slackerd, or containerd with its shims) in
// .../daemon, moved there right after it starts, and each container in .../c/ID
// (runc's cgroupsPath; `ctr run --cgroup` for containerd, and for Slacker the steps
// of `slacker run` with that one difference). The memory controller's totals give
// the page cache and anonymous memory of the whole node; a blkio throttling rule no
// disk reaches makes the kernel count the bytes each cgroup reads and writes. The
// memory limit applies to the containers' cgroup (.../c), as a cgroup limit of a
// tenant would; the daemon's memory is measured but not limited.
//
// It removes its containers, volumes and cgroups when it ends, failed or not. It
// asserts nothing about the numbers.
package hpmapper
