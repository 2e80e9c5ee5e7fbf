// Package rig is the test rig every benchmark of Slacker runs on, the one place for
// what the core benchmark, HelloBench and the evaluation share:
//
//   - the container systems they compare, each driven through its real user-facing
//     tools so that a measured time is what a user would wait: "slacker" (slackerd
//     and the slacker CLI; its default container roots, shared), "slacker-block"
//     (the same with --container-root block: block clones), "overlayfs" (containerd
//     1.6 with its overlayfs snapshotter, driven by ctr), containerd with another
//     snapshotter, containerd with slackerd's snapshotter ("slacker-containerd"),
//     and containerd with stargz-snapshotter ("stargz", eStargz images, run by
//     bin/slacker-stargz from bench/stargz; FileWatch records the files a run
//     reads, to optimize them as ctr-remote optimize does); both remote
//     snapshotters are pulled by one client, slacker-stargz pull, each with its
//     own layer labels. Each System publishes an image to a
//     registry, makes its node cold (fresh state, page cache dropped), pulls, runs
//     and mounts a writable container root; a Starter starts a container in the
//     background, and StartContainer with a Container watches one, whoever made it;
//   - an emulated network link (Link) between the node and a registry or store,
//     and entering a container's network namespace;
//   - the record of a run (Record: date, machine, commit, command), results files
//     (WriteJSON, ReadJSON), progress lines, and finding the slacker and slackerd
//     binaries.
//
// The daemons it starts besides slackerd (containerd, the registry) come from
// internal/testenv/services. It never asserts anything about the numbers, and it
// holds no benchmark's own schema or arithmetic: packages that report them decide.
package rig
