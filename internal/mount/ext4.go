package mount

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// MkfsOptions configure Mkfs.
type MkfsOptions struct {
	Label string
	// InodeRatio is bytes per inode (mkfs.ext4 -i); 0 keeps mkfs's default.
	InodeRatio int
}

// Mkfs makes an ext4 filesystem on target (a file or block device). Inode tables
// and the journal are not zeroed (lazy init): on a fresh Slacker volume they read
// as zeros already, so there is nothing to write and nothing to upload.
func Mkfs(ctx context.Context, target string, opts MkfsOptions) error {
	args := []string{"-F", "-q", "-t", "ext4", "-b", "4096", "-m", "0",
		"-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard"}
	if opts.Label != "" {
		args = append(args, "-L", opts.Label)
	}
	if opts.InodeRatio > 0 {
		args = append(args, "-i", fmt.Sprint(opts.InodeRatio))
	}
	args = append(args, target)
	cmd := exec.CommandContext(ctx, "mkfs.ext4", args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			return fmt.Errorf("mkfs.ext4 is not installed: apt-get install e2fsprogs")
		}
		return fmt.Errorf("mkfs.ext4 %s: %w: %s", target, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Fsck runs e2fsck -fn (force, read-only) and returns its output; err is non-nil if
// the filesystem is not clean.
func Fsck(ctx context.Context, target string) (string, error) {
	out, err := exec.CommandContext(ctx, "e2fsck", "-fn", target).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("e2fsck -fn %s: %w", target, err)
	}
	return string(out), nil
}

// Ext4Options are the mount options of a container root. noinit_itable keeps the
// kernel from zeroing inode tables in the background (they read as zeros already,
// and the writes would grow every container's delta).
const Ext4Options = "noinit_itable"

// MountExt4 mounts the ext4 filesystem on dev at target (created if missing).
func MountExt4(dev, target string, readOnly bool, extra string) error {
	if err := os.MkdirAll(target, 0o755); err != nil {
		return fmt.Errorf("mount %s: %w", target, err)
	}
	var flags uintptr
	if readOnly {
		flags |= unix.MS_RDONLY
	}
	data := Ext4Options
	if extra != "" {
		data += "," + extra
	}
	if err := unix.Mount(dev, target, "ext4", flags, data); err != nil {
		return fmt.Errorf("mount ext4 %s on %s: %w", dev, target, err)
	}
	return nil
}

// Unmount unmounts target, retrying while it is busy, and detaching it lazily as a
// last resort (logged by the caller via the returned flag).
func Unmount(target string, timeout time.Duration) (lazy bool, err error) {
	deadline := time.Now().Add(timeout)
	for {
		err := unix.Unmount(target, 0)
		if err == nil || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			return false, nil // unmounted, or was not mounted
		}
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			if lerr := unix.Unmount(target, unix.MNT_DETACH); lerr == nil {
				return true, nil
			}
			return false, fmt.Errorf("unmount %s: %w", target, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// FIFREEZE and FITHAW from linux/fs.h: _IOWR('X', 119, int) and _IOWR('X', 120, int).
const (
	ioctlFIFREEZE = 0xC0045877
	ioctlFITHAW   = 0xC0045878
)

// Freeze flushes the filesystem mounted at target and blocks new writes to it until
// the returned thaw is called, so a snapshot of its device is consistent.
func Freeze(target string) (thaw func() error, err error) {
	f, err := os.Open(target)
	if err != nil {
		return nil, fmt.Errorf("freeze %s: %w", target, err)
	}
	if err := unix.IoctlSetInt(int(f.Fd()), ioctlFIFREEZE, 0); err != nil {
		f.Close()
		return nil, fmt.Errorf("freeze %s: %w", target, err)
	}
	return func() error {
		defer f.Close()
		if err := unix.IoctlSetInt(int(f.Fd()), ioctlFITHAW, 0); err != nil {
			return fmt.Errorf("thaw %s: %w", target, err)
		}
		return nil
	}, nil
}

// MountInfo is one line of /proc/self/mountinfo.
type MountInfo struct {
	Target string
	FSType string
	Source string
}

// Mounts returns the mounts whose target is prefix or below it, deepest first
// (the order in which to unmount them).
func Mounts(prefix string) ([]MountInfo, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ParseMountInfo(f, prefix)
}

// ParseMountInfo reads a mountinfo table (proc(5)) and returns the mounts whose
// target is prefix or below it ("/": all), deepest (and latest) first.
func ParseMountInfo(r io.Reader, prefix string) ([]MountInfo, error) {
	var out []MountInfo
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		if len(fields) < 5 || sep < 0 || sep+2 >= len(fields) {
			continue
		}
		target := unescape(fields[4])
		if target != prefix && !strings.HasPrefix(target, strings.TrimSuffix(prefix, "/")+"/") {
			continue
		}
		out = append(out, MountInfo{Target: target, FSType: fields[sep+1], Source: unescape(fields[sep+2])})
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, sc.Err()
}

// unescape undoes mountinfo's octal escapes (\040 for space, ...).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			var v int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &v); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
