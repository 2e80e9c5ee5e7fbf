package mount

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// OverlayOptions are the overlayfs features a container root mounts with, all off:
// every change then lives in the upper directory as plain files, whiteouts (0/0
// character devices) and opaque directories (trusted.overlay.opaque), which is
// what a commit reads (package archive, UpperChanges). Renaming a directory of the
// image fails with EXDEV, and programs copy it instead, as on overlay2.
const OverlayOptions = "index=off,metacopy=off,redirect_dir=off"

// ErrNoOverlay: this kernel has no overlayfs.
var ErrNoOverlay = errors.New("this kernel has no overlayfs (modprobe overlay)")

// OverlaySupported reports whether the kernel offers overlayfs, loading the module
// if it can.
func OverlaySupported() error {
	if hasFilesystem("overlay") {
		return nil
	}
	if exec.Command("modprobe", "overlay").Run() == nil && hasFilesystem("overlay") {
		return nil
	}
	return ErrNoOverlay
}

func hasFilesystem(name string) bool {
	f, err := os.Open("/proc/filesystems")
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) > 0 && fs[len(fs)-1] == name {
			return true
		}
	}
	return false
}

// OverlaySpec is an overlay mount: lower directories (the first is the top one),
// an upper directory for changes and its work directory (on the same filesystem).
type OverlaySpec struct {
	Lower []string
	Upper string
	Work  string
}

// Options returns the mount options of the overlay (the data of mount(2), or the
// options of a containerd mount).
func (o OverlaySpec) Options() []string {
	return []string{"lowerdir=" + strings.Join(o.Lower, ":"), "upperdir=" + o.Upper, "workdir=" + o.Work,
		"index=off", "metacopy=off", "redirect_dir=off"}
}

// MountOverlay mounts the overlay o at target (created if missing).
func MountOverlay(o OverlaySpec, target string) error {
	if len(o.Lower) == 0 || o.Upper == "" || o.Work == "" {
		return fmt.Errorf("mount overlay on %s: lower, upper and work directories are required", target)
	}
	for _, d := range o.Lower {
		if strings.ContainsAny(d, ":,") {
			return fmt.Errorf("mount overlay on %s: lower directory %q has a ':' or ','", target, d)
		}
	}
	if err := os.MkdirAll(target, 0o755); err != nil {
		return fmt.Errorf("mount overlay on %s: %w", target, err)
	}
	if err := unix.Mount("overlay", target, "overlay", 0, strings.Join(o.Options(), ",")); err != nil {
		if errors.Is(err, unix.ENODEV) {
			return fmt.Errorf("mount overlay on %s: %w", target, ErrNoOverlay)
		}
		return fmt.Errorf("mount overlay on %s: %w", target, err)
	}
	return nil
}

// fstrimRange is struct fstrim_range from linux/fs.h.
type fstrimRange struct {
	Start, Len, MinLen uint64
}

// ioctlFITRIM is FITRIM from linux/fs.h: _IOWR('X', 121, struct fstrim_range).
const ioctlFITRIM = 0xC0185879

// Trim discards every free block of the filesystem mounted at target (FITRIM) and
// returns how many bytes it discarded. On a Slacker volume a discard becomes a
// hole in the delta, so data deleted before a snapshot is not uploaded with it.
func Trim(target string) (int64, error) {
	f, err := os.Open(target)
	if err != nil {
		return 0, fmt.Errorf("trim %s: %w", target, err)
	}
	defer f.Close()
	r := fstrimRange{Len: ^uint64(0)}
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), ioctlFITRIM, uintptr(unsafe.Pointer(&r))); errno != 0 {
		return 0, fmt.Errorf("trim %s: %w", target, errno)
	}
	return int64(r.Len), nil
}
