package fuseholder

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/slacker-dev/slacker/internal/testutil"
)

// mountFUSE mounts a FUSE file system on a new directory and answers the
// kernel's INIT. It returns the /dev/fuse descriptor, the mountpoint and the INIT
// request. Nothing serves the connection after that.
func mountFUSE(t *testing.T) (*os.File, string, []byte) {
	t.Helper()
	testutil.RequireRoot(t)
	testutil.RequireFile(t, "/dev/fuse")
	mp := t.TempDir()
	fd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	dev := os.NewFile(uintptr(fd), "/dev/fuse")
	t.Cleanup(func() { dev.Close() })
	opts := fmt.Sprintf("fd=%d,rootmode=40000,user_id=0,group_id=0", fd)
	if err := unix.Mount("fuseholdertest", mp, "fuse.fuseholdertest", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		testutil.Missing(t, "mounting FUSE ("+err.Error()+")")
	}
	// Registered after TempDir, so it runs before its removal.
	t.Cleanup(func() { unix.Unmount(mp, unix.MNT_DETACH) })
	init := readRequest(t, dev)
	answerInit(t, dev, init)
	return dev, mp, init
}

// connectionName is the fusectl name of the FUSE connection mounted on mp, read
// from this process's mountinfo.
func connectionName(t *testing.T, mp string) string {
	t.Helper()
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	es, err := parseMountinfo(mi)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if e.MountPoint == mp {
			return fmt.Sprint(e.Major<<20 | e.Minor)
		}
	}
	t.Fatalf("%s not in mountinfo", mp)
	return ""
}

// statInBackground stats a name on the unserved mount, which blocks until the
// connection ends, and checks that it does block.
func statInBackground(t *testing.T, mp string) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		var st unix.Stat_t
		done <- unix.Stat(filepath.Join(mp, "x"), &st)
	}()
	select {
	case err := <-done:
		t.Fatalf("a stat on the unserved mount returned: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	return done
}

// waitStatFails waits, at most 5 s, for the stat to fail.
func waitStatFails(t *testing.T, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		if err == nil {
			t.Error("the stat on the ended connection succeeded")
		}
		t.Logf("stat after the connection ended: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("the stat still waits 5s after the owner went")
	}
}

// TestFUSEConnectionEndsAtTimeout runs the holder on a real FUSE connection: the
// test hands the session in, starts a stat on the mount (a request nobody will
// answer) and closes its own descriptor. When the timeout passes the holder
// closes the last descriptor: the kernel ends the connection and the stat returns
// an error instead of blocking forever.
func TestFUSEConnectionEndsAtTimeout(t *testing.T) {
	dev, mp, init := mountFUSE(t)
	h := startHolder(t, Options{Timeout: 300 * time.Millisecond})
	a := dial(t, h.path)
	if err := a.Hold(testCtx(t), Session{FD: dev, Init: init, Mountpoint: mp}); err != nil {
		t.Fatal(err)
	}
	if l := h.log.wait(t, "fuse-session-held", 1); l.attrs["fusectl"] != connectionName(t, mp) {
		t.Errorf("held log: %v, want fusectl %q", l.attrs, connectionName(t, mp))
	}
	stat := statInBackground(t, mp)
	dev.Close()
	a.Close()
	h.log.wait(t, "fuse-owner-gone", 1)
	waitStatFails(t, stat)
	if err := h.wait(t); err != nil {
		t.Fatal(err)
	}
	h.log.wait(t, "fuse-connection-ended", 1)
}

// TestFUSEAbortWithLeakedDescriptor: a descriptor of the connection leaked
// elsewhere (here the test keeps one) would keep it alive after the holder closes
// its own; the holder aborts it through fusectl (mounted for the test on a
// directory of its own), so the waiting stat fails all the same.
func TestFUSEAbortWithLeakedDescriptor(t *testing.T) {
	dev, mp, init := mountFUSE(t)
	ctl := t.TempDir()
	if err := unix.Mount("fusectl", ctl, "fusectl", 0, ""); err != nil {
		testutil.Missing(t, "mounting fusectl ("+err.Error()+")")
	}
	t.Cleanup(func() { unix.Unmount(ctl, unix.MNT_DETACH) })
	h := startHolder(t, Options{Timeout: 300 * time.Millisecond, fusectl: ctl})
	a := dial(t, h.path)
	if err := a.Hold(testCtx(t), Session{FD: dev, Init: init, Mountpoint: mp}); err != nil {
		t.Fatal(err)
	}
	if l := h.log.wait(t, "fuse-session-held", 1); l.attrs["fusectl"] != connectionName(t, mp) || l.attrs["fusectl_unavailable"] != "" {
		t.Errorf("held log: %v", l.attrs)
	}
	leaked, err := dupFile(dev)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { leaked.Close() })
	stat := statInBackground(t, mp)
	dev.Close()
	a.Close()
	waitStatFails(t, stat)
	if l := h.log.wait(t, "fuse-connection-ended", 1); l.attrs["fusectl_aborted"] != "yes" {
		t.Errorf("ended log: %v", l.attrs)
	}
	// The leaked descriptor is of an aborted connection now.
	if _, err := leaked.Read(make([]byte, 64<<10)); !errors.Is(err, unix.ENODEV) {
		t.Errorf("read of the leaked descriptor: %v, want ENODEV (connection aborted)", err)
	}
	if err := h.wait(t); err != nil {
		t.Fatal(err)
	}
}

// readRequest reads one request from /dev/fuse (it takes a buffer of at least
// 8 KiB).
func readRequest(t *testing.T, dev *os.File) []byte {
	t.Helper()
	buf := make([]byte, 64<<10)
	n, err := dev.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	if n < 40+8 || binary.LittleEndian.Uint32(buf[4:]) != 26 { // FUSE_INIT
		t.Fatalf("first request: %d bytes, opcode %d; want FUSE_INIT", n, binary.LittleEndian.Uint32(buf[4:]))
	}
	return buf[:n]
}

// answerInit answers INIT with protocol 7.31 and no capability.
func answerInit(t *testing.T, dev *os.File, init []byte) {
	t.Helper()
	out := make([]byte, 16+64)
	le := binary.LittleEndian
	le.PutUint32(out[0:], uint32(len(out)))    // fuse_out_header.len
	le.PutUint64(out[8:], le.Uint64(init[8:])) // .unique
	o := out[16:]                              // fuse_init_out
	le.PutUint32(o[0:], 7)                     // major
	le.PutUint32(o[4:], 31)                    // minor
	le.PutUint32(o[8:], le.Uint32(init[48:]))  // max_readahead, as asked
	le.PutUint32(o[20:], 4096)                 // max_write
	le.PutUint32(o[24:], 1)                    // time_gran
	if _, err := dev.Write(out); err != nil {
		t.Fatal(errors.Join(errors.New("answer INIT"), err))
	}
}
