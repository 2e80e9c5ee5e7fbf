package convert

import (
	"strings"
	"testing"
)

// TestMountedFSRefusesWhatIsNotAnExt4Mount: a layer is applied only into the root
// of a mounted ext4 filesystem (the volume's); a plain directory (an unmounted
// mountpoint) or another filesystem type is refused. The accepting case runs in
// every conversion test.
func TestMountedFSRefusesWhatIsNotAnExt4Mount(t *testing.T) {
	for _, tc := range []struct{ name, dir, want string }{
		{"plain directory", t.TempDir(), "not the root of a mounted ext4 filesystem"},
		{"proc", "/proc", "not the root of a mounted ext4 filesystem"},
		{"missing", "/nonexistent/mnt", "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := mountedFS(tc.dir); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("mountedFS(%s) = %v, want an error saying %q", tc.dir, err, tc.want)
			}
		})
	}
}
