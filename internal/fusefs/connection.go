package fusefs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"strconv"
	"sync"
	"syscall"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// The connection: this package opens /dev/fuse and mounts it itself (no
// fusermount), so that it has the descriptor to hand to a holder (Session), and
// go-fuse serves that descriptor through its "/dev/fd/N" mountpoint. A process
// that takes the connection over (Resume) gets the descriptor and the kernel's
// INIT request from the holder; go-fuse insists on reading an INIT first, so it is
// given the recorded one on a socket pair, and the connection's descriptor is
// then put in the place of the socket (dup3) before serving; last, the kernel is
// asked to send again the requests the dead server had read and not answered
// (FUSE_NOTIFY_RESEND, Linux 6.9).

const (
	opInit       = 26 // FUSE_INIT
	notifyResend = 7  // FUSE_NOTIFY_RESEND, the out header's error field of a notification
	inHeaderSize = 40 // struct fuse_in_header
	initBodySize = 64 // struct fuse_init_in (major, minor, max_readahead, flags, flags2, unused[11])
)

// Session is what a process taking the connection over needs (Resume): the
// connection's /dev/fuse descriptor and the kernel's INIT request, as Session
// returns them.
type Session struct {
	Dev  *os.File
	Init []byte
}

// Session returns a new descriptor of the connection (the caller closes it once
// handed on) and the kernel's INIT request.
func (f *FS) Session() (Session, error) {
	fd, err := unix.FcntlInt(uintptr(f.devFD), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return Session{}, fmt.Errorf("FUSE connection of %s: %w", f.mountpoint, err)
	}
	return Session{Dev: os.NewFile(uintptr(fd), "/dev/fuse"), Init: append([]byte(nil), f.init...)}, nil
}

func (o *Options) defaults() {
	if o.MaxRequest <= 0 {
		o.MaxRequest = 1 << 20
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

func (o Options) mountOptions() *fuse.MountOptions {
	return &fuse.MountOptions{
		FsName:       "slacker",
		Name:         "slacker",
		MaxWrite:     o.MaxRequest,
		MaxReadAhead: o.MaxRequest,
		// Background requests the kernel keeps in flight to slackerd (async direct
		// I/O from loop devices counts here). At 64, fio's 32 x QD32 random reads
		// on an image root ran at 21-28k IOPS; at 256, 31-47k (docs/EVALUATION.md
		// section 8, 2026-11-25).
		MaxBackground: 256,
		// Async direct I/O: a loop device's direct reads and writes return at once
		// and complete when the answer comes. Without it each one blocks the loop
		// device's worker until answered: queue depth 1 whatever the guest submits.
		ExtraCapabilities:  fuse.CAP_ASYNC_DIO,
		DisableXAttrs:      true,
		DisableReadDirPlus: true,
		DisableSplice:      true, // reads answer from memory buffers; splice only helps fd-backed results
		Debug:              o.Debug,
	}
}

func newFS(mountpoint string, opts Options) *FS {
	return &FS{mountpoint: mountpoint, log: opts.Logger, opts: opts,
		files: map[string]*file{}, byNode: map[uint64]*file{}}
}

// Mount mounts an empty volume directory at mountpoint (created if missing) on a
// new FUSE connection.
func Mount(mountpoint string, opts Options) (*FS, error) {
	opts.defaults()
	if err := os.MkdirAll(mountpoint, 0o700); err != nil {
		return nil, fmt.Errorf("mount volume directory: %w", err)
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return nil, fmt.Errorf("mount volume directory: this kernel has no FUSE (/dev/fuse: %v); load the fuse module (modprobe fuse)", err)
	}
	fd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("mount volume directory: open /dev/fuse: %w", err)
	}
	data := fmt.Sprintf("fd=%d,rootmode=%o,user_id=0,group_id=0,max_read=%d", fd, syscall.S_IFDIR, opts.MaxRequest)
	if err := unix.Mount("slacker", mountpoint, "fuse.slacker", unix.MS_NOSUID|unix.MS_NODEV, data); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("mount volume directory at %s: %w", mountpoint, err)
	}
	f := newFS(mountpoint, opts)
	// go-fuse reads the kernel's INIT from fd and answers it.
	server, err := fuse.NewServer(&raw{RawFileSystem: fuse.NewDefaultRawFileSystem(), fs: f}, "/dev/fd/"+strconv.Itoa(fd), opts.mountOptions())
	if err != nil {
		unix.Unmount(mountpoint, unix.MNT_DETACH)
		unix.Close(fd)
		return nil, fmt.Errorf("mount volume directory at %s: %w", mountpoint, err)
	}
	if err := prefaultRequestBuffers(server); err != nil {
		unix.Unmount(mountpoint, unix.MNT_DETACH)
		unix.Close(fd)
		return nil, fmt.Errorf("mount volume directory at %s: %w", mountpoint, err)
	}
	f.server, f.devFD, f.init = server, fd, encodeInit(server.KernelSettings())
	f.Serve()
	if err := pollHack(mountpoint); err != nil {
		f.Unmount()
		return nil, fmt.Errorf("mount volume directory at %s: %w", mountpoint, err)
	}
	return f, nil
}

// Resume prepares to serve the connection of s, mounted at mountpoint by an
// earlier process (Mount, then Session); it serves once the caller has added
// every file the kernel may name (Add) and calls Serve: then the requests the
// earlier process had read and not answered are sent again. Until Serve,
// requests wait. Resume takes s.Dev over.
func Resume(mountpoint string, s Session, opts Options) (*FS, error) {
	opts.defaults()
	if len(s.Init) != initBodySize {
		return nil, fmt.Errorf("resume FUSE connection at %s: the recorded INIT has %d bytes, want %d", mountpoint, len(s.Init), initBodySize)
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("resume FUSE connection: %w", err)
	}
	serverEnd, kernelEnd := pair[0], pair[1]
	defer unix.Close(kernelEnd)
	req := make([]byte, inHeaderSize+initBodySize)
	binary.LittleEndian.PutUint32(req[0:], uint32(len(req)))
	binary.LittleEndian.PutUint32(req[4:], opInit)
	binary.LittleEndian.PutUint64(req[8:], 1) // unique
	copy(req[inHeaderSize:], s.Init)
	if _, err := unix.Write(kernelEnd, req); err != nil {
		unix.Close(serverEnd)
		return nil, fmt.Errorf("resume FUSE connection: replay INIT: %w", err)
	}
	f := newFS(mountpoint, opts)
	server, err := fuse.NewServer(&raw{RawFileSystem: fuse.NewDefaultRawFileSystem(), fs: f}, "/dev/fd/"+strconv.Itoa(serverEnd), opts.mountOptions())
	if err != nil {
		unix.Close(serverEnd)
		return nil, fmt.Errorf("resume FUSE connection at %s: %w", mountpoint, err)
	}
	if err := prefaultRequestBuffers(server); err != nil {
		unix.Close(serverEnd)
		return nil, fmt.Errorf("resume FUSE connection at %s: %w", mountpoint, err)
	}
	// The answer to the replayed INIT (the kernel had the first one's).
	unix.Read(kernelEnd, make([]byte, 4096))
	// The server reads and writes descriptor number serverEnd: it becomes the
	// connection.
	if err := unix.Dup3(int(s.Dev.Fd()), serverEnd, unix.O_CLOEXEC); err != nil {
		return nil, fmt.Errorf("resume FUSE connection: %w", err)
	}
	s.Dev.Close()
	f.server, f.devFD, f.init, f.resumed = server, serverEnd, append([]byte(nil), s.Init...), true
	return f, nil
}

// Serve starts answering requests (Mount does it itself). A resumed FS is first
// given every file the kernel may name (Add), then asks the kernel to send again
// what the previous process had read and not answered.
func (f *FS) Serve() {
	f.serveOnce.Do(func() {
		if f.resumed {
			resend := make([]byte, 16) // a notification (unique 0) with no payload
			binary.LittleEndian.PutUint32(resend[0:], 16)
			binary.LittleEndian.PutUint32(resend[4:], notifyResend)
			if _, err := unix.Write(f.devFD, resend); err != nil {
				// A kernel before 6.9: requests in flight at the old server's death
				// stay unanswered (their callers wait until the connection ends).
				f.log.Warn("fuse-resend-refused", "err", err,
					"effect", "requests the previous process had read are not answered (Linux 6.9 or later resends them)")
			}
		}
		go f.server.Serve()
	})
}

// prefaultRequestBuffers has every buffer go-fuse reads requests into written
// once, page by page, before its first read. The kernel copies a request into the
// server's buffer after taking it off its queue; where a page of the buffer is not
// yet mapped, the copy must fault it in, which the kernel refuses to a process with
// a SIGKILL pending, and it then ends the request with EIO: a container's read or
// write failed at the instant slackerd was killed, instead of being sent again to
// the next slackerd (TestResumeAcrossRepeatedKills: about one kill in fifteen
// without this, none with it). Go hands out new buffers as untouched memory from
// the system. go-fuse makes them in its Server's readPool, which it does not
// export; this wraps that pool's New, and fails, rather than serve without it,
// if a go-fuse upgrade moved it.
func prefaultRequestBuffers(s *fuse.Server) error {
	v := reflect.ValueOf(s).Elem().FieldByName("readPool")
	if !v.IsValid() || v.Type() != reflect.TypeFor[sync.Pool]() {
		return errors.New("go-fuse's Server has no readPool of request buffers (go-fuse was upgraded; see prefaultRequestBuffers)")
	}
	pool := (*sync.Pool)(unsafe.Pointer(v.UnsafeAddr()))
	newBuffer := pool.New
	if newBuffer == nil {
		return errors.New("go-fuse's readPool makes no request buffers (go-fuse was upgraded; see prefaultRequestBuffers)")
	}
	pool.New = func() any {
		b, ok := newBuffer().([]byte)
		if ok {
			touchPages(b[:cap(b)])
		}
		return b
	}
	return nil
}

// touchPages writes one byte of every page of b, so that the system maps them.
func touchPages(b []byte) {
	const page = 4096
	for i := 0; i < len(b); i += page {
		b[i] = 0
	}
	if len(b) > 0 {
		b[len(b)-1] = 0
	}
}

// encodeInit is the body of the kernel's INIT request as go-fuse read it.
func encodeInit(in *fuse.InitIn) []byte {
	b := make([]byte, initBodySize)
	binary.LittleEndian.PutUint32(b[0:], in.Major)
	binary.LittleEndian.PutUint32(b[4:], in.Minor)
	binary.LittleEndian.PutUint32(b[8:], in.MaxReadAhead)
	binary.LittleEndian.PutUint32(b[12:], in.Flags)
	binary.LittleEndian.PutUint32(b[16:], in.Flags2)
	for i, u := range in.Unused {
		binary.LittleEndian.PutUint32(b[20+4*i:], u)
	}
	return b
}

// pollHack has the kernel learn, once per connection, that this server does not
// answer POLL. Without it, the first open of a volume file by this process (a
// loop device being attached) can deadlock: Go registers every file it opens
// with its epoll, the kernel asks the FUSE server about polling while holding
// the epoll's lock, and the runtime's netpoller, waiting for that lock, cannot
// let the server's goroutines answer. go-fuse does this itself for the mounts it
// makes, not for a "/dev/fd/N" one: it answers for the name pollHackName, a
// file opened here with raw system calls, outside Go's epoll, and polled once.
func pollHack(mountpoint string) error {
	fd, err := unix.Open(mountpoint+"/"+pollHackName, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("FUSE poll hack: %w", err)
	}
	unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN | unix.POLLPRI | unix.POLLOUT}}, 0)
	unix.Close(fd)
	return nil
}

// pollHackName is the file go-fuse's server answers for (fuse/poll.go).
const pollHackName = ".go-fuse-epoll-hack"
