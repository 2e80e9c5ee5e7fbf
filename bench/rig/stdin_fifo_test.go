package rig

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// holdsFIFOForWriting tells a FIFO held for writing from one held only for
// reading or by an O_PATH handle (as containerd's fifo package keeps one), which
// is what feedStdin waits on before it lets ctr's input end.
func TestHoldsFIFOForWriting(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c1-stdin")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	pid := os.Getpid()
	check := func(want bool) {
		t.Helper()
		got, err := holdsFIFOForWriting(pid, "c1-stdin")
		if err != nil || got != want {
			t.Fatalf("holdsFIFOForWriting = %v, %v; want %v", got, err, want)
		}
	}
	check(false)
	handle, err := os.OpenFile(path, unix.O_PATH, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer handle.Close()
	r, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	check(false)
	if got, _ := holdsFIFOForWriting(pid, "other-stdin"); got {
		t.Fatal("matched another FIFO")
	}
	w, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	check(true)
	w.Close()
	check(false)
}
