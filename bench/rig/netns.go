package rig

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// sameNetns reports whether the network namespace at path is this process's.
func sameNetns(path string) bool {
	var a, b unix.Stat_t
	if unix.Stat(path, &a) != nil || unix.Stat("/proc/self/ns/net", &b) != nil {
		return false
	}
	return a.Dev == b.Dev && a.Ino == b.Ino
}

// DialInNetns connects to addr from inside the network namespace of process pid
// (a container's), so a port the container listens on only inside its namespace
// can be probed. The connection is usable from any goroutine: a socket belongs to
// the namespace it was created in.
func DialInNetns(ctx context.Context, pid int, network, addr string) (net.Conn, error) {
	path := fmt.Sprintf("/proc/%d/ns/net", pid)
	var d net.Dialer
	if sameNetns(path) {
		return d.DialContext(ctx, network, addr)
	}
	var conn net.Conn
	err := InNetns(path, func() error {
		var err error
		conn, err = d.DialContext(ctx, network, addr)
		return err
	})
	return conn, err
}

// InNetns runs fn on an OS thread that has entered the network namespace at path
// (/proc/PID/ns/net or /run/netns/NAME), then moves the thread back to its own
// namespace. Sockets fn creates belong to the namespace, and so do processes fn
// starts (a child inherits its parent thread's namespaces), which is how daemons are
// put on the far side of an emulated link.
//
// The thread is returned to the scheduler, not ended: ending a thread would deliver
// the parent-death signal of every daemon that was started from it (here or
// anywhere else in the process). Only if it cannot go back does it end.
func InNetns(path string, fn func() error) error {
	ns, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("network namespace: %w", err)
	}
	defer ns.Close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		self, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer self.Close()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter network namespace %s: %w", path, err)
			return
		}
		ferr := fn()
		if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
			// Stay locked: the thread ends with this goroutine rather than serve others
			// from the wrong namespace.
			errc <- fmt.Errorf("leave network namespace %s: %w (and: %v)", path, err, ferr)
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}
