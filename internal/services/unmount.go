package services

import (
	"bufio"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// unmountUnder lazily unmounts every mount at or below dir, deepest first (what a
// stopped containerd or dockerd leaves: overlay snapshots, shm, bind mounts).
func unmountUnder(dir string) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var targets []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && (fields[4] == dir || strings.HasPrefix(fields[4], dir+"/")) {
			targets = append(targets, fields[4])
		}
	}
	f.Close()
	for i := len(targets) - 1; i >= 0; i-- {
		unix.Unmount(targets[i], unix.MNT_DETACH)
	}
}
