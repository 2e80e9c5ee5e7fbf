package fusefs_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/slacker-dev/slacker/internal/fusefs"
	"github.com/slacker-dev/slacker/internal/testutil"
)

// The helper server: this test binary, run with FUSEFS_SERVE set, serves one file
// (a plain local file standing in for a volume, each read delayed so that some are
// always in flight) on a FUSE connection: a new one (FUSEFS_SERVE=mount, whose
// descriptor and INIT it sends back on descriptor 3) or the one it is given
// (FUSEFS_SERVE=resume: descriptor 3 and FUSEFS_INIT). It says "ready" on stdout
// and serves until killed.
func TestMain(m *testing.M) {
	if mode := os.Getenv("FUSEFS_SERVE"); mode != "" {
		if err := serveHelper(mode); err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			os.Exit(1)
		}
		select {}
	}
	os.Exit(m.Run())
}

// fileVolume is a volume kept in a local file.
type fileVolume struct {
	f     *os.File
	size  int64
	delay time.Duration
}

func (v *fileVolume) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	time.Sleep(v.delay)
	return v.f.ReadAt(p, off)
}
func (v *fileVolume) WriteAt(ctx context.Context, p []byte, off int64) (int, error) {
	return v.f.WriteAt(p, off)
}
func (v *fileVolume) Zero(ctx context.Context, off, n int64) error {
	return unix.Fallocate(int(v.f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
}
func (v *fileVolume) Sync(ctx context.Context) error { return v.f.Sync() }
func (v *fileVolume) Size() int64                    { return v.size }

func serveHelper(mode string) error {
	mnt, backing := os.Getenv("FUSEFS_MOUNT"), os.Getenv("FUSEFS_FILE")
	f, err := os.OpenFile(backing, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	st, err := f.Stat()
	if err != nil {
		return err
	}
	vol := &fileVolume{f: f, size: st.Size(), delay: 2 * time.Millisecond}
	if os.Getenv("FUSEFS_CHURN") != "" {
		// Requests at full speed, and a heap given back to the system every
		// millisecond: go-fuse's request buffers are often new, untouched memory.
		vol.delay = 0
		go func() {
			for {
				debug.FreeOSMemory()
				time.Sleep(time.Millisecond)
			}
		}()
	}
	var fsys *fusefs.FS
	ch := os.NewFile(3, "channel")
	switch mode {
	case "mount":
		if fsys, err = fusefs.Mount(mnt, fusefs.Options{}); err != nil {
			return err
		}
		s, err := fsys.Session()
		if err != nil {
			return err
		}
		if _, _, err := unix.Recvfrom(int(ch.Fd()), make([]byte, 1), 0); err != nil { // wait for the parent
			return err
		}
		if err := unix.Sendmsg(int(ch.Fd()), s.Init, unix.UnixRights(int(s.Dev.Fd())), nil, 0); err != nil {
			return err
		}
		s.Dev.Close()
	case "resume":
		// Started before the first server dies (a fork of a process with files of
		// the mount open while nobody serves it can wait for good: the child's
		// exec closes them): it takes over once told to, on stdin.
		if _, err := os.Stdin.Read(make([]byte, 1)); err != nil {
			return err
		}
		init, err := hex.DecodeString(os.Getenv("FUSEFS_INIT"))
		if err != nil {
			return err
		}
		if fsys, err = fusefs.Resume(mnt, fusefs.Session{Dev: ch, Init: init}, fusefs.Options{}); err != nil {
			return err
		}
	}
	if _, err := fsys.Add("v", vol, fusefs.FileOptions{Generation: 7}); err != nil {
		return err
	}
	fsys.Serve()
	fmt.Println("ready")
	return nil
}

// helper is a helper server process.
type helper struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	ready chan bool
}

// startHelper starts the helper server; a "resume" one waits for resume.
func startHelper(t *testing.T, mode, mnt, backing string, extra *os.File, env ...string) *helper {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append(env, "FUSEFS_SERVE="+mode, "FUSEFS_MOUNT="+mnt, "FUSEFS_FILE="+backing)...)
	cmd.ExtraFiles = []*os.File{extra}
	cmd.Stderr = os.Stderr
	cmd.Dir = "/" // never a directory of the mount
	h := &helper{cmd: cmd, ready: make(chan bool, 1)}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if h.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	go func() {
		sc := bufio.NewScanner(out)
		h.ready <- sc.Scan() && sc.Text() == "ready"
		io.Copy(io.Discard, out)
	}()
	return h
}

// resume tells a "resume" helper to take over and waits until it serves.
func (h *helper) resume(t *testing.T) {
	t.Helper()
	if _, err := h.stdin.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	select {
	case ok := <-h.ready:
		if !ok {
			t.Fatal("the second server failed to take over")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the second server did not take over in 20s")
	}
}

// writeBacking writes size bytes of a pattern to path, the file a helper serves,
// and returns them.
func writeBacking(t *testing.T, path string, size int) []byte {
	t.Helper()
	content := make([]byte, size)
	for i := range content {
		content[i] = byte(i*7 + i>>12)
	}
	if err := os.WriteFile(path, content, 0o600); err != nil {
		t.Fatal(err)
	}
	return content
}

// startFirstServer starts a helper that mounts mnt and serves backing, and
// returns it with what a holder keeps: a descriptor of the connection and the
// kernel's INIT. The connection is aborted and unmounted at the end of the test.
// It returns once the file is served.
func startFirstServer(t *testing.T, mnt, backing string, env ...string) (*helper, *os.File, []byte) {
	t.Helper()
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ours, theirs := os.NewFile(uintptr(pair[0]), "channel"), os.NewFile(uintptr(pair[1]), "channel")
	defer ours.Close()
	first := startHelper(t, "mount", mnt, backing, theirs, env...)
	theirs.Close()
	if _, err := ours.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	initBuf, oob := make([]byte, 256), make([]byte, unix.CmsgSpace(4))
	k, oobn, _, _, err := unix.Recvmsg(int(ours.Fd()), initBuf, oob, 0)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		t.Fatalf("no descriptor from the first server: %v", err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		t.Fatalf("no descriptor from the first server: %v", err)
	}
	dev := os.NewFile(uintptr(fds[0]), "/dev/fuse") // the holder's part
	t.Cleanup(func() { dev.Close() })
	var st unix.Stat_t
	if err := unix.Stat(mnt, &st); err != nil {
		t.Fatal(err)
	}
	minor := unix.Minor(st.Dev)
	t.Cleanup(func() {
		abortConnection(t, minor) // whatever happened, nothing waits on the mount
		unix.Unmount(mnt, unix.MNT_DETACH)
	})
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(mnt, "v")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first server did not serve the file")
		}
	}
	return first, dev, append([]byte(nil), initBuf[:k]...)
}

// abortConnection ends the FUSE connection of the mount with device minor dev
// through fusectl, so that nothing waits on it for good. fusectl is mounted for
// it on a directory of its own, and unmounted after.
func abortConnection(t *testing.T, minor uint32) {
	dir, err := os.MkdirTemp("", "fusectl-")
	if err != nil {
		t.Error(err)
		return
	}
	defer os.Remove(dir)
	if err := unix.Mount("fusectl", dir, "fusectl", 0, ""); err != nil {
		t.Errorf("mount fusectl: %v", err)
		return
	}
	defer unix.Unmount(dir, unix.MNT_DETACH)
	os.WriteFile(filepath.Join(dir, strconv.Itoa(int(minor)), "abort"), []byte("1"), 0)
}

// TestResumeAfterKill serves a file from one process, kills it with SIGKILL while
// readers and a writer use the file (O_DIRECT, each request answered after 2 ms:
// some are always in flight), and has a second process take the connection over
// from the descriptor and INIT the first handed out (what slackerd's holder
// keeps). No reader or writer sees an error or a wrong byte: the requests in
// flight at the kill are answered by the second process (FUSE_NOTIFY_RESEND).
func TestResumeAfterKill(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireFile(t, "/dev/fuse")
	dir := t.TempDir()
	mnt := filepath.Join(dir, "fuse")
	backing := filepath.Join(dir, "backing")
	const size = 16 << 20
	content := writeBacking(t, backing, size)
	first, dev, init := startFirstServer(t, mnt, backing)
	path := filepath.Join(mnt, "v")
	deadline := time.Now().Add(10 * time.Second)

	// A close of the file while no server runs must not wait: the first FLUSH is
	// refused (ENOSYS) and the kernel sends no more. (The second server is
	// started, exec'd, by this process, which has the file open.)
	if f, err := os.Open(path); err != nil {
		t.Fatal(err)
	} else {
		f.Close()
	}
	var stop atomic.Bool
	var reads, writes atomic.Int64
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	for r := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_DIRECT, 0)
			if err != nil {
				errs <- err
				return
			}
			defer f.Close()
			buf := aligned(4096)
			rng := mrand.New(mrand.NewPCG(uint64(r), 1))
			for !stop.Load() {
				off := rng.Int64N(size/2/4096) * 4096 // the first half: never written
				if _, err := f.ReadAt(buf, off); err != nil {
					errs <- fmt.Errorf("read at %d: %w", off, err)
					return
				}
				if !bytes.Equal(buf, content[off:off+4096]) {
					errs <- fmt.Errorf("read at %d: wrong bytes", off)
					return
				}
				reads.Add(1)
			}
		}()
	}
	wg.Add(1)
	go func() { // writes and fsyncs blocks of the second half, each checked back
		defer wg.Done()
		f, err := os.OpenFile(path, os.O_RDWR|syscall.O_DIRECT, 0)
		if err != nil {
			errs <- err
			return
		}
		defer f.Close()
		buf, back := aligned(4096), aligned(4096)
		for i := int64(0); !stop.Load(); i++ {
			off := size/2 + (i%(size/2/4096))*4096
			for j := range buf {
				buf[j] = byte(i + int64(j))
			}
			if _, err := f.WriteAt(buf, off); err != nil {
				errs <- fmt.Errorf("write at %d: %w", off, err)
				return
			}
			if err := f.Sync(); err != nil {
				errs <- fmt.Errorf("fsync: %w", err)
				return
			}
			if _, err := f.ReadAt(back, off); err != nil || !bytes.Equal(back, buf) {
				errs <- fmt.Errorf("read back at %d: %v", off, err)
				return
			}
			writes.Add(1)
		}
	}()

	second := startHelper(t, "resume", mnt, backing, dev, "FUSEFS_INIT="+hex.EncodeToString(init))
	time.Sleep(300 * time.Millisecond)
	first.cmd.Process.Signal(syscall.SIGKILL)
	first.cmd.Wait()
	before := reads.Load()
	time.Sleep(500 * time.Millisecond) // nobody serves: the requests wait
	second.resume(t)
	for reads.Load() < before+200 {
		select {
		case err := <-errs:
			t.Fatal(err)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline.Add(20 * time.Second)) {
			t.Fatalf("the second server answered %d reads in time", reads.Load()-before)
		}
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("%d reads, %d writes; %d reads before the kill", reads.Load(), writes.Load(), before)
	if writes.Load() == 0 {
		t.Error("no write went through")
	}
}

// TestResumeAcrossRepeatedKills kills the server again and again
// (FUSEFS_KILLS times, 40 unless set), each time taken over by a new one, while
// 4 readers and 2 writers of 1 MiB O_DIRECT requests run at full speed and each
// server gives its heap back to the system every millisecond: the kernel is often
// copying a request into a new buffer of the server at the instant of a kill. No
// read or write may fail. Before the request buffers were pre-faulted
// (prefaultRequestBuffers), 21 of 300 kills ended a write with EIO: a copy into
// a page not yet mapped, refused to a process with SIGKILL pending; after, 0 of
// 900 (2026-11-27).
func TestResumeAcrossRepeatedKills(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireFile(t, "/dev/fuse")
	kills := 40
	if s := os.Getenv("FUSEFS_KILLS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("FUSEFS_KILLS=%q: want a number of kills", s)
		}
		kills = n
	}
	dir := t.TempDir()
	mnt := filepath.Join(dir, "fuse")
	backing := filepath.Join(dir, "backing")
	const size = 64 << 20
	content := writeBacking(t, backing, size)
	current, dev, init := startFirstServer(t, mnt, backing, "FUSEFS_CHURN=1")
	path := filepath.Join(mnt, "v")
	if f, err := os.Open(path); err != nil {
		t.Fatal(err)
	} else {
		f.Close()
	}

	var stop atomic.Bool
	var ops atomic.Int64
	var failed atomic.Int64
	errs := make(chan error, 64)
	report := func(err error) {
		failed.Add(1)
		select {
		case errs <- err:
		default:
		}
	}
	var wg sync.WaitGroup
	for r := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_DIRECT, 0)
			if err != nil {
				report(err)
				return
			}
			defer f.Close()
			buf := aligned(4096)
			rng := mrand.New(mrand.NewPCG(uint64(r), 2))
			for !stop.Load() {
				off := rng.Int64N(size/2/4096) * 4096
				if _, err := f.ReadAt(buf, off); err != nil {
					report(fmt.Errorf("read at %d: %w", off, err))
					continue
				}
				if !bytes.Equal(buf, content[off:off+4096]) {
					report(fmt.Errorf("read at %d: wrong bytes", off))
				}
				ops.Add(1)
			}
		}()
	}
	for w := range 2 {
		wg.Add(1)
		go func() { // 1 MiB writes into a region of its own in the second half, read back
			defer wg.Done()
			f, err := os.OpenFile(path, os.O_RDWR|syscall.O_DIRECT, 0)
			if err != nil {
				report(err)
				return
			}
			defer f.Close()
			buf, back := aligned(1<<20), aligned(1<<20)
			base := int64(size/2 + w*size/4)
			for i := int64(0); !stop.Load(); i++ {
				off := base + (i%(size/4>>20))<<20
				for j := range buf {
					buf[j] = byte(i + int64(j) + int64(w))
				}
				if _, err := f.WriteAt(buf, off); err != nil {
					report(fmt.Errorf("write at %d: %w", off, err))
					continue
				}
				if _, err := f.ReadAt(back, off); err != nil || !bytes.Equal(back, buf) {
					report(fmt.Errorf("read back at %d: %v", off, err))
					continue
				}
				ops.Add(1)
			}
		}()
	}
	rng := mrand.New(mrand.NewPCG(3, 4))
	for i := range kills {
		next := startHelper(t, "resume", mnt, backing, dev, "FUSEFS_CHURN=1", "FUSEFS_INIT="+hex.EncodeToString(init))
		time.Sleep(time.Duration(100+rng.IntN(300)) * time.Millisecond)
		current.cmd.Process.Signal(syscall.SIGKILL)
		current.cmd.Wait()
		next.resume(t)
		current = next
		before := ops.Load()
		for deadline := time.Now().Add(20 * time.Second); ops.Load() < before+20; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("kill %d: the new server answered %d requests in 20s", i+1, ops.Load()-before)
			}
		}
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("%d kills, %d reads and writes, %d failed", kills, ops.Load(), failed.Load())
}
