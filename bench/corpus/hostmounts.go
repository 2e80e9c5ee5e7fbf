package corpus

import (
	"path/filepath"
	"strings"

	"github.com/slacker-dev/slacker/internal/mount"
)

// hostMountsToDrop picks, from the mount table a helper's namespace was born with
// (a copy of the host's), the filesystems of the host's containers and volumes:
// FUSE filesystems, filesystems on loop devices, overlays, and namespace handles.
// A copy of such a mount keeps its filesystem alive after the host unmounts it,
// for as long as the helper runs: an ext4 on a loop device stays mounted, its
// last writes unflushed, its loop device busy; a containerd snapshot's overlay
// keeps its directories in use. Mounts that the job's own paths (keep) live on
// are never picked. The result is deepest first, the order in which to detach.
func hostMountsToDrop(table []mount.MountInfo, keep []string) []string {
	var out []string
	for _, m := range table {
		if !containerMount(m) || holdsAny(m.Target, keep) {
			continue
		}
		out = append(out, m.Target)
	}
	return out
}

func containerMount(m mount.MountInfo) bool {
	return m.FSType == "fuse" || strings.HasPrefix(m.FSType, "fuse.") || m.FSType == "fuseblk" ||
		m.FSType == "overlay" || m.FSType == "nsfs" || strings.HasPrefix(m.Source, "/dev/loop")
}

// holdsAny reports whether one of paths is target or below it.
func holdsAny(target string, paths []string) bool {
	for _, p := range paths {
		if p == "" {
			continue
		}
		p = filepath.Clean(p)
		if target == "/" || p == target || strings.HasPrefix(p, target+"/") {
			return true
		}
	}
	return false
}

// systemPaths are what the helper's tools need from the host, whatever the host
// mounted there (a host whose /usr is an overlay, say).
var systemPaths = []string{"/bin", "/sbin", "/lib", "/lib64", "/usr/bin", "/usr/sbin", "/usr/lib", "/usr/share",
	"/etc", "/tmp", "/var/tmp", "/dev", "/proc", "/sys"}

// keptPaths are the host paths the job reads or writes, and systemPaths.
func (job *helperJob) keptPaths() []string {
	paths := append([]string{job.Upper, job.Work, job.Merged, job.Result, job.CacheDir, job.Lists, job.Archives, job.Hello}, job.Lowers...)
	paths = append(paths, job.Debs...)
	return append(paths, systemPaths...)
}
