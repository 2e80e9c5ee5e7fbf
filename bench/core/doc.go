// Package core is the core benchmark (`slacker-bench core`), and the README's main
// job in its quick form: it builds real Debian images from packages (through the
// corpus builder, bench/corpus), publishes each to a local registry it starts, both as a
// Slacker image and as an ordinary OCI image, and then measures side by side, from a
// cold node each time and in shuffled order:
//
//   - pull time, and pull + run of `echo hello`, Slacker vs containerd + overlayfs;
//   - bytes each system moved for that run, as a share of the image;
//   - a 1-byte append to a 16 MiB file from the image (block-level copy-on-write vs
//     overlayfs's whole-file copy-up), with and without fsync;
//   - a sequential read of every file, cold and warm;
//   - slackerd's peak resident memory.
//
// It reports medians and ratios, prints a table, and writes every sample to JSON. It
// asserts nothing: benchmarks are not tests.
package core
