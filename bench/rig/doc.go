// Package system drives the container systems that Slacker's benchmarks compare, each
// through its real user-facing tools, so a measured time is what a user would wait:
// "slacker" (slackerd plus the slacker CLI) and "containerd" (containerd 1.6 with
// its overlayfs snapshotter, driven by ctr). Each System publishes an image to a
// registry, makes its node cold (fresh state, page cache dropped), pulls, runs, and
// mounts a writable container root for micro-benchmarks.
//
// It never asserts anything about the numbers; packages that report them decide.
package rig
