package services

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// Registry is a running docker-registry (distribution 2.8) serving plain HTTP on
// loopback, storing blobs under its directory, with deletes enabled.
type Registry struct {
	// Addr is host:port, e.g. 127.0.0.1:5000.
	Addr string
	Dir  string
	proc *process
}

// RegistryOptions configures StartRegistry.
type RegistryOptions struct {
	// Dir holds the registry's data, config and log. Required.
	Dir string
	// Addr to listen on; empty picks a free loopback port.
	Addr string
}

// StartRegistry starts docker-registry and waits until it answers /v2/.
func StartRegistry(ctx context.Context, opts RegistryOptions) (*Registry, error) {
	if opts.Dir == "" {
		return nil, fmt.Errorf("start registry: no directory given")
	}
	addr := opts.Addr
	if addr == "" {
		var err error
		if addr, err = FreeLoopbackAddr(); err != nil {
			return nil, fmt.Errorf("start registry: %w", err)
		}
	}
	if err := os.MkdirAll(filepath.Join(opts.Dir, "data"), 0o700); err != nil {
		return nil, fmt.Errorf("start registry: %w", err)
	}
	// Not the Debian package's config: it enables htpasswd auth and listens on all
	// interfaces. See ../shared/RUNTIME.md.
	config := fmt.Sprintf(`version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
http:
  addr: %s
`, filepath.Join(opts.Dir, "data"), addr)
	cfgPath := filepath.Join(opts.Dir, "config.yml")
	if err := os.WriteFile(cfgPath, []byte(config), 0o600); err != nil {
		return nil, fmt.Errorf("start registry: %w", err)
	}
	p, err := startProcess("docker-registry", filepath.Join(opts.Dir, "registry.log"), "serve", cfgPath)
	if err != nil {
		return nil, err
	}
	r := &Registry{Addr: addr, Dir: opts.Dir, proc: p}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	client := &http.Client{Timeout: time.Second}
	err = waitFor(ctx, p, "docker-registry", func() error {
		resp, err := client.Get("http://" + addr + "/v2/")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET /v2/: %s: %w", resp.Status, errNotReady)
		}
		return nil
	})
	if err != nil {
		r.Stop()
		return nil, err
	}
	return r, nil
}

// PID returns the registry's process ID.
func (r *Registry) PID() int { return r.proc.cmd.Process.Pid }

// Stop stops the registry and waits for it to exit. It is safe to call twice.
func (r *Registry) Stop() error { return r.proc.stop(5 * time.Second) }
