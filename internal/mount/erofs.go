package mount

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// ErofsOptions are the mount options of an erofs image read from a file:
// directio makes erofs read its backing file with O_DIRECT, so the data is cached
// once, in erofs's own page cache, not a second time in the backing file's.
const ErofsOptions = "directio"

// ErofsSupported reports why this machine cannot make and mount erofs images
// from files, if it cannot: the kernel needs erofs with file-backed mounts (Linux
// 6.12, CONFIG_EROFS_FS_BACKED_BY_FILE) and mkfs.erofs must be installed
// (erofs-utils). The file-backed part is tried with a mount of an empty image
// made in a directory under tmp.
func ErofsSupported(ctx context.Context, tmp string) error {
	if !hasFilesystem("erofs") {
		if exec.Command("modprobe", "erofs").Run() != nil || !hasFilesystem("erofs") {
			return errors.New("this kernel has no erofs (CONFIG_EROFS_FS)")
		}
	}
	if _, err := exec.LookPath("mkfs.erofs"); err != nil {
		return errors.New("mkfs.erofs is not installed: apt-get install erofs-utils")
	}
	dir, err := os.MkdirTemp(tmp, ".erofs-probe-")
	if err != nil {
		return fmt.Errorf("erofs probe: %w", err)
	}
	defer os.RemoveAll(dir)
	src, img, mnt := filepath.Join(dir, "src"), filepath.Join(dir, "img"), filepath.Join(dir, "mnt")
	for _, d := range []string{src, mnt} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return fmt.Errorf("erofs probe: %w", err)
		}
	}
	if err := MkfsErofs(ctx, img, src); err != nil {
		return err
	}
	if err := MountErofs(img, mnt); err != nil {
		return err
	}
	if _, err := Unmount(mnt, 0); err != nil {
		return fmt.Errorf("erofs probe: %w", err)
	}
	return nil
}

// MkfsErofs writes an uncompressed erofs image of the tree at dir into the file
// image: every file's content, owner, mode, modification time (to the
// nanosecond), xattrs, hard links and device numbers. The tree must not change
// while it runs.
func MkfsErofs(ctx context.Context, image, dir string) error {
	cmd := exec.CommandContext(ctx, "mkfs.erofs", "--quiet", "--preserve-mtime", image, dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			return errors.New("mkfs.erofs is not installed: apt-get install erofs-utils")
		}
		if ctx.Err() != nil {
			return fmt.Errorf("mkfs.erofs %s: %w", image, ctx.Err())
		}
		return fmt.Errorf("mkfs.erofs %s from %s: %w: %s", image, dir, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// MountErofs mounts the erofs image in the regular file image at target (created
// if missing), read-only, with no loop device: the kernel reads the file itself.
// A kernel without the directio option (before Linux 6.13) mounts it without.
func MountErofs(image, target string) error {
	if err := os.MkdirAll(target, 0o755); err != nil {
		return fmt.Errorf("mount erofs on %s: %w", target, err)
	}
	err := unix.Mount(image, target, "erofs", unix.MS_RDONLY, ErofsOptions)
	if errors.Is(err, unix.EINVAL) {
		err = unix.Mount(image, target, "erofs", unix.MS_RDONLY, "")
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.ENOTBLK):
		return fmt.Errorf("mount erofs %s on %s: this kernel mounts erofs only from block devices "+
			"(file-backed mounts need Linux 6.12 with CONFIG_EROFS_FS_BACKED_BY_FILE): %w", image, target, err)
	case errors.Is(err, unix.ENODEV):
		return fmt.Errorf("mount erofs %s on %s: this kernel has no erofs (CONFIG_EROFS_FS): %w", image, target, err)
	}
	return fmt.Errorf("mount erofs %s on %s: %w", image, target, err)
}
