package corpus

import (
	"regexp"
	"slices"
	"strings"
)

// CmdNeeds is what a workload's cmd needs from its image, found statically so a
// build can report an image that cannot run before the harness tries it.
type CmdNeeds struct {
	// Programs are looked up on the image's PATH (or taken as paths when they
	// contain a slash): cmd[0], and for `sh -c SCRIPT` the first word of every
	// simple command of the script that is not a shell builtin.
	Programs []string
	// Files are absolute paths named in arguments or in the script that must
	// exist in the image. Paths under /tmp, /var/tmp, /run, /dev, /proc and /sys
	// are made at run time and are not included, nor are paths the script
	// creates with mkdir or touch first, nor paths followed by an expansion.
	Files []string
}

var (
	shells   = []string{"sh", "/bin/sh", "bash", "/bin/bash", "/usr/bin/sh", "/usr/bin/bash", "dash"}
	builtins = []string{"cd", ".", "exec", "echo", "export", "set", "true", "false", "test", "[", "exit",
		"umask", "ulimit", "source", "trap", "wait", "read", "printf", "shift", "unset", "eval", ":"}
	separators = regexp.MustCompile(`&&|\|\||[;|&\n]`)
	absPath    = regexp.MustCompile(`(?:^|[\s="'])(/[A-Za-z0-9._+/-]*[A-Za-z0-9._+-])`)
	runtimeDir = []string{"/tmp", "/var/tmp", "/run", "/dev", "/proc", "/sys"}
	envAssign  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)
)

// AnalyzeCmd returns what cmd needs from its image. It understands plain argv
// and `sh -c SCRIPT` with simple commands joined by && || ; | and &; anything
// cleverer (quotes spanning separators, functions, subshells) may be missed,
// never wrongly flagged, since only plain words are checked.
func AnalyzeCmd(cmd []string) CmdNeeds {
	var n CmdNeeds
	if len(cmd) == 0 {
		return n
	}
	n.Programs = append(n.Programs, cmd[0])
	if slices.Contains(shells, cmd[0]) && len(cmd) >= 3 && cmd[1] == "-c" {
		script := cmd[2]
		created := map[string]bool{}
		for _, seg := range separators.Split(script, -1) {
			words := strings.Fields(seg)
			for len(words) > 0 && (envAssign.MatchString(words[0]) || words[0] == "exec") {
				words = words[1:]
			}
			if len(words) == 0 {
				continue
			}
			w := words[0]
			makes := w == "mkdir" || w == "touch"
			for _, p := range extractPaths(seg) {
				switch {
				case makes:
					// Paths a script makes need not be in the image.
					created[p] = true
				case !created[p] && p != w && !slices.Contains(n.Files, p):
					n.Files = append(n.Files, p)
				}
			}
			if slices.Contains(builtins, w) || strings.ContainsAny(w, "$`'\"(){}<>*?") || isRuntimePath(w) {
				continue
			}
			if !slices.Contains(n.Programs, w) {
				n.Programs = append(n.Programs, w)
			}
		}
	} else {
		for _, a := range cmd[1:] {
			for _, p := range extractPaths(a) {
				if !slices.Contains(n.Files, p) {
					n.Files = append(n.Files, p)
				}
			}
		}
	}
	return n
}

func extractPaths(s string) []string {
	var out []string
	for _, m := range absPath.FindAllStringSubmatchIndex(s, -1) {
		p := s[m[2]:m[3]]
		// A path followed by a shell expansion or glob is not a plain path.
		if m[3] < len(s) && strings.ContainsRune("$*?", rune(s[m[3]])) {
			continue
		}
		if !isRuntimePath(p) {
			out = append(out, p)
		}
	}
	return out
}

// isRuntimePath reports whether p is under a directory that only exists, or
// only gets its content, when the container runs.
func isRuntimePath(p string) bool {
	for _, d := range runtimeDir {
		if p == d || strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}
