package services

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Containerd is a running containerd with its own root, state and socket (CRI off
// unless asked for), for the overlayfs baseline, snapshotter and CRI tests.
type Containerd struct {
	Dir    string
	Socket string
	proc   *process
}

// ContainerdOptions configure StartContainerd.
type ContainerdOptions struct {
	// Dir holds root/, state/, opt/, the socket, config and log. Required. Keep it
	// short: unix socket paths are limited to 108 bytes.
	Dir string
	// ProxySnapshotters maps snapshotter names to the gRPC sockets serving them.
	ProxySnapshotters map[string]string
	// CRI, if set, turns containerd's CRI plugin on (the kubelet's API, on the
	// same socket), configured as docs/containerd.md says.
	CRI *CRIOptions
	// NetNS, if set, is the network namespace (/run/netns/NAME) containerd runs
	// in, and so its containers' networks: what CNI sets up for them (bridges,
	// iptables rules) goes with the namespace.
	NetNS string
}

// CRIOptions configure containerd's CRI plugin.
type CRIOptions struct {
	// Snapshotter is the pods' snapshotter ("slacker"); disable_snapshot_annotations
	// is off, so that CRI passes each layer's annotations to it.
	Snapshotter string
	// SandboxImage is the pause image of every pod sandbox.
	SandboxImage string
	// PlainHTTP lists registries (host:port) CRI pulls from over plain HTTP.
	PlainHTTP []string
}

// StartContainerd starts containerd and waits until `ctr version` answers.
func StartContainerd(ctx context.Context, o ContainerdOptions) (*Containerd, error) {
	if o.Dir == "" {
		return nil, fmt.Errorf("start containerd: no directory given")
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("start containerd: %w", err)
	}
	sock := filepath.Join(o.Dir, "containerd.sock")
	var b strings.Builder
	disabled := `disabled_plugins = ["io.containerd.grpc.v1.cri"]`
	if o.CRI != nil {
		disabled = ""
	}
	fmt.Fprintf(&b, `version = 2
root = %q
state = %q
%s
[grpc]
  address = %q
[ttrpc]
  address = %q
[plugins."io.containerd.internal.v1.opt"]
  path = %q
`, filepath.Join(o.Dir, "root"), filepath.Join(o.Dir, "state"), disabled, sock, sock+".ttrpc", filepath.Join(o.Dir, "opt"))
	if c := o.CRI; c != nil {
		// Pods get the host's network here (no CNI plugins): CNI's directories
		// are empty ones of this containerd's own.
		fmt.Fprintf(&b, `[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  disable_apparmor = true
  # CI's root lacks CAP_SYS_RESOURCE: it cannot lower an oom_score_adj, which
  # CRI does for every sandbox (-998) unless restricted to containerd's own.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = %q
    disable_snapshot_annotations = false
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
`, c.SandboxImage, c.Snapshotter, filepath.Join(o.Dir, "cni", "bin"), filepath.Join(o.Dir, "cni", "conf"))
		for _, r := range c.PlainHTTP {
			fmt.Fprintf(&b, "  [plugins.\"io.containerd.grpc.v1.cri\".registry.mirrors.%q]\n    endpoint = [%q]\n", r, "http://"+r)
		}
		for _, d := range []string{"bin", "conf"} {
			if err := os.MkdirAll(filepath.Join(o.Dir, "cni", d), 0o755); err != nil {
				return nil, fmt.Errorf("start containerd: %w", err)
			}
		}
	}
	if len(o.ProxySnapshotters) > 0 {
		b.WriteString("[proxy_plugins]\n")
		for name, addr := range o.ProxySnapshotters {
			fmt.Fprintf(&b, "  [proxy_plugins.%s]\n    type = \"snapshot\"\n    address = %q\n", name, addr)
		}
	}
	cfg := filepath.Join(o.Dir, "config.toml")
	if err := os.WriteFile(cfg, []byte(b.String()), 0o600); err != nil {
		return nil, err
	}
	var p *process
	var err error
	if o.NetNS != "" {
		if _, err := exec.LookPath("containerd"); err != nil {
			return nil, fmt.Errorf("containerd is not installed (install it with apt-get, see README): %w", err)
		}
		p, err = startProcess("nsenter", filepath.Join(o.Dir, "containerd.log"), "--net="+o.NetNS, "--", "containerd", "--config", cfg)
	} else {
		p, err = startProcess("containerd", filepath.Join(o.Dir, "containerd.log"), "--config", cfg)
	}
	if err != nil {
		return nil, err
	}
	c := &Containerd{Dir: o.Dir, Socket: sock, proc: p}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err = waitFor(ctx, p, "containerd", func() error {
		out, err := exec.CommandContext(ctx, "ctr", "-a", sock, "version").CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
	if err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// Ctr runs `ctr -a SOCKET args...` and returns its combined output.
func (c *Containerd) Ctr(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "ctr", append([]string{"-a", c.Socket}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// PID returns containerd's process ID.
func (c *Containerd) PID() int { return c.proc.cmd.Process.Pid }

// Stop kills the containers containerd still runs (a test that failed before
// removing its containers or pods leaves them running otherwise, with their
// roots' mounts), stops containerd and its shims, and unmounts what it left
// mounted under its directory.
func (c *Containerd) Stop() error {
	killContainers(c.Socket)
	err := c.proc.stop(10 * time.Second)
	killShims(c.Socket)
	unmountUnder(c.Dir)
	return err
}
