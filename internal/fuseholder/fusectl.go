package fuseholder

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Where the kernel says what is mounted, and where fusectl shows FUSE connections.
const (
	defaultMountinfo = "/proc/self/mountinfo"
	defaultFusectl   = "/sys/fs/fuse/connections"
)

// mountEntry is the part of a mountinfo line the holder needs.
type mountEntry struct {
	Major, Minor uint32 // st_dev of the mounted filesystem
	MountPoint   string // unescaped
	FSType       string
}

// parseMountinfo decodes /proc/<pid>/mountinfo (proc(5)): per line, mount ID,
// parent ID, major:minor, root, mount point, options, optional fields, "-",
// filesystem type, source, super options. Paths have space, tab, newline and
// backslash escaped as \ooo.
func parseMountinfo(b []byte) ([]mountEntry, error) {
	var out []mountEntry
	for n, line := range bytes.Split(b, []byte{'\n'}) {
		if len(line) == 0 {
			continue
		}
		// Single spaces separate the fields (strings.Fields would also split at
		// Unicode spaces, which the kernel leaves in paths).
		f := strings.Split(string(line), " ")
		sep := -1
		for i := 6; i < len(f); i++ {
			if f[i] == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+1 >= len(f) {
			return nil, fmt.Errorf("mountinfo line %d: no filesystem type after the fields", n+1)
		}
		majStr, minStr, ok := strings.Cut(f[2], ":")
		if !ok {
			return nil, fmt.Errorf("mountinfo line %d: device %q is not major:minor", n+1, f[2])
		}
		maj, err1 := strconv.ParseUint(majStr, 10, 32)
		mnr, err2 := strconv.ParseUint(minStr, 10, 32)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("mountinfo line %d: device %q is not major:minor", n+1, f[2])
		}
		mp, err := unescapeMountinfo(f[4])
		if err != nil {
			return nil, fmt.Errorf("mountinfo line %d: mount point: %w", n+1, err)
		}
		out = append(out, mountEntry{Major: uint32(maj), Minor: uint32(mnr), MountPoint: mp, FSType: f[sep+1]})
	}
	return out, nil
}

// unescapeMountinfo undoes the kernel's \ooo escapes of a mountinfo path.
func unescapeMountinfo(s string) (string, error) {
	if !strings.Contains(s, `\`) {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			b.WriteByte(s[i])
			continue
		}
		if i+4 > len(s) {
			return "", fmt.Errorf("%q: cut escape", s)
		}
		v, err := strconv.ParseUint(s[i+1:i+4], 8, 8)
		if err != nil {
			return "", fmt.Errorf("%q: bad escape %q", s, s[i:i+4])
		}
		b.WriteByte(byte(v))
		i += 3
	}
	return b.String(), nil
}

// isFUSE reports whether a mountinfo filesystem type is FUSE's: fuse, fuse.NAME
// (a subtype), fuseblk or fuseblk.NAME.
func isFUSE(fstype string) bool {
	base, _, _ := strings.Cut(fstype, ".")
	return base == "fuse" || base == "fuseblk"
}

// connection is what the holder learns, at Hold, to end a FUSE connection later
// without touching its mount.
type connection struct {
	Name  string   // fusectl directory name; "" when the mount was not found
	Abort *os.File // the connection's fusectl abort file, open for writing; nil when unavailable
	Why   string   // why Abort is nil
}

// findConnection finds the FUSE connection mounted at mountpoint and opens its
// fusectl abort file. It reads mountinfo instead of stat-ing the mountpoint: a
// stat of a FUSE mount's root may send GETATTR to its server, and a server that
// hands its session in before it serves would deadlock with it. fusectl names a
// connection by the kernel's dev_t of its superblock, major<<20|minor: the
// mountpoint's minor device number for FUSE's anonymous devices (major 0).
//
// The abort file is opened now and kept: once the connection is gone the kernel
// detaches the file from it (writes do nothing), so writing to it later can never
// abort another connection that reused the number.
func findConnection(mountinfoPath, fusectlDir, mountpoint string) connection {
	b, err := os.ReadFile(mountinfoPath)
	if err != nil {
		return connection{Why: fmt.Sprintf("read %s: %v", mountinfoPath, err)}
	}
	entries, err := parseMountinfo(b)
	if err != nil {
		return connection{Why: fmt.Sprintf("%s: %v", mountinfoPath, err)}
	}
	want := filepath.Clean(mountpoint)
	var found *mountEntry
	for i := range entries {
		// The last one: a later mount on the same path hides the earlier ones.
		if entries[i].MountPoint == want && isFUSE(entries[i].FSType) {
			found = &entries[i]
		}
	}
	if found == nil {
		return connection{Why: "no FUSE mount at the mountpoint in " + mountinfoPath}
	}
	name := strconv.FormatUint(uint64(found.Major)<<20|uint64(found.Minor), 10)
	abortPath := filepath.Join(fusectlDir, name, "abort")
	f, err := os.OpenFile(abortPath, os.O_WRONLY, 0)
	if err != nil {
		why := fmt.Sprintf("open %s: %v", abortPath, err)
		if errors.Is(err, fs.ErrNotExist) {
			why = fmt.Sprintf("%s does not exist (fusectl not mounted on %s)", abortPath, fusectlDir)
		}
		return connection{Name: name, Why: why}
	}
	return connection{Name: name, Abort: f}
}

// abort ends the connection through fusectl, if its abort file was opened.
func (c *connection) abort() error {
	if c.Abort == nil {
		return nil
	}
	if _, err := c.Abort.Write([]byte("1")); err != nil {
		return fmt.Errorf("write 1 to %s: %w", c.Abort.Name(), err)
	}
	return nil
}

func (c *connection) close() {
	if c.Abort != nil {
		c.Abort.Close()
		c.Abort = nil
	}
}
