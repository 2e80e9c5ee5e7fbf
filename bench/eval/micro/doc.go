// Package micro is the evaluation's micro-benchmarks (`slacker-bench eval micro`),
// Slacker vs containerd + overlayfs in one run, from a cold node, Slacker in its
// default mode ("slacker": shared roots, whose first write to an image file copies
// the whole file up) and, unless left out, in block mode ("slacker-block": block
// clones, 4 KiB copy-on-write whatever the file's size):
//
//   - open latency by layer depth (Slacker Fig 11a): an image of 16 layers of 1,000
//     empty files each, all in one directory; with the page cache dropped before
//     every open, 10 files of each layer are opened in random order;
//   - 1-byte append latency by file size (Fig 11b, and HP-Mapper's copy-on-write
//     table): an image whose bottom layer holds one random file per size (4 KiB to
//     256 MiB by default) under a small top layer; after a stat of the file (so the
//     lookup is not counted, as HP-Mapper measures), the open for writing plus the
//     1-byte write, and the same with an fsync;
//   - second-run time (Fig 22): each HelloBench workload started twice on one node,
//     the first container on a cold node, the second right after; the time until
//     the second is ready.
//
// The images are made once into the evaluation's own OCI layout. It asserts nothing
// about the numbers.
package micro
