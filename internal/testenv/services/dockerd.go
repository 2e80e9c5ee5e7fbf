package services

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Dockerd is a running dockerd (Debian's docker.io, 20.10) with its own data-root,
// exec-root, pidfile, key file and API socket under one directory, no iptables and no
// bridge network (containers run with --network none or host).
type Dockerd struct {
	Dir    string
	Socket string
	proc   *process
	once   sync.Once
}

// DockerdOptions configure StartDockerd.
type DockerdOptions struct {
	// Dir holds data/, x/ (the exec-root), docker.sock, daemon.json, dockerd.log and
	// client/ (the docker client's config). Required. Keep it short: the managed
	// containerd's socket lives under the exec-root and unix socket paths are limited
	// to 108 bytes.
	Dir string
	// StorageDriver is dockerd's storage-driver: "" for its default (overlay2), or a
	// graph-driver plugin's name (its socket is /run/docker/plugins/NAME.sock).
	StorageDriver string
	// Experimental starts dockerd with --experimental, which graph-driver plugins need.
	Experimental bool
	// InsecureRegistries are registries reached over plain HTTP (loopback ones always
	// are).
	InsecureRegistries []string
}

// dockerd creates /run/docker/plugins whatever its exec-root; the last dockerd of
// this process removes what the first found missing.
var runDocker struct {
	sync.Mutex
	users      int
	hadRun     bool
	hadPlugins bool
}

const runDockerDir = "/run/docker"

// StartDockerd starts dockerd and waits until its API answers /_ping.
func StartDockerd(ctx context.Context, o DockerdOptions) (*Dockerd, error) {
	if o.Dir == "" {
		return nil, fmt.Errorf("start dockerd: no directory given")
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("start dockerd: %w", err)
	}
	sock := filepath.Join(o.Dir, "docker.sock")
	cfg := map[string]any{
		"data-root":    filepath.Join(o.Dir, "data"),
		"exec-root":    filepath.Join(o.Dir, "x"),
		"pidfile":      filepath.Join(o.Dir, "docker.pid"),
		"hosts":        []string{"unix://" + sock},
		"iptables":     false,
		"ip-forward":   false,
		"ip-masq":      false,
		"bridge":       "none",
		"experimental": o.Experimental,
		// Not /etc/docker/key.json (dockerd 20.10 writes one by default).
		"deprecated-key-path": filepath.Join(o.Dir, "key.json"),
	}
	if o.StorageDriver != "" {
		cfg["storage-driver"] = o.StorageDriver
	}
	if len(o.InsecureRegistries) > 0 {
		cfg["insecure-registries"] = o.InsecureRegistries
	}
	b, _ := json.MarshalIndent(cfg, "", "  ")
	cfgPath := filepath.Join(o.Dir, "daemon.json")
	if err := os.WriteFile(cfgPath, b, 0o600); err != nil {
		return nil, fmt.Errorf("start dockerd: %w", err)
	}
	runDocker.Lock()
	if runDocker.users == 0 {
		_, err := os.Stat(runDockerDir)
		runDocker.hadRun = err == nil
		_, err = os.Stat(filepath.Join(runDockerDir, "plugins"))
		runDocker.hadPlugins = err == nil
	}
	runDocker.users++
	runDocker.Unlock()
	p, err := startProcess("dockerd", filepath.Join(o.Dir, "dockerd.log"), "--config-file", cfgPath)
	if err != nil {
		releaseRunDocker()
		return nil, err
	}
	d := &Dockerd{Dir: o.Dir, Socket: sock, proc: p}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	client := d.httpClient()
	err = waitFor(ctx, p, "dockerd", func() error {
		resp, err := client.Get("http://docker/_ping")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET /_ping: %s: %w", resp.Status, errNotReady)
		}
		return nil
	})
	if err != nil {
		d.Stop()
		return nil, err
	}
	return d, nil
}

func (d *Dockerd) httpClient() *http.Client {
	return &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", d.Socket)
		}}}
}

// Command returns `docker -H unix://SOCKET args...`, with its own client config
// directory (nothing lands in ~/.docker).
func (d *Dockerd) Command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "docker", append([]string{"-H", "unix://" + d.Socket}, args...)...)
	cmd.Env = append(os.Environ(), "DOCKER_CONFIG="+filepath.Join(d.Dir, "client"), "DOCKER_CLI_HINTS=false")
	return cmd
}

// Docker runs the docker client against this daemon and returns its standard
// output; a failure's error carries its standard error.
func (d *Dockerd) Docker(ctx context.Context, args ...string) (string, error) {
	cmd := d.Command(ctx, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// Log returns what dockerd logged.
func (d *Dockerd) Log() string {
	b, _ := os.ReadFile(filepath.Join(d.Dir, "dockerd.log"))
	return string(b)
}

// PID returns dockerd's process ID.
func (d *Dockerd) PID() int { return d.proc.cmd.Process.Pid }

// Stop stops dockerd (SIGTERM: it stops its containers and its containerd; SIGKILL
// to its process group after 30s), unmounts what it left under its directory and
// removes /run/docker/plugins if this process's first dockerd made it.
func (d *Dockerd) Stop() error {
	var err error
	select {
	case <-d.proc.done:
	default:
		d.proc.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.proc.done:
		case <-time.After(30 * time.Second):
			err = errors.New("dockerd did not stop within 30s of SIGTERM; killed")
			syscall.Kill(-d.proc.cmd.Process.Pid, syscall.SIGKILL)
			<-d.proc.done
		}
	}
	d.once.Do(releaseRunDocker)
	unmountUnder(d.Dir)
	return err
}

func releaseRunDocker() {
	runDocker.Lock()
	defer runDocker.Unlock()
	runDocker.users--
	if runDocker.users > 0 {
		return
	}
	if !runDocker.hadPlugins {
		os.Remove(filepath.Join(runDockerDir, "plugins")) // only if empty
	}
	if !runDocker.hadRun {
		os.Remove(runDockerDir)
	}
}
