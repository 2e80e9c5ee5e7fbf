package testutil

import (
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ResidentPages returns how many of the 4 KiB pages holding bytes [off, end) of
// the file at path are in the page cache (end < 0: to the end of the file). It
// asks mincore of a mapping of the file, which reads nothing.
func ResidentPages(t testing.TB, path string, off, end int64) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if end < 0 || end > fi.Size() {
		end = fi.Size()
	}
	if fi.Size() == 0 || off >= end {
		return 0
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(fi.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	vec := make([]byte, (fi.Size()+4095)/4096)
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)),
		uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatal(errno)
	}
	n := 0
	for _, v := range vec[off/4096 : (end+4095)/4096] {
		n += int(v & 1)
	}
	return n
}
