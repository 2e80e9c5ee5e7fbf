package runc

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/slacker-dev/slacker/internal/testutil"
)

func TestEtcHosts(t *testing.T) {
	tests := []struct {
		hostname string
		want     []string
		absent   string
	}{
		{"web1", []string{"127.0.0.1\tlocalhost\n", "::1\tlocalhost ip6-localhost ip6-loopback\n", "127.0.1.1\tweb1\n"}, ""},
		{"localhost", []string{"127.0.0.1\tlocalhost\n"}, "127.0.1.1"},
		{"", []string{"127.0.0.1\tlocalhost\n"}, "127.0.1.1"},
	}
	for _, tt := range tests {
		got := EtcHosts(tt.hostname)
		for _, w := range tt.want {
			if !strings.Contains(got, w) {
				t.Errorf("EtcHosts(%q) = %q, lacks %q", tt.hostname, got, w)
			}
		}
		if tt.absent != "" && strings.Contains(got, tt.absent) {
			t.Errorf("EtcHosts(%q) = %q, has %q", tt.hostname, got, tt.absent)
		}
	}
}

func TestResolvConf(t *testing.T) {
	host := []byte("# generated\nsearch example.org\nnameserver 127.0.0.53\nnameserver 10.0.0.2\nnameserver ::1\noptions edns0\n")
	tests := []struct {
		hostNet bool
		want    string
	}{
		{false, "# generated\nsearch example.org\nnameserver 10.0.0.2\noptions edns0\n"},
		{true, string(host)},
	}
	for _, tt := range tests {
		if got := ResolvConf(host, tt.hostNet); got != tt.want {
			t.Errorf("ResolvConf(hostNetwork=%v) = %q, want %q", tt.hostNet, got, tt.want)
		}
	}
}

func TestSpecBindsEtc(t *testing.T) {
	root := t.TempDir()
	for _, tt := range []struct {
		etc  string
		want int
	}{{"", 0}, {"/state/c1/etc", 3}} {
		s, err := Spec(Config{ID: "c1", Rootfs: root, Args: []string{"true"}, EtcDir: tt.etc})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, m := range s.Mounts {
			if m.Destination == "/run" {
				t.Errorf("spec mounts something on /run: %+v (Docker leaves the image's /run)", m)
			}
			if !strings.HasPrefix(m.Destination, "/etc/") {
				continue
			}
			n++
			f := strings.TrimPrefix(m.Destination, "/etc/")
			if m.Type != "bind" || m.Source != filepath.Join(tt.etc, f) {
				t.Errorf("mount %+v: want a bind of %s", m, filepath.Join(tt.etc, f))
			}
		}
		if n != tt.want {
			t.Errorf("EtcDir %q: %d /etc mounts, want %d", tt.etc, n, tt.want)
		}
	}
}

// TestRunSeesEtcAndRun runs a static program with runc in a root filesystem that has
// no /etc at all, and checks that it sees the generated hosts, hostname and
// resolv.conf and the image's own /run (no tmpfs over it).
func TestRunSeesEtcAndRun(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "runc", "go")
	work := t.TempDir()
	rootfs := filepath.Join(work, "rootfs")
	if err := os.MkdirAll(filepath.Join(rootfs, "run", "lock"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(rootfs, "run", "lock", "marker"), []byte("from the image\n"), 0o644)
	src := filepath.Join(work, "main.go")
	os.WriteFile(src, []byte(`package main

import (
	"fmt"
	"os"
)

func main() {
	for _, f := range []string{"/etc/hosts", "/etc/hostname", "/run/lock/marker"} {
		b, err := os.ReadFile(f)
		fmt.Printf("== %s %v\n%s", f, err, b)
	}
	h, _ := os.Hostname()
	fmt.Printf("== hostname %s\n", h)
}
`), 0o644)
	build := exec.Command("go", "build", "-o", filepath.Join(rootfs, "probe"), src)
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GO111MODULE=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build probe: %v: %s", err, out)
	}
	etc := filepath.Join(work, "etc")
	if err := WriteEtc(etc, "probe-host", false); err != nil {
		t.Fatal(err)
	}
	bundle := filepath.Join(work, "bundle")
	cfg := Config{ID: "etc-test-" + filepath.Base(work), Rootfs: rootfs, Image: ocispec.ImageConfig{Cmd: []string{"/probe"}},
		Hostname: "probe-host", EtcDir: etc}
	if err := WriteBundle(bundle, cfg); err != nil {
		t.Fatal(err)
	}
	rt := &Runtime{Root: filepath.Join(work, "runc")}
	t.Cleanup(func() { rt.Delete(context.Background(), cfg.ID, true) })
	var out, errb bytes.Buffer
	code, err := rt.Run(context.Background(), cfg.ID, bundle, Stdio{Out: &out, Err: &errb})
	if err != nil || code != 0 {
		t.Fatalf("run: code %d, %v; stderr %s", code, err, errb.String())
	}
	got := out.String()
	for _, w := range []string{"== /etc/hosts <nil>\n127.0.0.1\tlocalhost\n", "127.0.1.1\tprobe-host\n",
		"== /etc/hostname <nil>\nprobe-host\n", "== /run/lock/marker <nil>\nfrom the image\n", "== hostname probe-host\n"} {
		if !strings.Contains(got, w) {
			t.Errorf("container output lacks %q:\n%s", w, got)
		}
	}
	// The bind targets were created in the container's root, as runc does.
	if _, err := os.Stat(filepath.Join(rootfs, "etc", "hosts")); err != nil {
		t.Errorf("mount point /etc/hosts: %v", err)
	}
}
