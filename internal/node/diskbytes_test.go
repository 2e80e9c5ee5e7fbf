package node

import (
	"os"
	"path/filepath"
	"testing"
)

// TestDiskBytesCountsHardLinksOnce: a file of three names takes its disk once in
// a local image's size; two files of the same size take it twice.
func TestDiskBytesCountsHardLinksOnce(t *testing.T) {
	dir := t.TempDir()
	data := make([]byte, 1<<20)
	for i := range data {
		data[i] = byte(i)
	}
	for _, n := range []string{"a", "b"} {
		if err := os.WriteFile(filepath.Join(dir, n), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	two, err := diskBytes(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"a2", "a3"} {
		if err := os.Link(filepath.Join(dir, "a"), filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
	linked, err := diskBytes(dir)
	if err != nil {
		t.Fatal(err)
	}
	if two < 2<<20 || linked != two {
		t.Fatalf("two files of 1 MiB take %d bytes; with two more names for one of them, %d (want the same)", two, linked)
	}
}
