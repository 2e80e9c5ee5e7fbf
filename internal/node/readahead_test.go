package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/slacker-dev/slacker/internal/store/local"
)

// TestVolumeReadahead: with Config.VolumeReadahead, the loop device of every
// mounted volume, read-write and read-only, reads ahead that much; without it,
// DefaultVolumeReadahead. A loop device keeps the readahead its previous user
// set, so each device is set to 2.5 MiB after its check: the next mount, most
// often of the same device, must not inherit it.
func TestVolumeReadahead(t *testing.T) {
	requirePrivileged(t)
	ctx := context.Background()
	for _, ra := range []int64{0, 16 << 10} {
		dir := t.TempDir()
		st, err := local.Open(filepath.Join(dir, "store"))
		if err != nil {
			t.Fatal(err)
		}
		n, err := Open(ctx, Config{Root: filepath.Join(dir, "node"), Store: st, CacheBytes: 256 << 20, DefaultSize: 1 << 30,
			VolumeReadahead: ra, Logger: testLogger()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close(ctx) })
		blank, err := n.MakeFilesystem(ctx, 64<<20)
		if err != nil {
			t.Fatal(err)
		}
		for i, readOnly := range []bool{false, true, false, true} {
			id := fmt.Sprintf("v%d", i)
			if _, err := n.CreateVolume(ctx, CreateOptions{ID: id, Snapshot: blank.ID}); err != nil {
				t.Fatal(err)
			}
			v, err := n.MountVolume(ctx, id, readOnly)
			if err != nil {
				t.Fatal(err)
			}
			setting := filepath.Join("/sys/block", filepath.Base(v.Device), "queue", "read_ahead_kb")
			b, err := os.ReadFile(setting)
			if err != nil {
				t.Fatal(err)
			}
			kb, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			want := ra >> 10
			if ra == 0 {
				want = DefaultVolumeReadahead >> 10
			}
			if kb != want {
				t.Errorf("readahead %d, read-only %v: %s reads ahead %d KiB, want %d", ra, readOnly, v.Device, kb, want)
			}
			if err := os.WriteFile(setting, []byte("2560"), 0); err != nil {
				t.Fatal(err)
			}
			if err := n.UnmountVolume(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
	}
}
