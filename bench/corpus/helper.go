package corpus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/slacker-dev/slacker/internal/mount"
)

// The builder does every mount in a helper: this same executable, re-executed
// with helperEnv set, as PID 1 of new mount and PID namespaces. Whatever the
// helper mounts (the overlay, proc, sys, a /dev tmpfs, bind mounts of the apt
// caches) lives only in its mount namespace, and whatever apt's maintainer
// scripts start lives only in its PID namespace. When the helper exits, or is
// killed because the builder died or was cancelled (Pdeathsig), the kernel kills
// every process in the namespace and drops every mount with it: nothing can leak
// onto the host, whatever fails. The other way round, the helper first detaches
// its copies of the host's container and volume mounts (dropHostMounts), so that
// it never keeps one of their filesystems alive after the host unmounts it.
const helperEnv = "SLACKER_HELLOBENCH_HELPER"

func init() {
	if os.Getenv(helperEnv) == "1" {
		os.Exit(helperMain())
	}
}

// helperOp is what a helper run does to its root.
type helperOp string

const (
	opDebootstrap helperOp = "debootstrap" // debootstrap a base into Upper
	opApt         helperOp = "apt"         // apt-get install Packages in a chroot of the overlay
	opUnpack      helperOp = "unpack"      // dpkg-deb -x Debs into the overlay (scratch bases)
	opApp         helperOp = "app"         // write Files, add User, put Hello, check Cmd
)

// helperJob is the JSON a helper reads on stdin.
type helperJob struct {
	Op helperOp `json:"op"`
	// Lowers are the read-only layer directories, topmost first. Empty means the
	// root is Upper itself (no overlay).
	Lowers []string `json:"lowers,omitempty"`
	Upper  string   `json:"upper"`
	Work   string   `json:"work,omitempty"`
	Merged string   `json:"merged,omitempty"`
	Result string   `json:"result"` // file the helper writes its helperResult to

	// debootstrap
	Variant  string `json:"variant,omitempty"` // "" for the default set
	Suite    string `json:"suite,omitempty"`
	Mirror   string `json:"mirror,omitempty"`
	CacheDir string `json:"cache_dir,omitempty"`
	Sources  string `json:"sources,omitempty"` // sources.list content for the base

	// apt
	Packages []string `json:"packages,omitempty"`
	Lists    string   `json:"lists,omitempty"`    // bound on /var/lib/apt/lists
	Archives string   `json:"archives,omitempty"` // bound on /var/cache/apt/archives
	AptArgs  []string `json:"apt_args,omitempty"`

	// unpack
	Debs []string `json:"debs,omitempty"`

	// app
	Files map[string]string `json:"files,omitempty"`
	User  string            `json:"user,omitempty"`
	Hello string            `json:"hello,omitempty"` // host path of a static binary for /hello
	Cmd   []string          `json:"cmd,omitempty"`
}

// helperResult is what the helper reports back.
type helperResult struct {
	// Installed is dpkg's database after the step (empty where there is none).
	Installed []Package `json:"installed,omitempty"`
	// Notes are facts about the image worth recording (user added, /hello put).
	Notes []string `json:"notes,omitempty"`
	// Problems are reasons the image will not run as defined (cmd not found).
	Problems []string `json:"problems,omitempty"`
}

// Package is one installed Debian package.
type Package struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Arch    string `json:"arch"`
}

func (p Package) String() string { return p.Name + "=" + p.Version }

// runHelper runs job in a fresh helper and returns its result. The helper's
// output (apt's, debootstrap's) is appended to logFile.
func runHelper(ctx context.Context, job helperJob, logFile string) (*helperResult, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find own executable: %w", err)
	}
	in, err := json.Marshal(job)
	if err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open helper log: %w", err)
	}
	defer logf.Close()
	fmt.Fprintf(logf, "=== %s %s: %s\n", time.Now().Format(time.RFC3339), job.Op, strings.Join(job.Packages, " "))
	os.Remove(job.Result)

	cmd := exec.Command(exe)
	cmd.Env = []string{helperEnv + "=1", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.Stdin = bytes.NewReader(in)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWPID,
		Pdeathsig:  syscall.SIGKILL,
		Setpgid:    true,
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start helper (needs root for namespaces and mounts): %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		// Killing PID 1 of the namespace kills everything in it and drops its mounts.
		cmd.Process.Kill()
		<-done
		return nil, fmt.Errorf("helper %s: %w", job.Op, ctx.Err())
	}
	if err != nil {
		t := tail(logFile, 25)
		return nil, fmt.Errorf("%s failed%s (%v; log %s):\n%s", job.Op, reason(t), err, logFile, t)
	}
	b, err := os.ReadFile(job.Result)
	if err != nil {
		return nil, fmt.Errorf("helper %s wrote no result: %w", job.Op, err)
	}
	var res helperResult
	if err := json.Unmarshal(b, &res); err != nil {
		return nil, fmt.Errorf("helper %s result: %w", job.Op, err)
	}
	return &res, nil
}

// reason picks apt's and dpkg's error lines ("E: Unable to locate package x")
// out of a log tail, for the first line of an error message.
func reason(logTail string) string {
	var es []string
	for _, l := range strings.Split(logTail, "\n") {
		if strings.HasPrefix(l, "E: ") || strings.HasPrefix(l, "dpkg: error") || strings.HasPrefix(l, "W: Failure") {
			es = append(es, strings.TrimSpace(l))
		}
	}
	if len(es) == 0 {
		return ""
	}
	return ": " + strings.Join(es, "; ")
}

// tail returns the last n lines of a file, for error messages.
func tail(file string, n int) string {
	b, err := os.ReadFile(file)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func helperMain() int {
	var job helperJob
	if err := json.NewDecoder(os.Stdin).Decode(&job); err != nil {
		fmt.Fprintf(os.Stderr, "helper: read job: %v\n", err)
		return 2
	}
	// Opened before the job runs: the app step chroots into the image.
	out, err := os.Create(job.Result)
	if err != nil {
		fmt.Fprintf(os.Stderr, "helper: %v\n", err)
		return 2
	}
	defer out.Close()
	res, err := job.run()
	if err != nil {
		fmt.Fprintf(os.Stderr, "helper %s: %v\n", job.Op, err)
		return 1
	}
	if err := json.NewEncoder(out).Encode(res); err != nil {
		fmt.Fprintf(os.Stderr, "helper: write result: %v\n", err)
		return 1
	}
	if err := out.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "helper: write result: %v\n", err)
		return 1
	}
	return 0
}

// mounter records mounts so they are undone in reverse order. The namespace
// drops them anyway; unmounting explicitly keeps the overlay's upper dir
// consistent before the helper reports success.
type mounter struct{ targets []string }

func (m *mounter) mount(source, target, fstype string, flags uintptr, data string) error {
	if err := unix.Mount(source, target, fstype, flags, data); err != nil {
		return fmt.Errorf("mount %s on %s: %w", fstype+":"+source, target, err)
	}
	m.targets = append(m.targets, target)
	return nil
}

func (m *mounter) unmountAll() error {
	var errs []error
	for i := len(m.targets) - 1; i >= 0; i-- {
		if err := unix.Unmount(m.targets[i], 0); err != nil {
			if err2 := unix.Unmount(m.targets[i], unix.MNT_DETACH); err2 != nil {
				errs = append(errs, fmt.Errorf("unmount %s: %w", m.targets[i], err))
			}
		}
	}
	m.targets = nil
	return errors.Join(errs...)
}

func (job *helperJob) run() (res *helperResult, err error) {
	// Nothing mounted from here on may propagate to the host.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return nil, fmt.Errorf("make mounts private: %w", err)
	}
	dropHostMounts(job.keptPaths())
	if job.Op == opDebootstrap {
		return job.debootstrap()
	}
	m := &mounter{}
	if job.Op != opApp { // app chroots; the namespace drops its overlay on exit
		defer func() {
			if uerr := m.unmountAll(); uerr != nil && err == nil {
				err = uerr
			}
		}()
	}
	root := job.Upper
	if len(job.Lowers) > 0 {
		opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,redirect_dir=off,index=off,metacopy=off,xino=off",
			strings.Join(job.Lowers, ":"), job.Upper, job.Work)
		if err := m.mount("overlay", job.Merged, "overlay", 0, opts); err != nil {
			return nil, err
		}
		root = job.Merged
	}
	switch job.Op {
	case opApt:
		return job.apt(root)
	case opUnpack:
		return job.unpack(root)
	case opApp:
		return job.app(root)
	}
	return nil, fmt.Errorf("unknown op %q", job.Op)
}

// dropHostMounts detaches, in this helper's namespace only, the host's
// container and volume filesystems it was born with (hostMountsToDrop). It is
// best effort: a mount already gone with its parent is not an error, and one
// that stays only costs what it did before.
func dropHostMounts(keep []string) {
	table, err := mount.Mounts("/")
	if err != nil {
		fmt.Fprintf(os.Stderr, "helper: read the mount table: %v\n", err)
		return
	}
	var detached []string
	for _, t := range hostMountsToDrop(table, keep) {
		err := unix.Unmount(t, unix.MNT_DETACH)
		switch {
		case err == nil:
			detached = append(detached, t)
		case !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT): // EINVAL: gone with its parent
			fmt.Fprintf(os.Stderr, "helper: detach the host's %s here: %v\n", t, err)
		}
	}
	if len(detached) > 0 {
		fmt.Printf("helper: detached %d of the host's container mounts from this namespace: %s\n", len(detached), strings.Join(detached, " "))
	}
}

// devNull is opened before the app step chroots into an image, which has no
// /dev; commands run there read it as their standard input.
var devNull *os.File

func run(name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = devNull, os.Stdout, os.Stderr
	cmd.Env = chrootEnv()
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return nil
}

func chrootEnv() []string {
	return []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"DEBIAN_FRONTEND=noninteractive",
		"DEBCONF_NONINTERACTIVE_SEEN=true",
		"LC_ALL=C", "HOME=/root",
	}
}

func (job *helperJob) debootstrap() (*helperResult, error) {
	args := []string{}
	if job.Variant != "" {
		args = append(args, "--variant="+job.Variant)
	}
	if job.CacheDir != "" {
		args = append(args, "--cache-dir="+job.CacheDir)
	}
	args = append(args, job.Suite, job.Upper, job.Mirror)
	if err := run("debootstrap", args...); err != nil {
		return nil, err
	}
	// debootstrap unmounts what it mounted, but make sure before cleaning.
	for _, p := range []string{"proc", "sys", "dev/pts", "dev"} {
		unix.Unmount(filepath.Join(job.Upper, p), unix.MNT_DETACH)
	}
	if err := cleanRootfs(job.Upper, true); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(job.Upper, "etc/apt/sources.list"), []byte(job.Sources), 0o644); err != nil {
		return nil, err
	}
	inst, err := dpkgList(job.Upper)
	if err != nil {
		return nil, err
	}
	return &helperResult{Installed: inst}, nil
}

// cleanRootfs removes what must never be in a layer: apt's lists and caches,
// device nodes, runtime and temporary files, the build host's resolv.conf.
func cleanRootfs(root string, base bool) error {
	globs := []string{
		"var/lib/apt/lists/*", "var/cache/apt/archives/*.deb", "var/cache/apt/*.bin",
		"tmp/*", "var/tmp/*", "tmp/.*", "var/tmp/.*",
	}
	if base {
		globs = append(globs, "dev/*", "proc/*", "sys/*", "var/log/bootstrap.log",
			"var/cache/apt/archives/partial/*", "etc/resolv.conf", "etc/hostname")
	}
	for _, g := range globs {
		matches, _ := filepath.Glob(filepath.Join(root, g))
		for _, p := range matches {
			if b := filepath.Base(p); b == "." || b == ".." || b == "lock" || b == "partial" {
				continue
			}
			if err := os.RemoveAll(p); err != nil {
				return fmt.Errorf("clean %s: %w", p, err)
			}
		}
	}
	return nil
}

func (job *helperJob) apt(root string) (res *helperResult, err error) {
	m := &mounter{} // everything but the overlay, undone before cleaning the root
	defer func() {
		if uerr := m.unmountAll(); uerr != nil && err == nil {
			err = uerr
		}
	}()
	dev := filepath.Join(root, "dev")
	if err := m.mount("proc", filepath.Join(root, "proc"), "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return nil, err
	}
	if err := m.mount("sysfs", filepath.Join(root, "sys"), "sysfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return nil, err
	}
	if err := m.mount("tmpfs", dev, "tmpfs", unix.MS_NOSUID, "mode=755,size=16m"); err != nil {
		return nil, err
	}
	if err := populateDev(dev); err != nil {
		return nil, err
	}
	lists := filepath.Join(root, "var/lib/apt/lists")
	archives := filepath.Join(root, "var/cache/apt/archives")
	for _, d := range []string{lists, archives} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	if err := m.mount(job.Lists, lists, "", unix.MS_BIND, ""); err != nil {
		return nil, err
	}
	if err := m.mount(job.Archives, archives, "", unix.MS_BIND, ""); err != nil {
		return nil, err
	}
	// DNS for apt: bind the host's resolv.conf over a placeholder that is removed
	// again, so neither ends up in the layer.
	resolv := filepath.Join(root, "etc/resolv.conf")
	placeholder := false
	if _, err := os.Lstat(resolv); errors.Is(err, os.ErrNotExist) {
		if err := os.WriteFile(resolv, nil, 0o644); err != nil {
			return nil, err
		}
		placeholder = true
	}
	if err := m.mount("/etc/resolv.conf", resolv, "", unix.MS_BIND, ""); err != nil {
		return nil, err
	}
	// No service may start while packages are installed.
	policy := filepath.Join(root, "usr/sbin/policy-rc.d")
	if err := os.WriteFile(policy, []byte("#!/bin/sh\n# slacker hellobench: never start services while building\nexit 101\n"), 0o755); err != nil {
		return nil, err
	}
	args := append([]string{root, "apt-get"}, job.AptArgs...)
	args = append(args, "install")
	args = append(args, job.Packages...)
	aptErr := run("chroot", args...)
	os.Remove(policy)
	var inst []Package
	if aptErr == nil {
		var err error
		if inst, err = dpkgList(root); err != nil {
			return nil, err
		}
	}
	if err := m.unmountAll(); err != nil {
		return nil, err
	}
	if placeholder {
		os.Remove(resolv)
	}
	if aptErr != nil {
		return nil, aptErr
	}
	if err := cleanRootfs(root, false); err != nil {
		return nil, err
	}
	return &helperResult{Installed: inst}, nil
}

// populateDev makes the few device nodes apt and maintainer scripts use, on a
// tmpfs that is never part of a layer.
func populateDev(dev string) error {
	nodes := []struct {
		name         string
		major, minor uint32
	}{{"null", 1, 3}, {"zero", 1, 5}, {"full", 1, 7}, {"random", 1, 8}, {"urandom", 1, 9}, {"tty", 5, 0}}
	for _, n := range nodes {
		if err := unix.Mknod(filepath.Join(dev, n.name), unix.S_IFCHR|0o666, int(unix.Mkdev(n.major, n.minor))); err != nil {
			return fmt.Errorf("mknod /dev/%s: %w", n.name, err)
		}
	}
	for name, target := range map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
		if err := os.Symlink(target, filepath.Join(dev, name)); err != nil {
			return err
		}
	}
	for _, d := range []string{"pts", "shm"} {
		if err := os.Mkdir(filepath.Join(dev, d), 0o755); err != nil {
			return err
		}
	}
	return nil
}

// dpkgList reads the dpkg database of root, if it has one.
func dpkgList(root string) ([]Package, error) {
	if _, err := os.Stat(filepath.Join(root, "var/lib/dpkg/status")); err != nil {
		return nil, nil
	}
	cmd := exec.Command("dpkg-query", "--admindir="+filepath.Join(root, "var/lib/dpkg"),
		"-W", "-f=${db:Status-Abbrev}\t${Package}\t${Version}\t${Architecture}\n")
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("dpkg-query in %s: %w", root, err)
	}
	return parseDpkgList(out), nil
}

// parseDpkgList parses dpkg-query lines "STATUS\tNAME\tVERSION\tARCH", keeping
// installed packages ("ii").
func parseDpkgList(out []byte) []Package {
	var pkgs []Package
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 4 || strings.TrimSpace(f[0]) != "ii" {
			continue
		}
		pkgs = append(pkgs, Package{Name: f[1], Version: f[2], Arch: f[3]})
	}
	return pkgs
}

func (job *helperJob) unpack(root string) (*helperResult, error) {
	for _, deb := range job.Debs {
		if err := run("dpkg-deb", "-x", deb, root); err != nil {
			return nil, err
		}
	}
	return &helperResult{}, nil
}

// app writes the final layer's content from inside a chroot of the image, so
// that absolute symlinks in the image resolve as they will in the container.
func (job *helperJob) app(root string) (*helperResult, error) {
	res := &helperResult{}
	var hello []byte
	if job.Hello != "" {
		var err error
		if hello, err = os.ReadFile(job.Hello); err != nil {
			return nil, err
		}
	}
	var err error
	if devNull, err = os.Open(os.DevNull); err != nil {
		return nil, err
	}
	if err := unix.Chroot(root); err != nil {
		return nil, fmt.Errorf("chroot %s: %w", root, err)
	}
	if err := os.Chdir("/"); err != nil {
		return nil, err
	}
	for _, p := range sortedKeys(job.Files) {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, fmt.Errorf("file %s: %w", p, err)
		}
		if err := os.WriteFile(p, []byte(job.Files[p]), 0o644); err != nil {
			return nil, fmt.Errorf("file %s: %w", p, err)
		}
	}
	if hello != nil {
		if _, err := os.Stat("/hello"); errors.Is(err, os.ErrNotExist) {
			if err := os.WriteFile("/hello", hello, 0o755); err != nil {
				return nil, err
			}
			res.Notes = append(res.Notes, "/hello: static hello-world binary compiled by the builder (gcc -static)")
		}
	}
	if job.User != "" {
		name := strings.SplitN(job.User, ":", 2)[0]
		if !isNumeric(name) && !hasUser(name) {
			if _, err := os.Stat("/usr/sbin/useradd"); err == nil {
				if err := run("/usr/sbin/useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", name); err != nil {
					return nil, err
				}
				res.Notes = append(res.Notes, "user "+name+" added with useradd")
			} else {
				res.Problems = append(res.Problems, "user "+name+" does not exist and the image has no useradd")
			}
		}
	}
	need := AnalyzeCmd(job.Cmd)
	for _, prog := range need.Programs {
		if p := findCmd(prog); p == "" {
			res.Problems = append(res.Problems, fmt.Sprintf("cmd needs %q, which is not in the image (PATH %s)", prog, imagePath))
		} else {
			res.Notes = append(res.Notes, fmt.Sprintf("%s -> %s", prog, p))
		}
	}
	for _, f := range need.Files {
		if _, err := os.Stat(f); err != nil {
			res.Problems = append(res.Problems, fmt.Sprintf("cmd names %s, which is not in the image", f))
		}
	}
	inst, err := dpkgInChroot()
	if err != nil {
		return nil, err
	}
	res.Installed = inst
	return res, nil
}

// imagePath is the PATH set in every image's config.
const imagePath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

func findCmd(name string) string {
	exists := func(p string) bool {
		fi, err := os.Stat(p) // follows symlinks, inside the chroot
		return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
	}
	if strings.Contains(name, "/") {
		if exists(name) {
			return name
		}
		return ""
	}
	for _, dir := range strings.Split(imagePath, ":") {
		if p := filepath.Join(dir, name); exists(p) {
			return p
		}
	}
	return ""
}

func hasUser(name string) bool {
	b, err := os.ReadFile("/etc/passwd")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, name+":") {
			return true
		}
	}
	return false
}

func isNumeric(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return s != ""
}

// dpkgInChroot lists packages when already chrooted into the image.
func dpkgInChroot() ([]Package, error) {
	if _, err := os.Stat("/var/lib/dpkg/status"); err != nil {
		return nil, nil
	}
	if _, err := os.Stat("/usr/bin/dpkg-query"); err != nil {
		return nil, nil
	}
	cmd := exec.Command("/usr/bin/dpkg-query", "-W", "-f=${db:Status-Abbrev}\t${Package}\t${Version}\t${Architecture}\n")
	cmd.Stdin, cmd.Stderr = devNull, os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("dpkg-query: %w", err)
	}
	return parseDpkgList(out), nil
}
