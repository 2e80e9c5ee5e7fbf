package runc

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// User is a resolved process identity.
type User struct {
	UID, GID uint32
	Groups   []uint32
	Home     string
}

// ResolveUser resolves spec ("", "name", "uid", "name:group", "uid:gid") against the
// container's /etc/passwd and /etc/group, read inside rootfs (symlinks there cannot
// lead out of it).
func ResolveUser(rootfs, spec string) (User, error) {
	u := User{Home: "/"}
	userPart, groupPart, hasGroup := strings.Cut(spec, ":")
	passwd, _ := readInRoot(rootfs, "/etc/passwd")
	group, _ := readInRoot(rootfs, "/etc/group")
	if userPart == "" {
		userPart = "0"
	}
	found := false
	for _, f := range parseColon(passwd, 7) {
		uid, err1 := strconv.ParseUint(f[2], 10, 32)
		gid, err2 := strconv.ParseUint(f[3], 10, 32)
		if err1 != nil || err2 != nil {
			continue
		}
		if f[0] == userPart || f[2] == userPart {
			u.UID, u.GID, u.Home, found = uint32(uid), uint32(gid), f[5], true
			break
		}
	}
	if !found {
		uid, err := strconv.ParseUint(userPart, 10, 32)
		if err != nil {
			return u, fmt.Errorf("user %q is not in the image's /etc/passwd", userPart)
		}
		u.UID, u.GID = uint32(uid), uint32(uid)
		if uid == 0 {
			u.Home = "/root"
		}
	}
	if hasGroup {
		gfound := false
		for _, f := range parseColon(group, 4) {
			if f[0] == groupPart || f[2] == groupPart {
				gid, err := strconv.ParseUint(f[2], 10, 32)
				if err == nil {
					u.GID, gfound = uint32(gid), true
					break
				}
			}
		}
		if !gfound {
			gid, err := strconv.ParseUint(groupPart, 10, 32)
			if err != nil {
				return u, fmt.Errorf("group %q is not in the image's /etc/group", groupPart)
			}
			u.GID = uint32(gid)
		}
	} else {
		// Supplementary groups: every group that lists the user by name.
		name := ""
		for _, f := range parseColon(passwd, 7) {
			if f[2] == strconv.FormatUint(uint64(u.UID), 10) {
				name = f[0]
				break
			}
		}
		for _, f := range parseColon(group, 4) {
			if name == "" {
				break
			}
			for _, m := range strings.Split(f[3], ",") {
				if m == name {
					if gid, err := strconv.ParseUint(f[2], 10, 32); err == nil && uint32(gid) != u.GID {
						u.Groups = append(u.Groups, uint32(gid))
					}
				}
			}
		}
	}
	return u, nil
}

func parseColon(b []byte, fields int) [][]string {
	var out [][]string
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Split(line, ":")
		if len(f) >= fields {
			out = append(out, f)
		}
	}
	return out
}

// readInRoot reads path resolved inside root as if root were "/" (at most 1 MiB).
func readInRoot(root, path string) ([]byte, error) {
	rfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(rfd)
	fd, err := unix.Openat2(rfd, strings.TrimPrefix(path, "/"), &unix.OpenHow{
		Flags: unix.O_RDONLY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	return io.ReadAll(io.LimitReader(f, 1<<20))
}
