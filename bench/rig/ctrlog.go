package rig

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The output of a container on the containerd path goes to files, not through ctr.
//
// ctr (1.6.20) loses the output of a short-lived container now and then. It
// opens its end of the task's stdout and stderr FIFOs in goroutines
// (containerd/fifo opens asynchronously), and when the task has exited, deleting
// it cancels those opens first (io.Cancel before io.Wait): an open that the
// kernel has completed but whose goroutine has not yet returned is undone, the
// FIFO closed unread. The container exits 0 and ctr prints nothing. Seen with
// the installed ctr under strace: with the returns of its /proc/self/fd/N FIFO
// opens (N >= 8) delayed by a second, `ctr run --pid-file F IMAGE ID echo hello`
// printed nothing 10 times in 10 (delaying every openat by 100 ms instead: 6 in
// 10 without --pid-file). CI lost it about once in three runs.
//
// With `ctr run --log-uri` ctr opens no FIFO: the shim hands the container's
// output to the target itself. A file:// target gets stdout and stderr appended
// into one file, which would merge the streams a RunSpec keeps apart (a
// workload's Output is its standard output, compared between systems). So the
// target is containerd's logging-binary protocol (binary://): the shim starts
// the binary with the container's stdout on fd 3 and stderr on fd 4, waits for
// it to close fd 5, and when the task is deleted closes the pipes, sends it
// SIGTERM and waits for it to exit. The binary is /bin/sh running two cats, one
// file per stream; it ignores SIGTERM so that both cats copy to the end of their
// pipe, and exits when they have. When `ctr run` exits, after deleting the task,
// the files hold all the output. While the container runs, the rig follows the
// files (inotify), so a workload ready at a log line is matched as the line is
// written. The container's standard input is then /dev/null, as it gets none.

// ctrLogFiles are the files a container's stdout and stderr go to, under dir.
func ctrLogFiles(dir string) (stdout, stderr string) {
	return filepath.Join(dir, "stdout"), filepath.Join(dir, "stderr")
}

// ctrLogURI creates (empty) the files of ctrLogFiles(dir) and returns the
// --log-uri that has the shim write container output into them.
func ctrLogURI(dir string) (string, error) {
	dir, err := filepath.Abs(dir) // the logger runs in the shim's directory
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	stdout, stderr := ctrLogFiles(dir)
	for _, f := range []string{stdout, stderr} {
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			return "", fmt.Errorf("container output file: %w", err)
		}
	}
	// The shim's environment has no PATH: absolute paths. TERM is ignored before
	// fd 5 closes, so a task deleted at once still finds it ignored; the cats
	// must not inherit fd 5, or the shim would wait for them to exit.
	script := fmt.Sprintf(`trap "" TERM; exec 5>&-; /bin/cat <&3 >>%s 3<&- 4<&- & /bin/cat <&4 >>%s 3<&- 4<&- & exec 3<&- 4<&-; wait`,
		shellQuote(stdout), shellQuote(stderr))
	// The shim passes each query key and its value as arguments: one key keeps
	// their order.
	u := url.URL{Scheme: "binary", Path: "/bin/sh", RawQuery: url.Values{"-c": {script}}.Encode()}
	return u.String(), nil
}

// shellQuote quotes s for sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// followFiles copies what is appended to files[i] into ws[i] as it is written
// (inotify, with a slow poll behind it) until finish is called; finish copies the
// rest, to the files' current end, and returns the first error. The writes come
// from one goroutine.
func followFiles(files []string, ws []io.Writer) (finish func() error, err error) {
	fs := make([]*os.File, len(files))
	closeAll := func() {
		for _, f := range fs {
			if f != nil {
				f.Close()
			}
		}
	}
	for i, p := range files {
		if fs[i], err = os.Open(p); err != nil {
			closeAll()
			return nil, err
		}
	}
	// A change wakes the copy at once; without inotify, the poll alone.
	events := make(chan struct{}, 1)
	var ino *os.File
	if fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK); err == nil {
		ino = os.NewFile(uintptr(fd), "inotify")
		for _, p := range files {
			if _, err := unix.InotifyAddWatch(fd, p, unix.IN_MODIFY); err != nil {
				ino.Close()
				ino = nil
				break
			}
		}
	}
	if ino != nil {
		go func() {
			buf := make([]byte, 4096)
			for {
				if _, err := ino.Read(buf); err != nil {
					return // closed by finish
				}
				select {
				case events <- struct{}{}:
				default:
				}
			}
		}()
	}
	var firstErr error
	buf := make([]byte, 32<<10)
	copyNew := func() {
		for i, f := range fs {
			for {
				n, err := f.Read(buf)
				if n > 0 {
					if _, werr := ws[i].Write(buf[:n]); werr != nil && firstErr == nil {
						firstErr = werr
					}
				}
				if err != nil {
					if !errors.Is(err, io.EOF) && firstErr == nil {
						firstErr = err
					}
					break
				}
			}
		}
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		poll := time.NewTicker(100 * time.Millisecond)
		defer poll.Stop()
		for {
			copyNew()
			select {
			case <-events:
			case <-poll.C:
			case <-stop:
				copyNew()
				return
			}
		}
	}()
	var once sync.Once
	return func() error {
		once.Do(func() {
			close(stop)
			<-done
			if ino != nil {
				ino.Close()
			}
			closeAll()
		})
		return firstErr
	}, nil
}
