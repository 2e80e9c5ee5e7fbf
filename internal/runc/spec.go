package runc

import (
	"fmt"
	"path/filepath"
	"strings"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// DefaultPath is the PATH a container gets when its image sets none.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// defaultCaps are Docker's default capabilities.
var defaultCaps = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW",
	"CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE",
	"CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
}

// Config describes a container to run.
type Config struct {
	ID       string
	Rootfs   string // mounted root filesystem
	Image    ocispec.ImageConfig
	Args     []string  // replaces the image's Cmd when non-empty (Docker semantics)
	Entry    *[]string // replaces the image's Entrypoint when set
	Env      []string  // added to (and overriding) the image's
	Workdir  string    // replaces the image's
	User     string    // replaces the image's
	Hostname string
	Terminal bool
	// HostNetwork shares the host's network namespace; otherwise the container gets a
	// new one with only loopback.
	HostNetwork bool
	// EtcDir, when set, holds hosts, hostname and resolv.conf (see WriteEtc), which
	// are bind-mounted over the container's /etc files as Docker does.
	EtcDir string
}

// Spec builds the runtime spec for c.
func Spec(c Config) (*specs.Spec, error) {
	args := c.Image.Entrypoint
	if c.Entry != nil {
		args = *c.Entry
	}
	cmd := c.Image.Cmd
	if len(c.Args) > 0 {
		cmd = c.Args
	}
	args = append(append([]string(nil), args...), cmd...)
	if len(args) == 0 {
		return nil, fmt.Errorf("no command: the image has no entrypoint or cmd; give one after the image name")
	}
	userSpec := c.Image.User
	if c.User != "" {
		userSpec = c.User
	}
	u, err := ResolveUser(c.Rootfs, userSpec)
	if err != nil {
		return nil, err
	}
	env := mergeEnv(c.Image.Env, c.Env)
	if !hasEnv(env, "PATH") {
		env = append(env, "PATH="+DefaultPath)
	}
	if !hasEnv(env, "HOME") {
		env = append(env, "HOME="+u.Home)
	}
	if c.Terminal && !hasEnv(env, "TERM") {
		env = append(env, "TERM=xterm")
	}
	hostname := c.Hostname
	if hostname == "" {
		hostname = c.ID
		if len(hostname) > 12 {
			hostname = hostname[:12]
		}
	}
	cwd := c.Image.WorkingDir
	if c.Workdir != "" {
		cwd = c.Workdir
	}
	if cwd == "" {
		cwd = "/"
	}
	s := &specs.Spec{
		Version: specs.Version,
		Process: &specs.Process{
			Terminal: c.Terminal,
			User:     specs.User{UID: u.UID, GID: u.GID, AdditionalGids: u.Groups},
			Args:     args,
			Env:      env,
			Cwd:      cwd,
			Capabilities: &specs.LinuxCapabilities{
				Bounding: defaultCaps, Effective: defaultCaps, Permitted: defaultCaps,
			},
			Rlimits: []specs.POSIXRlimit{nofile()},
		},
		Root:     &specs.Root{Path: c.Rootfs},
		Hostname: hostname,
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}},
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
			{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
			{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"nosuid", "noexec", "nodev", "relatime", "ro"}},
		},
		Linux: &specs.Linux{
			CgroupsPath: "/slacker/" + c.ID,
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace}, {Type: specs.UTSNamespace}, {Type: specs.MountNamespace},
			},
			Resources: &specs.LinuxResources{Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}}},
			MaskedPaths: []string{"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
				"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware", "/proc/scsi"},
			ReadonlyPaths: []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"},
		},
	}
	if !c.HostNetwork {
		s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: specs.NetworkNamespace})
	}
	if c.EtcDir != "" {
		for _, f := range EtcFiles {
			s.Mounts = append(s.Mounts, specs.Mount{Destination: "/etc/" + f, Type: "bind",
				Source: filepath.Join(c.EtcDir, f), Options: []string{"rbind", "rprivate"}})
		}
	}
	return s, nil
}

// nofile gives the container the open-files limit slacker itself has (as Docker
// does by default): raising it past the caller's hard limit fails on hosts that do
// not grant that.
func nofile() specs.POSIXRlimit {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return specs.POSIXRlimit{Type: "RLIMIT_NOFILE", Hard: 1024, Soft: 1024}
	}
	return specs.POSIXRlimit{Type: "RLIMIT_NOFILE", Hard: rl.Max, Soft: rl.Max}
}

func envKey(kv string) string {
	if i := strings.IndexByte(kv, '='); i >= 0 {
		return kv[:i]
	}
	return kv
}

func hasEnv(env []string, key string) bool {
	for _, kv := range env {
		if envKey(kv) == key {
			return true
		}
	}
	return false
}

// mergeEnv returns base with each of extra replacing a variable of the same name.
func mergeEnv(base, extra []string) []string {
	out := append([]string(nil), base...)
	for _, kv := range extra {
		replaced := false
		for i := range out {
			if envKey(out[i]) == envKey(kv) {
				out[i], replaced = kv, true
			}
		}
		if !replaced {
			out = append(out, kv)
		}
	}
	return out
}
