package filetrace

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Extent maps bytes [Logical, Logical+Length) of a file to the bytes of its
// filesystem's device starting at Physical.
type Extent struct {
	Logical, Physical, Length int64
}

// The FIEMAP ioctl (linux/fiemap.h): a struct fiemap header, then
// fm_extent_count struct fiemap_extent.
const (
	fsIocFiemap       = 0xc020660b // _IOWR('f', 11, struct fiemap)
	fiemapHeaderSize  = 32
	fiemapExtentSize  = 56
	fiemapExtentLast  = 0x1
	fiemapExtentsRead = 128
	// Extents whose bytes are not at Physical on the device as such.
	fiemapExtentUnknown = 0x2   // FIEMAP_EXTENT_UNKNOWN
	fiemapExtentInline  = 0x200 // FIEMAP_EXTENT_DATA_INLINE
	fiemapExtentUnwrit  = 0x800 // FIEMAP_EXTENT_UNWRITTEN
)

// Extents returns the extents of the file open at fd, in logical order, leaving
// out holes and extents whose bytes are not plainly on the device (inline data,
// unknown location, unwritten: they read as zeros), up to max of them.
func Extents(fd int, max int) ([]Extent, error) {
	buf := make([]byte, fiemapHeaderSize+fiemapExtentsRead*fiemapExtentSize)
	var out []Extent
	var start uint64
	for len(out) < max {
		clear(buf)
		binary.NativeEndian.PutUint64(buf[0:], start)            // fm_start
		binary.NativeEndian.PutUint64(buf[8:], ^uint64(0)-start) // fm_length: to the end
		binary.NativeEndian.PutUint32(buf[24:], fiemapExtentsRead)
		if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), fsIocFiemap, uintptr(unsafe.Pointer(&buf[0]))); errno != 0 {
			return nil, fmt.Errorf("fiemap: %w", errno)
		}
		exts, next, last := decodeFiemap(buf)
		for _, e := range exts {
			if len(out) < max {
				out = append(out, e)
			}
		}
		if last || next <= start {
			break
		}
		start = next
	}
	return out, nil
}

// decodeFiemap reads the extents a FIEMAP call filled in buf, returns the usable
// ones, where a next call should start, and whether the file's last extent was
// among them (or none were).
func decodeFiemap(buf []byte) (exts []Extent, next uint64, last bool) {
	n := int(binary.NativeEndian.Uint32(buf[20:])) // fm_mapped_extents
	if n == 0 {
		return nil, 0, true
	}
	n = min(n, (len(buf)-fiemapHeaderSize)/fiemapExtentSize)
	for i := range n {
		e := buf[fiemapHeaderSize+i*fiemapExtentSize:]
		logical := binary.NativeEndian.Uint64(e[0:])
		physical := binary.NativeEndian.Uint64(e[8:])
		length := binary.NativeEndian.Uint64(e[16:])
		flags := binary.NativeEndian.Uint32(e[40:])
		next = logical + length
		if flags&fiemapExtentLast != 0 {
			last = true
		}
		if flags&(fiemapExtentUnknown|fiemapExtentInline|fiemapExtentUnwrit) != 0 || length == 0 ||
			logical > 1<<62 || physical > 1<<62 || length > 1<<62 {
			continue
		}
		exts = append(exts, Extent{Logical: int64(logical), Physical: int64(physical), Length: int64(length)})
	}
	return exts, next, last
}
