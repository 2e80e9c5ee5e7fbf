// Package launch starts containers of one image in the background for the
// evaluation's items that need more than the systems' Run (a container's process ID
// and network namespace, its output, its cgroup): on containerd with `ctr run`
// (snapshot, shim, runc), and on Slacker with the steps `slacker run` takes (a
// mounted root made from the image's snapshot in the system's container root mode,
// a runc bundle from the image's config, `runc run`). Both give the container an /etc/hosts, hostname and resolv.conf, as
// Docker and `slacker run` do, and optionally a cgroup under a parent of ours.
//
// The container itself (its run command watched in the background, its process,
// its exit, stopping and removing it) is the rig's Container, as the HelloBench
// harness's is; this package adds how the evaluation makes each system's containers
// and the watching of their output lines. The systems' daemons come from the rig.
package launch
