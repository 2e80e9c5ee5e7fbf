// Package storage is the evaluation's storage characterization (`slacker-bench eval
// storage`), after "Docker characterization on high performance SSDs": fio random
// reads and writes of 4 KiB, J jobs x queue depth D (32 x 32 by default, libaio,
// O_DIRECT), cold and warm, plus a random-read block-size sweep, on plain ext4 (a
// directory of the host's filesystem: the data-volume case), ext4, xfs and btrfs
// (with and without nodatacow) on loop devices of its own, containerd's overlayfs
// snapshot of an image, and Slacker's container root (ext4 on loop on FUSE). Every
// stack holds the same files, taken from one synthetic image: in the two container
// systems they are the image's files, read lazily by Slacker.
//
// It makes its loop files, filesystems and mounts under its work directory and
// removes them all when it ends, failed or not. It asserts nothing about the numbers.
package storage
