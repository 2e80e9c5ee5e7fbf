package corpus

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// hostApt is the build host's apt-get run with a private configuration: its
// own sources (the corpus Source, not the host's), lists, status and caches under
// the corpus work directory, and none of the host's apt.conf.d. Its lists are
// exactly what apt inside the images reads (same Debian release of apt, same
// sources), so one `apt-get update` per build serves every chroot, which gets
// the lists directory bind-mounted. It also downloads .debs for scratch images,
// which have no package manager.
type hostApt struct {
	dir  string // work/apt
	src  Source
	once sync.Once
	err  error
}

func newHostApt(dir string, src Source) *hostApt { return &hostApt{dir: dir, src: src} }

func (a *hostApt) lists() string { return filepath.Join(a.dir, "lists") }

// archives returns a per-worker package cache (apt locks its cache directory,
// so parallel workers cannot share one).
func (a *hostApt) archives(worker int) string {
	return filepath.Join(a.dir, fmt.Sprintf("archives-%d", worker))
}

func (a *hostApt) sourcesList() string {
	return fmt.Sprintf("deb %s %s main\n", a.src.Mirror, a.src.Suite)
}

func (a *hostApt) setup() error {
	for _, d := range []string{"parts", "lists/partial", "state", "cache"} {
		if err := os.MkdirAll(filepath.Join(a.dir, d), 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(a.dir, "sources.list"), []byte(a.sourcesList()), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(a.dir, "status"), nil, 0o644); err != nil {
		return err
	}
	conf := fmt.Sprintf(`Dir::Etc::Parts "%[1]s/parts";
Dir::Etc::SourceList "%[1]s/sources.list";
Dir::Etc::SourceParts "%[1]s/parts";
Dir::Etc::PreferencesParts "%[1]s/parts";
Dir::Etc::Preferences "%[1]s/parts/none";
Dir::State "%[1]s/state";
Dir::State::Lists "%[1]s/lists";
Dir::State::status "%[1]s/status";
Dir::Cache "%[1]s/cache";
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
Acquire::Languages "none";
APT::Sandbox::User "root";
APT::Architecture "amd64";
APT::Architectures { "amd64"; };
`, a.dir)
	return os.WriteFile(filepath.Join(a.dir, "apt.conf"), []byte(conf), 0o644)
}

func (a *hostApt) command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "apt-get", args...)
	cmd.Env = []string{"APT_CONFIG=" + filepath.Join(a.dir, "apt.conf"),
		"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND=noninteractive", "LC_ALL=C"}
	return cmd
}

// update runs apt-get update once per build.
func (a *hostApt) update(ctx context.Context, logFile string) error {
	a.once.Do(func() {
		if a.err = a.setup(); a.err != nil {
			return
		}
		cmd := a.command(ctx, "-q", "update")
		out, err := cmd.CombinedOutput()
		appendFile(logFile, out)
		if err != nil {
			a.err = fmt.Errorf("apt-get update (%s %s): %w\n%s", a.src.Mirror, a.src.Suite, err, lastLines(out, 10))
		}
	})
	return a.err
}

// download fetches the named packages (no dependencies) into dir and returns
// the .deb paths with their versions.
func (a *hostApt) download(ctx context.Context, pkgs []string, dir, logFile string) ([]string, []Package, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, err
	}
	cmd := a.command(ctx, append([]string{"-q", "download"}, pkgs...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	appendFile(logFile, out)
	if err != nil {
		t := lastLines(out, 10)
		return nil, nil, fmt.Errorf("apt-get download %s%s: %w\n%s", strings.Join(pkgs, " "), reason(t), err, t)
	}
	debs, err := filepath.Glob(filepath.Join(dir, "*.deb"))
	if err != nil {
		return nil, nil, err
	}
	var got []Package
	for _, d := range debs {
		out, err := exec.CommandContext(ctx, "dpkg-deb", "-f", d, "Package", "Version", "Architecture").Output()
		if err != nil {
			return nil, nil, fmt.Errorf("dpkg-deb -f %s: %w", d, err)
		}
		f := map[string]string{}
		for _, line := range strings.Split(string(out), "\n") {
			if k, v, ok := strings.Cut(line, ": "); ok {
				f[k] = v
			}
		}
		got = append(got, Package{Name: f["Package"], Version: f["Version"], Arch: f["Architecture"]})
	}
	return debs, got, nil
}

// chrootArgs are the apt-get options used inside images.
func (a *hostApt) chrootArgs() []string {
	args := []string{"-q", "-y",
		"-o", "Acquire::Languages=none",
		"-o", "Dir::Cache::pkgcache=", "-o", "Dir::Cache::srcpkgcache=",
		"-o", "Dpkg::Options::=--force-confdef", "-o", "Dpkg::Options::=--force-confold",
		"-o", "Dpkg::Use-Pty=0", "-o", "APT::Sandbox::User=root",
		"-o", fmt.Sprintf("APT::Install-Recommends=%v", a.src.Recommends),
	}
	return args
}

func appendFile(file string, b []byte) {
	if file == "" {
		return
	}
	f, err := os.OpenFile(file, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return
	}
	f.Write(b)
	f.Close()
}

func lastLines(b []byte, n int) string {
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
