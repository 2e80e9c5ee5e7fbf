package services

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// MinIOModule is the MinIO server version the tests build (`go install`), pinned so
// every machine runs the same server and the cached binary stays valid.
const MinIOModule = "github.com/minio/minio@v0.0.0-20260212201848-7aac2a2c5b7c"

// MinIO is a running MinIO server (S3-compatible) with its own data directory and
// root credentials, serving plain HTTP.
type MinIO struct {
	// Addr is host:port of the S3 API.
	Addr                 string
	Dir                  string
	AccessKey, SecretKey string
	proc                 *process
}

// MinIOOptions configure StartMinIO.
type MinIOOptions struct {
	// Dir holds the server's data, certs directory and log. Required.
	Dir string
	// Addr to listen on; empty picks a free loopback port.
	Addr string
	// Binary is the minio program; empty finds or builds it (FindMinIO).
	Binary string
	// CacheDir keeps the built binary between runs (default SLACKER_TEST_CACHE or
	// /var/cache/slacker-test).
	CacheDir string
	// AccessKey and SecretKey are the root credentials (default: "slacker" and a
	// random secret).
	AccessKey, SecretKey string
}

func defaultCacheDir() string {
	if d := os.Getenv("SLACKER_TEST_CACHE"); d != "" {
		return d
	}
	return "/var/cache/slacker-test"
}

// FindMinIO returns the path of a minio binary: $SLACKER_MINIO if set, else the one
// built earlier under cacheDir/bin, else it builds MinIOModule with `go install`
// into cacheDir/bin (a few minutes, once; concurrent callers share one build
// through a file lock).
func FindMinIO(ctx context.Context, cacheDir string) (string, error) {
	if p := os.Getenv("SLACKER_MINIO"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("SLACKER_MINIO: %w", err)
		}
		return p, nil
	}
	if cacheDir == "" {
		cacheDir = defaultCacheDir()
	}
	bin := filepath.Join(cacheDir, "bin")
	target := filepath.Join(bin, "minio-"+minioVersion())
	if _, err := os.Stat(target); err == nil {
		return target, nil
	}
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return "", fmt.Errorf("minio: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(bin, ".minio.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return "", fmt.Errorf("minio: %w", err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return "", fmt.Errorf("minio: %w", err)
	}
	defer unix.Flock(int(lock.Fd()), unix.LOCK_UN)
	if _, err := os.Stat(target); err == nil {
		return target, nil // built by another process while we waited
	}
	if _, err := exec.LookPath("go"); err != nil {
		return "", fmt.Errorf("minio is not built and the Go toolchain is missing to build it: %w", err)
	}
	tmp, err := os.MkdirTemp(bin, "build-")
	if err != nil {
		return "", fmt.Errorf("minio: %w", err)
	}
	defer os.RemoveAll(tmp)
	cmd := exec.CommandContext(ctx, "go", "install", "-trimpath", MinIOModule)
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "CGO_ENABLED=0")
	cmd.Dir = tmp // outside any module, so go install ignores ours
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build minio (go install %s): %v\n%s", MinIOModule, err, tail(out))
	}
	if err := os.Rename(filepath.Join(tmp, "minio"), target); err != nil {
		return "", fmt.Errorf("minio: %w", err)
	}
	return target, nil
}

func minioVersion() string {
	for i := len(MinIOModule) - 1; i >= 0; i-- {
		if MinIOModule[i] == '@' {
			return MinIOModule[i+1:]
		}
	}
	return "latest"
}

func tail(b []byte) []byte {
	if len(b) > 3000 {
		return b[len(b)-3000:]
	}
	return b
}

// StartMinIO starts a MinIO server and waits until it is ready to serve requests.
func StartMinIO(ctx context.Context, o MinIOOptions) (*MinIO, error) {
	if o.Dir == "" {
		return nil, fmt.Errorf("start minio: no directory given")
	}
	bin := o.Binary
	if bin == "" {
		var err error
		if bin, err = FindMinIO(ctx, o.CacheDir); err != nil {
			return nil, fmt.Errorf("start minio: %w", err)
		}
	}
	addr := o.Addr
	if addr == "" {
		var err error
		if addr, err = FreeLoopbackAddr(); err != nil {
			return nil, fmt.Errorf("start minio: %w", err)
		}
	}
	if o.AccessKey == "" {
		o.AccessKey = "slacker"
	}
	if o.SecretKey == "" {
		b := make([]byte, 16)
		rand.Read(b)
		o.SecretKey = hex.EncodeToString(b)
	}
	data, certs := filepath.Join(o.Dir, "data"), filepath.Join(o.Dir, "certs")
	for _, d := range []string{data, certs} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("start minio: %w", err)
		}
	}
	// The console is off and so are update checks; --certs-dir keeps MinIO out of
	// $HOME/.minio.
	env := []string{"MINIO_ROOT_USER=" + o.AccessKey, "MINIO_ROOT_PASSWORD=" + o.SecretKey,
		"MINIO_BROWSER=off", "MINIO_UPDATE=off", "MINIO_CONFIG_ENV_FILE="}
	p, err := startProcessEnv(bin, env, filepath.Join(o.Dir, "minio.log"),
		"server", data, "--address", addr, "--certs-dir", certs, "--quiet", "--anonymous")
	if err != nil {
		return nil, err
	}
	m := &MinIO{Addr: addr, Dir: o.Dir, AccessKey: o.AccessKey, SecretKey: o.SecretKey, proc: p}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	client := &http.Client{Timeout: time.Second}
	err = waitFor(ctx, p, "minio", func() error {
		resp, err := client.Get("http://" + addr + "/minio/health/ready")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET /minio/health/ready: %s: %w", resp.Status, errNotReady)
		}
		// Ready can come before the S3 API and its IAM are (they answer 503
		// XMinioServerNotInitialized): wait until an anonymous request is refused.
		resp, err = client.Get("http://" + addr + "/")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			return fmt.Errorf("GET /: %s: %w", resp.Status, errNotReady)
		}
		return nil
	})
	if err != nil {
		m.Stop()
		return nil, err
	}
	return m, nil
}

// Location is the store location (see package s3) of a bucket and prefix on this
// server, with its credentials; the bucket is created on first open.
func (m *MinIO) Location(bucket, prefix string) string {
	loc := fmt.Sprintf("s3://%s:%s@%s/%s", m.AccessKey, m.SecretKey, m.Addr, bucket)
	if prefix != "" {
		loc += "/" + prefix
	}
	return loc + "?insecure=1&create=1"
}

// PID returns the server's process ID.
func (m *MinIO) PID() int { return m.proc.cmd.Process.Pid }

// Stop stops the server and waits for it to exit. It is safe to call twice.
func (m *MinIO) Stop() error { return m.proc.stop(10 * time.Second) }

// startProcessEnv is startProcess with extra environment variables (MinIO takes its
// root credentials only from the environment).
func startProcessEnv(name string, env []string, logPath string, args ...string) (*process, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{}), log: logPath}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	return p, nil
}
