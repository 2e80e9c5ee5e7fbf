package mount

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// LoopOptions configure AttachLoop.
type LoopOptions struct {
	ReadOnly bool
	// DirectIO makes the loop device read and write the backing file with O_DIRECT,
	// so the kernel keeps no page cache of the backing file.
	DirectIO bool
	// Autoclear detaches the device when its last user goes away. The returned Loop
	// holds the device open; close it once something else (a mount) uses the device.
	Autoclear bool
}

// Loop is an attached loop device, held open until Close.
type Loop struct {
	Path string // /dev/loopN
	f    *os.File
}

// Close releases the handle on the device. With Autoclear and no other user, this
// detaches it.
func (l *Loop) Close() error { return l.f.Close() }

// SetReadahead sets the device's readahead (BLKRASET), rounded down to 512-byte
// sectors: a filesystem mounted on it afterwards reads ahead up to that much.
func (l *Loop) SetReadahead(bytes int64) error { return setReadahead(l.f, l.Path, bytes) }

func setReadahead(f *os.File, path string, bytes int64) error {
	if err := unix.IoctlSetInt(int(f.Fd()), unix.BLKRASET, int(bytes/512)); err != nil {
		return fmt.Errorf("set the readahead of %s to %d bytes: %w", path, bytes, err)
	}
	return nil
}

// SetDeviceReadahead sets the readahead of the block device at path (BLKRASET),
// as Loop.SetReadahead does, for a device no Loop is held for: one a filesystem
// is mounted from.
func SetDeviceReadahead(path string, bytes int64) error {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("set the readahead of %s: %w", path, err)
	}
	defer f.Close()
	return setReadahead(f, path, bytes)
}

// AttachLoop attaches a free loop device to file.
func AttachLoop(file string, opts LoopOptions) (*Loop, error) {
	flags := os.O_RDWR
	if opts.ReadOnly {
		flags = os.O_RDONLY
	}
	if opts.DirectIO {
		flags |= unix.O_DIRECT
	}
	backing, err := os.OpenFile(file, flags|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("attach loop device to %s: %w", file, err)
	}
	defer backing.Close()
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("attach loop device: this kernel has no loop device support (/dev/loop-control: %w); load the loop module", err)
	}
	defer ctl.Close()
	for attempt := 0; attempt < 20; attempt++ {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, fmt.Errorf("attach loop device: find a free device: %w", err)
		}
		dev := fmt.Sprintf("/dev/loop%d", n)
		lf, err := os.OpenFile(dev, flags&^unix.O_DIRECT|unix.O_CLOEXEC, 0)
		if errors.Is(err, os.ErrNotExist) { // udev-less machines: make the node
			if err = unix.Mknod(dev, unix.S_IFBLK|0o660, int(unix.Mkdev(7, uint32(n)))); err == nil || errors.Is(err, os.ErrExist) {
				lf, err = os.OpenFile(dev, flags&^unix.O_DIRECT|unix.O_CLOEXEC, 0)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("attach loop device: open %s: %w", dev, err)
		}
		cfg := unix.LoopConfig{Fd: uint32(backing.Fd()), Size: 4096}
		if opts.ReadOnly {
			cfg.Info.Flags |= unix.LO_FLAGS_READ_ONLY
		}
		if opts.DirectIO {
			cfg.Info.Flags |= unix.LO_FLAGS_DIRECT_IO
		}
		if opts.Autoclear {
			cfg.Info.Flags |= unix.LO_FLAGS_AUTOCLEAR
		}
		copy(cfg.Info.File_name[:len(cfg.Info.File_name)-1], file)
		err = unix.IoctlLoopConfigure(int(lf.Fd()), &cfg)
		if errors.Is(err, unix.EBUSY) { // another process took it first
			lf.Close()
			time.Sleep(time.Duration(attempt) * time.Millisecond)
			continue
		}
		if err != nil {
			lf.Close()
			return nil, fmt.Errorf("attach %s to %s: %w", dev, file, err)
		}
		return &Loop{Path: dev, f: lf}, nil
	}
	return nil, fmt.Errorf("attach loop device to %s: every free device was taken by others", file)
}

// DetachLoop detaches a loop device. Detaching a free device is not an error.
func DetachLoop(dev string) error {
	f, err := os.OpenFile(dev, os.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("detach %s: %w", dev, err)
	}
	defer f.Close()
	for attempt := 0; ; attempt++ {
		err = unix.IoctlSetInt(int(f.Fd()), unix.LOOP_CLR_FD, 0)
		if err == nil || errors.Is(err, unix.ENXIO) {
			return nil
		}
		if errors.Is(err, unix.EBUSY) && attempt < 50 {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		return fmt.Errorf("detach %s: %w", dev, err)
	}
}

// LoopDevice is an attached loop device.
type LoopDevice struct {
	Path        string // /dev/loopN
	BackingFile string
}

// ListLoops returns every attached loop device (from /sys/block).
func ListLoops() ([]LoopDevice, error) {
	ents, err := os.ReadDir("/sys/block")
	if err != nil {
		return nil, fmt.Errorf("list loop devices: %w", err)
	}
	var out []LoopDevice
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "loop") {
			continue
		}
		if _, err := strconv.Atoi(strings.TrimPrefix(e.Name(), "loop")); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/sys/block", e.Name(), "loop", "backing_file"))
		if err != nil {
			continue // not attached
		}
		out = append(out, LoopDevice{Path: "/dev/" + e.Name(), BackingFile: strings.TrimSpace(string(b))})
	}
	return out, nil
}
