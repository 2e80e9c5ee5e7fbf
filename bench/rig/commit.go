package rig

import (
	"os/exec"
	"runtime/debug"
	"strings"
)

// Commit is the source's short git commit, with "-dirty" when the tree had changes:
// from the build's VCS stamp, else from git in the working directory ("unknown"
// outside a checkout).
func Commit() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		var rev string
		var dirty bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if len(rev) >= 7 {
			if dirty {
				return rev[:7] + "-dirty"
			}
			return rev[:7]
		}
	}
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
		c += "-dirty"
	}
	return c
}
