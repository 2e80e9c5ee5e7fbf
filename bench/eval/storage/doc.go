// Package storage is the evaluation's storage characterization (`slacker-bench eval
// storage`), after "Docker characterization on high performance SSDs": fio random
// reads and writes of 4 KiB, J jobs x queue depth D (32 x 32 by default, libaio,
// O_DIRECT), cold and warm, plus a random-read block-size sweep, on plain ext4 (a
// directory of the host's filesystem: the data-volume case), ext4, xfs and btrfs
// (with and without nodatacow) on loop devices of its own, containerd's overlayfs
// snapshot of an image, and Slacker's container root: in its default mode
// ("slacker": an overlay over the node's read-only mount of the image, ext4 on loop
// on FUSE), in block mode ("slacker-block": ext4 on loop on FUSE on a block clone),
// and in the default mode with a memory cache that holds every file
// ("slacker-cache"). On the Slacker roots the random reads run twice more, by where
// the data is: on the node (every file read whole first, so slackerd's cache keeps
// what it can) and only in the local store (slackerd's cache purged). Every stack
// holds the same files, taken from one synthetic image: in the container systems
// they are the image's files, read lazily by Slacker.
//
// It makes its loop files, filesystems and mounts under its work directory and
// removes them all when it ends, failed or not. It asserts nothing about the numbers.
package storage
