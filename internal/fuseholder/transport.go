package fuseholder

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// send writes one message, with f's descriptor attached when f is not nil. f
// stays the caller's; the receiver gets its own duplicate.
func send(conn *net.UnixConn, b []byte, f *os.File) error {
	write := func(oob []byte) error {
		n, oobn, err := conn.WriteMsgUnix(b, oob, nil)
		if err != nil {
			return err
		}
		if n != len(b) || oobn != len(oob) {
			return fmt.Errorf("short write: %d of %d bytes, %d of %d control bytes", n, len(b), oobn, len(oob))
		}
		return nil
	}
	if f == nil {
		return write(nil)
	}
	// Control keeps the descriptor valid during the write without Fd's side
	// effect (Fd puts a pollable file in blocking mode).
	rc, err := f.SyscallConn()
	if err != nil {
		return fmt.Errorf("descriptor to send: %w", err)
	}
	var werr error
	if err := rc.Control(func(fd uintptr) { werr = write(unix.UnixRights(int(fd))) }); err != nil {
		return fmt.Errorf("descriptor to send: %w", err)
	}
	return werr
}

// receiver reads messages from one connection into buffers of its own.
type receiver struct {
	conn *net.UnixConn
	buf  []byte
	oob  []byte
}

func newReceiver(conn *net.UnixConn) *receiver {
	return &receiver{conn: conn, buf: make([]byte, MaxMessage), oob: make([]byte, unix.CmsgSpace(maxFDs*4))}
}

// recv reads one message and the descriptors that came with it (close-on-exec:
// the net package receives with MSG_CMSG_CLOEXEC). It returns io.EOF when the
// peer closed the connection. The message is valid until the next recv. On error
// every descriptor received is closed.
func (r *receiver) recv() ([]byte, []*os.File, error) {
	n, oobn, flags, _, err := r.conn.ReadMsgUnix(r.buf, r.oob)
	files, ferr := parseRights(r.oob[:oobn])
	fail := func(err error) ([]byte, []*os.File, error) {
		closeAll(files)
		return nil, nil, err
	}
	switch {
	case err != nil:
		return fail(err)
	case n == 0 && oobn == 0:
		return fail(io.EOF) // a SOCK_SEQPACKET read of 0 bytes: the peer is gone
	case ferr != nil:
		return fail(ferr)
	case flags&unix.MSG_TRUNC != 0:
		return fail(fmt.Errorf("%w: longer than %d bytes", errMalformed, MaxMessage))
	case flags&unix.MSG_CTRUNC != 0:
		return fail(fmt.Errorf("%w: more than %d descriptors", errMalformed, maxFDs))
	}
	return r.buf[:n], files, nil
}

// parseRights turns the SCM_RIGHTS of a control message into files.
func parseRights(oob []byte) ([]*os.File, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("control message: %w", err)
	}
	var files []*os.File
	var errs []error
	for i := range msgs {
		if msgs[i].Header.Level != unix.SOL_SOCKET || msgs[i].Header.Type != unix.SCM_RIGHTS {
			continue
		}
		fds, err := unix.ParseUnixRights(&msgs[i])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, fd := range fds {
			// Already close-on-exec; set again in case a platform's net package
			// did not receive with MSG_CMSG_CLOEXEC.
			unix.CloseOnExec(fd)
			files = append(files, os.NewFile(uintptr(fd), "received descriptor"))
		}
	}
	if err := errors.Join(errs...); err != nil {
		closeAll(files)
		return nil, fmt.Errorf("control message: %w", err)
	}
	return files, nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}
