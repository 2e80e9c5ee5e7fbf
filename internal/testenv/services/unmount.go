package services

import (
	"golang.org/x/sys/unix"

	"github.com/slacker-dev/slacker/internal/mount"
)

// unmountUnder lazily unmounts every mount at or below dir, deepest first (what a
// stopped containerd or dockerd leaves: overlay snapshots, shm, bind mounts).
func unmountUnder(dir string) {
	ms, err := mount.Mounts(dir)
	if err != nil {
		return
	}
	for _, m := range ms {
		unix.Unmount(m.Target, unix.MNT_DETACH)
	}
}
