package fdio

import (
	"errors"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Reader reads the file open at a descriptor it does not own (an *os.File would
// close it). It retries reads interrupted by a signal.
type Reader int

func (r Reader) Read(b []byte) (int, error) {
	for {
		n, err := unix.Read(int(r), b)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, err
		}
		if n == 0 && len(b) > 0 {
			return 0, io.EOF
		}
		return n, nil
	}
}

// Readlinkat returns the target of the symlink name in the directory open at dfd
// (name "" with an O_PATH descriptor of the link itself).
func Readlinkat(dfd int, name string) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(dfd, name, buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}

// ReadDirNames lists the directory open at fd, sorted; fd stays open.
func ReadDirNames(fd int) ([]string, error) {
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), "dir")
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	return names, nil
}

// ProcPath names the object open at fd through /proc/self/fd: for an O_PATH
// descriptor (a symlink, a device, a fifo), calls by that path act on the object
// itself and follow nothing further.
func ProcPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// Sized calls f with no buffer for the size it needs, then with a buffer of that
// size, again if the value grew in between (ERANGE).
func Sized(f func([]byte) (int, error)) ([]byte, error) {
	for {
		n, err := f(nil)
		if err != nil || n == 0 {
			return nil, err
		}
		buf := make([]byte, n)
		n, err = f(buf)
		if errors.Is(err, unix.ERANGE) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return buf[:n], nil
	}
}

// ListXattrs returns the names of the extended attributes of the object open at
// fd (through ProcPath when opath: fd is an O_PATH descriptor). A filesystem
// without xattrs has none.
func ListXattrs(fd int, opath bool) ([]string, error) {
	b, err := Sized(func(buf []byte) (int, error) {
		if opath {
			return unix.Listxattr(ProcPath(fd), buf)
		}
		return unix.Flistxattr(fd, buf)
	})
	if errors.Is(err, unix.ENOTSUP) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	for _, s := range strings.Split(string(b), "\x00") {
		if s != "" {
			names = append(names, s)
		}
	}
	return names, nil
}

// Xattrs returns the extended attributes of the object open at fd whose names
// want accepts (as ListXattrs for opath). An attribute removed in between is
// left out.
func Xattrs(fd int, opath bool, want func(name string) bool) (map[string][]byte, error) {
	names, err := ListXattrs(fd, opath)
	if err != nil {
		return nil, err
	}
	var out map[string][]byte
	for _, name := range names {
		if !want(name) {
			continue
		}
		v, err := Sized(func(b []byte) (int, error) {
			if opath {
				return unix.Getxattr(ProcPath(fd), name, b)
			}
			return unix.Fgetxattr(fd, name, b)
		})
		if errors.Is(err, unix.ENODATA) {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "getxattr", Path: name, Err: err}
		}
		if out == nil {
			out = map[string][]byte{}
		}
		out[name] = v
	}
	return out, nil
}

// Matcher returns a want function for Xattrs that accepts the names listed and,
// for a listed prefix ending in '.', every name under it ("user.").
func Matcher(names []string) func(string) bool {
	return func(name string) bool {
		for _, x := range names {
			if name == x || (strings.HasSuffix(x, ".") && strings.HasPrefix(name, x)) {
				return true
			}
		}
		return false
	}
}
