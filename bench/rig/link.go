package rig

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// LinkOptions configure an emulated network link.
type LinkOptions struct {
	// Rate is the link's rate in bits per second in each direction; 0 is unlimited.
	Rate int64
	// RTT is the round-trip time added by the link (half each way).
	RTT time.Duration
	// Queue is the longest a packet may wait for the link before it is dropped
	// (tail drop, as a switch port's buffer); default 10 ms.
	Queue time.Duration
	// MTU of both ends; default 9000 (jumbo frames).
	MTU int
	// Subnet picks 10.213.Subnet.0/30 for the two ends; default from the PID.
	Subnet int
}

// Link is an emulated link between this host's network namespace and a new network
// namespace (the far side), where a registry or store can be started with InNetns.
//
// The kernel here has no netem qdisc (CONFIG_NET_SCH_NETEM is off; tbf, htb and fifo
// are all there is), so the link is emulated in user space, as netem would do it in
// the kernel: each side is a TUN device, and a pump per direction reads every packet,
// gives it a departure time at the link rate (serialization: len*8/rate after the
// previous packet's), adds half the RTT, and writes it into the other side's TUN
// device at that time. A packet that would wait longer than Queue is dropped.
type Link struct {
	// Netns is the far side's namespace name; NetnsPath its path for InNetns.
	Netns, NetnsPath string
	// HostIP and FarIP are the two ends' addresses.
	HostIP, FarIP string
	o             LinkOptions

	tuns    [2]*os.File
	wg      sync.WaitGroup
	toFar   atomic.Int64 // bytes delivered host -> far
	toHost  atomic.Int64 // bytes delivered far -> host
	dropped atomic.Int64
	bypass  atomic.Bool // SetShaped(false): packets pass at once, no rate, no delay
	closed  sync.Once
}

const netnsPrefix = "slacker-hb-"

// NewLink creates the far namespace, the two TUN devices and starts the pumps.
func NewLink(ctx context.Context, o LinkOptions) (*Link, error) {
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, errors.New("the emulated link needs ip (apt-get install iproute2)")
	}
	if o.Queue <= 0 {
		o.Queue = 10 * time.Millisecond
	}
	if o.MTU <= 0 {
		o.MTU = 9000
	}
	if o.Subnet <= 0 || o.Subnet > 254 {
		o.Subnet = 1 + os.Getpid()%250
	}
	CleanStaleLinks(ctx)
	pid := os.Getpid()
	l := &Link{Netns: fmt.Sprintf("%s%d", netnsPrefix, pid), o: o,
		HostIP: fmt.Sprintf("10.213.%d.1", o.Subnet), FarIP: fmt.Sprintf("10.213.%d.2", o.Subnet)}
	l.NetnsPath = filepath.Join("/run/netns", l.Netns)
	if err := ipCmd(ctx, "netns", "add", l.Netns); err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			l.Close()
		}
	}()
	hostDev, farDev := fmt.Sprintf("hb%dh", pid), fmt.Sprintf("hb%df", pid)
	var err error
	if l.tuns[0], err = openTun(hostDev); err != nil {
		return nil, err
	}
	if err := InNetns(l.NetnsPath, func() error {
		var err error
		l.tuns[1], err = openTun(farDev)
		return err
	}); err != nil {
		return nil, err
	}
	mtu := strconv.Itoa(o.MTU)
	for _, args := range [][]string{
		{"addr", "add", l.HostIP, "peer", l.FarIP, "dev", hostDev},
		{"link", "set", hostDev, "mtu", mtu, "up"},
		{"-n", l.Netns, "addr", "add", l.FarIP, "peer", l.HostIP, "dev", farDev},
		{"-n", l.Netns, "link", "set", farDev, "mtu", mtu, "up"},
		{"-n", l.Netns, "link", "set", "lo", "up"},
	} {
		if err := ipCmd(ctx, args...); err != nil {
			return nil, err
		}
	}
	l.wg.Add(2)
	go l.pump(l.tuns[0], l.tuns[1], &l.toFar)
	go l.pump(l.tuns[1], l.tuns[0], &l.toHost)
	ok = true
	return l, nil
}

// Bytes returns the bytes the link has delivered towards the far side and towards
// this host, IP headers included.
func (l *Link) Bytes() (toFar, toHost int64) { return l.toFar.Load(), l.toHost.Load() }

// Dropped is the number of packets dropped because the queue was full.
func (l *Link) Dropped() int64 { return l.dropped.Load() }

// SetShaped turns the link's rate and delay on (the default) or off. Off, a
// packet read is delivered at once, behind any still queued (order is kept):
// for set-up that is not measured, such as publishing a corpus at 100 Mbit/s,
// which would otherwise take most of a run. Bytes are counted either way.
func (l *Link) SetShaped(on bool) { l.bypass.Store(!on) }

// Shaped says whether the link's rate and delay apply (SetShaped).
func (l *Link) Shaped() bool { return !l.bypass.Load() }

// Options returns the link's settings.
func (l *Link) Options() LinkOptions { return l.o }

// Close stops the pumps, removes the TUN devices and the namespace. Processes
// started in the namespace must be stopped first. Safe to call twice.
func (l *Link) Close() error {
	var err error
	l.closed.Do(func() {
		for _, t := range l.tuns {
			if t != nil {
				t.Close()
			}
		}
		l.wg.Wait()
		err = ipCmd(context.Background(), "netns", "del", l.Netns)
	})
	return err
}

// CleanStaleLinks deletes namespaces left by an emulated link whose process is gone
// (a harness that was killed -9).
func CleanStaleLinks(ctx context.Context) {
	ents, _ := os.ReadDir("/run/netns")
	for _, e := range ents {
		pid, err := strconv.Atoi(strings.TrimPrefix(e.Name(), netnsPrefix))
		if !strings.HasPrefix(e.Name(), netnsPrefix) || err != nil || pid == os.Getpid() {
			continue
		}
		if syscall.Kill(pid, 0) == syscall.ESRCH {
			ipCmd(ctx, "netns", "del", e.Name())
		}
	}
}

func ipCmd(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// openTun creates a TUN device (IP packets, no packet information header) in the
// calling thread's network namespace; it disappears when the file is closed.
func openTun(name string) (*os.File, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("open /dev/net/tun: %w", err)
	}
	var req [unix.IFNAMSIZ + 64]byte
	copy(req[:unix.IFNAMSIZ-1], name)
	*(*uint16)(unsafe.Pointer(&req[unix.IFNAMSIZ])) = unix.IFF_TUN | unix.IFF_NO_PI
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(unix.TUNSETIFF), uintptr(unsafe.Pointer(&req[0]))); errno != 0 {
		unix.Close(fd)
		return nil, fmt.Errorf("create TUN device %s: %w", name, errno)
	}
	return os.NewFile(uintptr(fd), "tun:"+name), nil
}

type packet struct {
	b  []byte
	at int64 // delivery time, CLOCK_MONOTONIC nanoseconds
}

func monotonic() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// shaper is one direction's arithmetic, as netem's rate and delay: a packet departs
// once the link has sent what it accepted before (len*8/rate each), arrives half
// the RTT later, and is dropped if it would wait in the queue longer than Queue.
type shaper struct {
	rate          int64 // bits/s; 0 is unlimited (no serialization, no queue)
	oneWay, queue int64 // ns
	free          int64 // when the link finishes sending what it has accepted
}

func newShaper(o LinkOptions) *shaper {
	return &shaper{rate: o.Rate, oneWay: int64(o.RTT / 2), queue: int64(o.Queue)}
}

// admit takes an n-byte packet read at now (monotonic ns) and returns when it is
// to be delivered, or false if it is dropped.
func (s *shaper) admit(now int64, n int) (at int64, ok bool) {
	s.free = max(s.free, now)
	if s.rate > 0 {
		if s.free-now > s.queue {
			return 0, false
		}
		s.free += int64(n) * 8 * int64(time.Second) / s.rate
	}
	return s.free + s.oneWay, true
}

// admit is sh.admit while the link is shaped; unshaped, a packet leaves at once
// and the shaper is left as it was.
func (l *Link) admit(sh *shaper, now int64, n int) (at int64, ok bool) {
	if l.bypass.Load() {
		return now, true
	}
	return sh.admit(now, n)
}

// pump moves packets from src to dst with the link's rate, delay and queue.
func (l *Link) pump(src, dst *os.File, delivered *atomic.Int64) {
	defer l.wg.Done()
	q := make(chan packet, 1<<16)
	pool := sync.Pool{New: func() any { return make([]byte, l.o.MTU+64) }}
	go func() {
		defer close(q)
		sh := newShaper(l.o)
		for {
			buf := pool.Get().([]byte)
			n, err := src.Read(buf)
			if err != nil {
				if errors.Is(err, syscall.EINTR) || errors.Is(err, syscall.EAGAIN) {
					continue
				}
				return // closed
			}
			at, ok := l.admit(sh, monotonic(), n)
			if !ok {
				l.dropped.Add(1)
				pool.Put(buf)
				continue
			}
			q <- packet{b: buf[:n], at: at}
		}
	}()
	// Go's timers round sub-millisecond waits up to a millisecond when the scheduler
	// is idle, so the writer sleeps in clock_nanosleep on its own thread with a 1 µs
	// timer slack: delivery times are kept to within tens of microseconds.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	unix.Prctl(unix.PR_SET_TIMERSLACK, 1000, 0, 0, 0)
	defer unix.Prctl(unix.PR_SET_TIMERSLACK, 0, 0, 0, 0)
	for p := range q {
		if p.at-monotonic() > int64(10*time.Microsecond) {
			ts := unix.NsecToTimespec(p.at)
			for unix.ClockNanosleep(unix.CLOCK_MONOTONIC, unix.TIMER_ABSTIME, &ts, nil) == unix.EINTR {
			}
		}
		if _, err := dst.Write(p.b); err == nil {
			delivered.Add(int64(len(p.b)))
		}
		pool.Put(p.b[:cap(p.b)])
	}
}
