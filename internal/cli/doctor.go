package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/opencontainers/go-digest"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/slacker-dev/slacker/internal/api"
	"github.com/slacker-dev/slacker/internal/config"
	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/store/storeurl"
	"github.com/slacker-dev/slacker/internal/store/transport"
	"github.com/slacker-dev/slacker/internal/units"
)

// check is one line of `slacker doctor`.
type check struct {
	Name   string `json:"name"`
	Status string `json:"status"` // ok, warn, fail
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

// doctorEnv is the machine as doctor sees it; tests replace its parts.
type doctorEnv struct {
	euid            int
	procFilesystems string // /proc/filesystems
	kernelRelease   string // uname -r
	dev             string // /dev
	lookPath        func(string) (string, error)
	output          func(ctx context.Context, name string, args ...string) (string, error)
	slackerdConfig  string // slackerd's TOML; "" = the default path if it exists
	containerdCfg   string // containerd's config.toml; "" = the default path if it exists
	socket          string // slackerd's API socket (flag or env); "" = from the config
}

func defaultDoctorEnv() doctorEnv {
	return doctorEnv{
		euid: os.Geteuid(), procFilesystems: "/proc/filesystems", dev: "/dev", lookPath: exec.LookPath,
		kernelRelease: kernelRelease(),
		output: func(ctx context.Context, name string, args ...string) (string, error) {
			out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
			return string(out), err
		},
	}
}

const (
	defaultSlackerdConfig   = "/etc/slacker/slackerd.toml"
	defaultContainerdConfig = "/etc/containerd/config.toml"
)

func newDoctor(e *env) *cobra.Command {
	de := defaultDoctorEnv()
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check this machine for what Slacker needs, and say how to fix each problem",
		Long: `doctor checks the kernel (FUSE, loop devices, ext4), the tools (runc, mkfs.ext4,
e2fsck, containerd), slackerd's configuration, its sockets and their permissions,
the chunk store, and containerd's configuration of the Slacker snapshotter. Every
problem comes with the command or setting that fixes it. It exits 1 if a check
failed (warnings do not count).`,
		Example: `  slacker doctor
  slacker doctor --config /etc/slacker/slackerd.toml --containerd-config /etc/containerd/config.toml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("socket") || os.Getenv("SLACKER_SOCKET") != "" {
				de.socket = e.socket
			}
			checks := runDoctor(cmd.Context(), de)
			failed := 0
			for _, c := range checks {
				if c.Status == "fail" {
					failed++
				}
			}
			if e.jsonOut {
				if err := e.printJSON(checks); err != nil {
					return err
				}
			} else {
				w := e.table()
				fmt.Fprintln(w, "CHECK\tSTATUS\tDETAIL")
				for _, c := range checks {
					fmt.Fprintf(w, "%s\t%s\t%s\n", c.Name, c.Status, c.Detail)
				}
				w.Flush()
				for _, c := range checks {
					if c.Fix != "" {
						fmt.Fprintf(e.stdout, "\n%s (%s): %s\n  fix: %s\n", c.Name, c.Status, c.Detail, strings.ReplaceAll(c.Fix, "\n", "\n       "))
					}
				}
			}
			if failed > 0 {
				return &exitError{code: 1, err: fmt.Errorf("%d check(s) failed", failed)}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&de.slackerdConfig, "config", "", "slackerd's configuration (default "+defaultSlackerdConfig+" if it exists)")
	f.StringVar(&de.containerdCfg, "containerd-config", "", "containerd's configuration (default "+defaultContainerdConfig+" if it exists)")
	f.BoolVar(&e.jsonOut, "json", false, "print JSON")
	return cmd
}

// runDoctor runs every check in order.
func runDoctor(ctx context.Context, de doctorEnv) []check {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var out []check
	add := func(c check) { out = append(out, c) }
	if de.euid != 0 {
		add(check{"root", "fail", "not running as root", "slackerd and its checks need root: slacker doctor"})
	} else {
		add(check{"root", "ok", "running as root", ""})
	}
	add(kernelCheck(de, "fuse", filepath.Join(de.dev, "fuse"), "modprobe fuse (and load it at boot: echo fuse > /etc/modules-load.d/slacker.conf)"))
	add(kernelCheck(de, "loop", filepath.Join(de.dev, "loop-control"), "modprobe loop (and load it at boot: echo loop > /etc/modules-load.d/slacker.conf)"))
	add(kernelCheck(de, "ext4", "", "modprobe ext4"))
	add(kernelReleaseCheck(de.kernelRelease))
	for _, t := range []struct{ name, pkg, flag string }{
		{"runc", "runc", "--version"}, {"mkfs.ext4", "e2fsprogs", "-V"}, {"e2fsck", "e2fsprogs", "-V"},
	} {
		add(toolCheck(ctx, de, t.name, t.pkg, t.flag, true))
	}
	cfg, cfgCheck := slackerdConfig(de)
	add(cfgCheck)
	r, rerr := cfg.Resolve()
	socket := de.socket
	if socket == "" {
		socket = cfg.Socket
	}
	add(socketCheck(ctx, socket))
	if rerr == nil {
		if r.SnapshotterSocket != "" {
			add(snapshotterSocketCheck(r.SnapshotterSocket))
		}
		add(storeCheck(ctx, r.Store))
		if _, local := localStoreDir(r.Store); !local && r.Store != "" {
			add(receiveBufferCheck(r.StoreReceiveBuffer, transport.RmemMax()))
		}
		if r.DockerConfig != "" {
			add(dockerConfigCheck(r.DockerConfig))
		}
	}
	ccfg := de.containerdCfg
	if ccfg == "" {
		if _, err := os.Stat(defaultContainerdConfig); err == nil {
			ccfg = defaultContainerdConfig
		}
	}
	_, lookErr := de.lookPath("containerd")
	if ccfg != "" || lookErr == nil {
		add(toolCheck(ctx, de, "containerd", "containerd", "--version", false))
	}
	if ccfg != "" && rerr == nil {
		out = append(out, containerdConfigChecks(ccfg, r.SnapshotterSocket)...)
	}
	return out
}

func kernelCheck(de doctorEnv, fs, devNode, fix string) check {
	c := check{Name: "kernel " + fs, Fix: fix, Status: "fail"}
	if devNode != "" {
		if _, err := os.Stat(devNode); err != nil {
			c.Detail = devNode + " is missing"
			return c
		}
	}
	if fs == "loop" {
		c.Status, c.Detail, c.Fix = "ok", devNode+" present", ""
		return c
	}
	b, err := os.ReadFile(de.procFilesystems)
	if err != nil {
		c.Detail = fmt.Sprintf("cannot read %s: %v", de.procFilesystems, err)
		return c
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && f[len(f)-1] == fs {
			c.Status, c.Detail, c.Fix = "ok", fs+" in "+de.procFilesystems, ""
			return c
		}
	}
	c.Detail = fs + " is not in " + de.procFilesystems
	return c
}

// kernelRelease is uname -r.
func kernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

// kernelReleaseCheck warns below Linux 6.9, which brought what slackerd uses when
// it is there: FUSE_NOTIFY_RESEND (a container's request in flight when slackerd
// died is answered by the next slackerd) and FUSE passthrough (image roots read
// from local files without a round trip to slackerd).
func kernelReleaseCheck(release string) check {
	c := check{Name: "kernel release", Status: "warn"}
	var major, minor int
	if _, err := fmt.Sscanf(release, "%d.%d", &major, &minor); err != nil {
		c.Detail = fmt.Sprintf("cannot tell the kernel's version from %q", release)
		return c
	}
	if major > 6 || major == 6 && minor >= 9 {
		c.Status, c.Detail = "ok", "Linux "+release+": FUSE resend and passthrough (6.9)"
		return c
	}
	c.Detail = "Linux " + release + " is older than 6.9: a container's read or write in flight when slackerd dies waits until the connection ends (fuse_hold), then fails, instead of being answered by the next slackerd; image roots are read through slackerd (no FUSE passthrough)"
	c.Fix = "run a kernel 6.9 or later (Debian bookworm-backports has one)"
	return c
}

func toolCheck(ctx context.Context, de doctorEnv, name, pkg, versionFlag string, required bool) check {
	c := check{Name: "tool " + name}
	path, err := de.lookPath(name)
	if err != nil {
		c.Status, c.Detail, c.Fix = "fail", name+" is not installed", "apt-get install "+pkg
		if !required {
			c.Status = "warn"
		}
		return c
	}
	out, err := de.output(ctx, path, versionFlag)
	first, _, _ := strings.Cut(strings.TrimSpace(out), "\n")
	if err != nil && first == "" {
		c.Status, c.Detail, c.Fix = "fail", fmt.Sprintf("%s %s: %v", path, versionFlag, err), "reinstall it: apt-get install --reinstall "+pkg
		return c
	}
	c.Status, c.Detail = "ok", first
	return c
}

func slackerdConfig(de doctorEnv) (config.Daemon, check) {
	path := de.slackerdConfig
	if path == "" {
		if _, err := os.Stat(defaultSlackerdConfig); err != nil {
			return config.Defaults(), check{"slackerd config", "ok", "no " + defaultSlackerdConfig + ": defaults", ""}
		}
		path = defaultSlackerdConfig
	}
	cfg, err := config.Load(path)
	if err == nil {
		_, err = cfg.Resolve()
	}
	if err != nil {
		return cfg, check{"slackerd config", "fail", err.Error(), "correct " + path + " (every key is in docs/operating.md)"}
	}
	return cfg, check{"slackerd config", "ok", path, ""}
}

func socketCheck(ctx context.Context, socket string) check {
	c := check{Name: "slackerd", Status: "fail"}
	fi, err := os.Stat(socket)
	if err != nil {
		c.Detail = "no socket at " + socket
		c.Fix = "start slackerd: systemctl start slackerd (contrib/systemd), or slackerd --config " + defaultSlackerdConfig
		return c
	}
	if fi.Mode()&os.ModeSocket == 0 {
		c.Detail, c.Fix = socket+" is not a socket", "remove it and restart slackerd"
		return c
	}
	info, err := api.NewClient(socket).Info(ctx)
	if err != nil {
		c.Detail = fmt.Sprintf("%s does not answer: %v", socket, err)
		c.Fix = "restart slackerd (a socket left by a dead daemon is replaced at start): systemctl restart slackerd"
		return c
	}
	c.Status, c.Detail = "ok", fmt.Sprintf("slackerd %s (pid %d) on %s, state %s", info.Version, info.PID, socket, info.StateRoot)
	if p := permIssue(fi); p != "" {
		c.Status, c.Detail, c.Fix = "warn", c.Detail+"; "+p, "chmod 600 "+socket+" (slackerd sets it; something changed it)"
	}
	return c
}

// permIssue says what is wrong with a root-only socket's mode or owner.
func permIssue(fi os.FileInfo) string {
	if fi.Mode().Perm()&0o077 != 0 {
		return fmt.Sprintf("mode %o lets other users drive slackerd", fi.Mode().Perm())
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 {
		return fmt.Sprintf("owned by uid %d, not root", st.Uid)
	}
	return ""
}

func snapshotterSocketCheck(socket string) check {
	c := check{Name: "snapshotter socket", Status: "fail"}
	fi, err := os.Stat(socket)
	if err != nil || fi.Mode()&os.ModeSocket == 0 {
		c.Detail = "no socket at " + socket
		c.Fix = "slackerd serves it when running (snapshotter_socket in its config; \"off\" disables it)"
		return c
	}
	conn, err := net.DialTimeout("unix", socket, 2*time.Second)
	if err != nil {
		c.Detail, c.Fix = fmt.Sprintf("%s does not answer: %v", socket, err), "restart slackerd"
		return c
	}
	conn.Close()
	c.Status, c.Detail = "ok", socket+" answers"
	if p := permIssue(fi); p != "" {
		c.Status, c.Detail, c.Fix = "warn", c.Detail+"; "+p, "chmod 600 "+socket
	}
	return c
}

func storeCheck(ctx context.Context, location string) check {
	c := check{Name: "store", Status: "fail"}
	if dir, ok := localStoreDir(location); ok {
		fi, err := os.Stat(dir)
		if os.IsNotExist(err) {
			c.Status, c.Detail = "warn", dir+" does not exist yet (slackerd makes it at start)"
			return c
		}
		if err != nil || !fi.IsDir() {
			c.Detail, c.Fix = fmt.Sprintf("%s is not a directory (%v)", dir, err), "point store (slackerd config) at a directory"
			return c
		}
		if err := syscall.Access(dir, 2 /* W_OK */); err != nil {
			c.Detail, c.Fix = dir+" is not writable", "chown root "+dir+" (slackerd runs as root)"
			return c
		}
		c.Status, c.Detail = "ok", "local:"+dir
		return c
	}
	st, desc, err := storeurl.Open(location)
	if err != nil {
		c.Detail, c.Fix = err.Error(), "correct store in slackerd's config (docs/operating.md)"
		return c
	}
	_, err = st.Stat(ctx, digest.FromString("slacker doctor"))
	if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		c.Detail, c.Fix = fmt.Sprintf("%s: %v", desc, err), "check the store's address and credentials, and that it is up"
		return c
	}
	c.Status, c.Detail = "ok", desc+" answers"
	return c
}

// receiveBufferCheck says whether slackerd's connections to a remote store get
// the receive buffer its config asks (store_receive_buffer; 0: the default;
// negative: off), given the kernel's net.core.rmem_max.
func receiveBufferCheck(asked int64, rmemMax int) check {
	c := check{Name: "store receive buffer", Status: "ok"}
	n, capped := transport.ReceiveBufferFor(int(asked), rmemMax)
	switch {
	case capped:
		want := cmp.Or(asked, transport.DefaultReceiveBuffer)
		c.Status = "warn"
		c.Detail = fmt.Sprintf("%s asked, but net.core.rmem_max is %d: the kernel's autotuning is kept, and a far store's chunks wait on the node's receive window (docs/operating.md)",
			units.Bytes(want), rmemMax)
		c.Fix = fmt.Sprintf("sysctl -w net.core.rmem_max=%d (and in /etc/sysctl.d/ to keep it), or store_receive_buffer = \"off\"", want)
	case n == 0:
		c.Detail = "off: the kernel's autotuning"
	default:
		c.Detail = units.Bytes(int64(n)) + " per connection"
	}
	return c
}

func localStoreDir(location string) (string, bool) {
	switch {
	case strings.HasPrefix(location, "local:"):
		return filepath.Clean(strings.TrimPrefix(strings.TrimPrefix(location, "local:"), "//")), true
	case strings.HasPrefix(location, "file://"):
		return filepath.Clean(strings.TrimPrefix(location, "file://")), true
	case strings.Contains(location, "://"):
		return "", false
	}
	return filepath.Clean(location), true
}

func dockerConfigCheck(path string) check {
	b, err := os.ReadFile(path)
	if err != nil {
		return check{"registry credentials", "fail", err.Error(), "docker login REGISTRY (as root), or correct registry.docker_config"}
	}
	var v struct {
		Auths       map[string]json.RawMessage `json:"auths"`
		CredsStore  string                     `json:"credsStore"`
		CredHelpers map[string]string          `json:"credHelpers"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return check{"registry credentials", "fail", path + " is not a Docker config: " + err.Error(), "docker login REGISTRY recreates it"}
	}
	return check{"registry credentials", "ok", fmt.Sprintf("%s: %d registries, credsStore %q, %d helpers",
		path, len(v.Auths), v.CredsStore, len(v.CredHelpers)), ""}
}

// containerdConfigChecks reads containerd's config.toml for the proxy plugin and,
// when CRI is on, its snapshotter settings.
func containerdConfigChecks(path, socket string) []check {
	var cfg struct {
		DisabledPlugins []string `toml:"disabled_plugins"`
		ProxyPlugins    map[string]struct {
			Type    string `toml:"type"`
			Address string `toml:"address"`
		} `toml:"proxy_plugins"`
		Plugins map[string]toml.Primitive `toml:"plugins"`
	}
	md, err := toml.DecodeFile(path, &cfg)
	if err != nil {
		return []check{{"containerd config", "fail", err.Error(), "correct " + path}}
	}
	snippet := fmt.Sprintf("add to %s, then restart containerd:\n[proxy_plugins]\n  [proxy_plugins.slacker]\n    type = \"snapshot\"\n    address = %q", path, socket)
	var out []check
	p, ok := cfg.ProxyPlugins["slacker"]
	switch {
	case !ok:
		out = append(out, check{"containerd proxy plugin", "fail", "no [proxy_plugins.slacker] in " + path, snippet})
	case p.Type != "snapshot" || p.Address != socket:
		out = append(out, check{"containerd proxy plugin", "fail",
			fmt.Sprintf("[proxy_plugins.slacker] has type %q, address %q; slackerd serves %q", p.Type, p.Address, socket), snippet})
	default:
		out = append(out, check{"containerd proxy plugin", "ok", "slacker -> " + socket, ""})
	}
	for _, d := range cfg.DisabledPlugins {
		if d == "io.containerd.grpc.v1.cri" || d == "cri" {
			return out
		}
	}
	var cri struct {
		Containerd struct {
			Snapshotter                string `toml:"snapshotter"`
			DisableSnapshotAnnotations *bool  `toml:"disable_snapshot_annotations"`
		} `toml:"containerd"`
	}
	if prim, ok := cfg.Plugins["io.containerd.grpc.v1.cri"]; ok {
		md.PrimitiveDecode(prim, &cri)
	}
	criPath := `[plugins."io.containerd.grpc.v1.cri".containerd]`
	if cri.Containerd.Snapshotter != "slacker" {
		out = append(out, check{"CRI snapshotter", "warn",
			fmt.Sprintf("CRI uses snapshotter %q (Kubernetes pods will not use Slacker)", cri.Containerd.Snapshotter),
			"in " + path + ", " + criPath + `: snapshotter = "slacker"`})
	} else {
		out = append(out, check{"CRI snapshotter", "ok", "slacker", ""})
	}
	if a := cri.Containerd.DisableSnapshotAnnotations; a == nil || *a {
		out = append(out, check{"CRI snapshot annotations", "warn",
			"disable_snapshot_annotations is not false: CRI pulls fetch each Slacker layer (a few KB) instead of skipping it",
			"in " + path + ", " + criPath + ": disable_snapshot_annotations = false"})
	} else {
		out = append(out, check{"CRI snapshot annotations", "ok", "passed to the snapshotter", ""})
	}
	return out
}
