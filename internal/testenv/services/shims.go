package services

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// shimsOf returns the PIDs of the containerd shims serving the containerd whose
// socket is socket (started with `-address SOCKET`).
func shimsOf(socket string) []int {
	var out []int
	for _, pid := range pids() {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(bytes.TrimRight(b, "\x00")), "\x00")
		if !strings.HasPrefix(filepath.Base(args[0]), "containerd-shim") {
			continue
		}
		for i := 1; i+1 < len(args); i++ {
			if args[i] == "-address" && args[i+1] == socket {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}

// childrenOf returns the PIDs whose parent is ppid.
func childrenOf(ppid int) []int {
	var out []int
	for _, pid := range pids() {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(ppid) {
			out = append(out, pid)
		}
	}
	return out
}

func pids() []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// killContainers kills, with SIGKILL, what the shims of the containerd at socket
// still run (each container's init: the rest of its PID namespace goes with it),
// so that a test that failed before removing its containers or pods leaves none
// behind, nor the mounts and loop devices their roots hold.
func killContainers(socket string) {
	for _, shim := range shimsOf(socket) {
		for _, c := range childrenOf(shim) {
			syscall.Kill(c, syscall.SIGKILL)
		}
	}
}

// killShims kills the shims of the containerd at socket, once containerd is gone
// (a shim waits for containerd to delete its task, which a stopped containerd
// never does), and waits up to a few seconds for them to go.
func killShims(socket string) {
	shims := shimsOf(socket)
	for _, s := range shims {
		syscall.Kill(s, syscall.SIGKILL)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(shims) > 0 && time.Now().Before(deadline) {
		// A killed shim is gone once its parent (init, or this process) reaped it.
		live := shims[:0]
		for _, s := range shims {
			if b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(s), "stat")); err == nil && !isZombie(b) {
				live = append(live, s)
			}
		}
		shims = live
		time.Sleep(20 * time.Millisecond)
	}
}

// isZombie says whether a /proc/PID/stat line is a zombie's.
func isZombie(stat []byte) bool {
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z'
}
