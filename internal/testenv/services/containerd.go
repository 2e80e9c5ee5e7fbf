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

// Containerd is a running containerd with its own root, state and socket (CRI off),
// for the overlayfs baseline and snapshotter tests.
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
	fmt.Fprintf(&b, `version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = %q
[ttrpc]
  address = %q
[plugins."io.containerd.internal.v1.opt"]
  path = %q
`, filepath.Join(o.Dir, "root"), filepath.Join(o.Dir, "state"), sock, sock+".ttrpc", filepath.Join(o.Dir, "opt"))
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
	p, err := startProcess("containerd", filepath.Join(o.Dir, "containerd.log"), "--config", cfg)
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

// Stop stops containerd (its shims exit with their containers) and unmounts what it
// left mounted under its directory.
func (c *Containerd) Stop() error {
	err := c.proc.stop(10 * time.Second)
	unmountUnder(c.Dir)
	return err
}
