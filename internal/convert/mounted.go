package convert

import (
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// ext4Magic is EXT4_SUPER_MAGIC from linux/magic.h.
const ext4Magic = 0xEF53

// mountedFS returns the device of the ext4 filesystem mounted at dir, or an error
// if dir is not the root of one: a layer applied anywhere else would go to the
// wrong filesystem and the layer's snapshot would silently lack it.
func mountedFS(dir string) (uint64, error) {
	var st, parent unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return 0, fmt.Errorf("the volume's mountpoint: %w", err)
	}
	if err := unix.Stat(filepath.Dir(dir), &parent); err != nil {
		return 0, fmt.Errorf("the volume's mountpoint: %w", err)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		return 0, fmt.Errorf("the volume's mountpoint: %w", err)
	}
	if st.Dev == parent.Dev || fs.Type != ext4Magic {
		return 0, fmt.Errorf("the volume's mountpoint %s is not the root of a mounted ext4 filesystem (filesystem type %#x)", dir, fs.Type)
	}
	return st.Dev, nil
}
