// Package labels names, in one place, the keys Slacker writes on things other
// programs or later runs read back: the labels of node volumes (what a volume is
// for, so that reconciliation and cleanup find their own), the annotations of
// Slacker images and store packs in registries, and the containerd snapshot labels
// the snapshotter reads. Changing a value here changes a format: docs/format.md
// lists them.
//
// It holds constants only.
package labels
