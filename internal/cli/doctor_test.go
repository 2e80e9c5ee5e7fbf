package cli

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/slacker-dev/slacker/internal/testenv"
)

func fakeEnv(t *testing.T, filesystems string, tools ...string) doctorEnv {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "filesystems"), []byte(filesystems), 0o644)
	dev := filepath.Join(dir, "dev")
	os.MkdirAll(dev, 0o755)
	os.WriteFile(filepath.Join(dev, "fuse"), nil, 0o644)
	os.WriteFile(filepath.Join(dev, "loop-control"), nil, 0o644)
	have := map[string]bool{}
	for _, tl := range tools {
		have[tl] = true
	}
	return doctorEnv{
		euid: 0, procFilesystems: filepath.Join(dir, "filesystems"), dev: dev, kernelRelease: "6.18.44-1",
		lookPath: func(name string) (string, error) {
			if have[name] {
				return "/usr/bin/" + name, nil
			}
			return "", errors.New("not found")
		},
		output: func(ctx context.Context, name string, args ...string) (string, error) {
			return filepath.Base(name) + " 1.2.3\n", nil
		},
		slackerdConfig: filepath.Join(dir, "none.toml"),
		socket:         filepath.Join(dir, "no.sock"),
	}
}

func find(cs []check, name string) check {
	for _, c := range cs {
		if c.Name == name {
			return c
		}
	}
	return check{Name: name, Status: "absent"}
}

func TestDoctorKernelAndTools(t *testing.T) {
	all := "nodev\tfuse\n\text4\n"
	for _, tc := range []struct {
		name        string
		filesystems string
		tools       []string
		removeDev   string
		check       string
		status      string
		fix         string
	}{
		{"all there", all, []string{"runc", "mkfs.ext4", "e2fsck"}, "", "kernel ext4", "ok", ""},
		{"no ext4", "nodev\tfuse\n", nil, "", "kernel ext4", "fail", "modprobe ext4"},
		{"no fuse device", all, nil, "fuse", "kernel fuse", "fail", "modprobe fuse"},
		{"no loop", all, nil, "loop-control", "kernel loop", "fail", "modprobe loop"},
		{"no runc", all, []string{"mkfs.ext4"}, "", "tool runc", "fail", "apt-get install runc"},
		{"no e2fsprogs", all, []string{"runc"}, "", "tool mkfs.ext4", "fail", "apt-get install e2fsprogs"},
		{"runc version", all, []string{"runc"}, "", "tool runc", "ok", ""},
		{"no slackerd", all, nil, "", "slackerd", "fail", "start slackerd"},
		{"kernel release", all, nil, "", "kernel release", "ok", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			de := fakeEnv(t, tc.filesystems, tc.tools...)
			if tc.removeDev != "" {
				os.Remove(filepath.Join(de.dev, tc.removeDev))
			}
			de.slackerdConfig = filepath.Join(t.TempDir(), "slackerd.toml")
			os.WriteFile(de.slackerdConfig, []byte(""), 0o644)
			c := find(runDoctor(context.Background(), de), tc.check)
			if c.Status != tc.status || !strings.Contains(c.Fix, tc.fix) {
				t.Fatalf("%s: %+v, want %s with fix %q", tc.check, c, tc.status, tc.fix)
			}
		})
	}
}

func TestDoctorKernelRelease(t *testing.T) {
	for _, tc := range []struct{ release, status, detail string }{
		{"6.18.44-fc-v595", "ok", "FUSE resend"},
		{"6.9.0", "ok", "passthrough"},
		{"7.0.1", "ok", ""},
		{"6.8.12-amd64", "warn", "older than 6.9"},
		{"6.1.0-28-amd64", "warn", "fuse_hold"},
		{"5.10.0", "warn", "older than 6.9"},
		{"", "warn", "cannot tell"},
		{"linux", "warn", "cannot tell"},
	} {
		c := kernelReleaseCheck(tc.release)
		if c.Status != tc.status || !strings.Contains(c.Detail, tc.detail) {
			t.Errorf("%q: %+v, want %s saying %q", tc.release, c, tc.status, tc.detail)
		}
		if c.Status == "warn" && c.Fix == "" && tc.release != "" && tc.release != "linux" {
			t.Errorf("%q: a warning with no fix", tc.release)
		}
	}
}

func TestDoctorContainerdConfig(t *testing.T) {
	sock := "/run/slacker/snapshotter.sock"
	for _, tc := range []struct {
		name, toml string
		check      string
		status     string
		fix        string
	}{
		{"no proxy plugin", `version = 2`, "containerd proxy plugin", "fail", "[proxy_plugins.slacker]"},
		{"wrong address", "version = 2\n[proxy_plugins.slacker]\ntype = \"snapshot\"\naddress = \"/x.sock\"", "containerd proxy plugin", "fail", sock},
		{"right", "version = 2\n[proxy_plugins.slacker]\ntype = \"snapshot\"\naddress = \"" + sock + "\"", "containerd proxy plugin", "ok", ""},
		{"CRI default snapshotter", `version = 2`, "CRI snapshotter", "warn", `snapshotter = "slacker"`},
		{"CRI annotations default", `version = 2`, "CRI snapshot annotations", "warn", "disable_snapshot_annotations = false"},
		{"CRI set", "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\nsnapshotter = \"slacker\"\ndisable_snapshot_annotations = false",
			"CRI snapshot annotations", "ok", ""},
		{"CRI off", "version = 2\ndisabled_plugins = [\"io.containerd.grpc.v1.cri\"]", "CRI snapshotter", "absent", ""},
		{"broken", "version = = 2", "containerd config", "fail", "correct"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "config.toml")
			os.WriteFile(p, []byte(tc.toml), 0o644)
			c := find(containerdConfigChecks(p, sock), tc.check)
			if c.Status != tc.status || !strings.Contains(c.Fix, tc.fix) {
				t.Fatalf("%s: %+v, want %s with fix %q", tc.check, c, tc.status, tc.fix)
			}
		})
	}
}

// TestDoctorAgainstDaemon: a running slackerd, its store and a well-configured
// containerd pass; an exit code says whether anything failed.
func TestDoctorAgainstDaemon(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{})
	de := fakeEnv(t, "nodev\tfuse\n\text4\n", "runc", "mkfs.ext4", "e2fsck")
	de.socket = d.Socket
	cfg := filepath.Join(t.TempDir(), "slackerd.toml")
	os.WriteFile(cfg, []byte("socket = \""+d.Socket+"\"\nstore = \""+d.StoreDir+"\"\nsnapshotter_socket = \"off\"\n"), 0o644)
	de.slackerdConfig = cfg
	cs := runDoctor(context.Background(), de)
	for _, name := range []string{"slackerd", "store", "slackerd config"} {
		if c := find(cs, name); c.Status != "ok" {
			t.Errorf("%s: %+v", name, c)
		}
	}
	var out, errb strings.Builder
	e := &env{stdout: &out, stderr: &errb, socket: d.Socket}
	cmd := newDoctor(e)
	cmd.SetArgs([]string{"--config", filepath.Join(t.TempDir(), "missing.toml")})
	err := cmd.ExecuteContext(context.Background())
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != 1 || !strings.Contains(out.String(), "fix:") {
		t.Fatalf("doctor with a missing config: %v\n%s", err, out.String())
	}
}

// TestShippedContainerdConfig: the snippet in contrib/systemd passes every check.
func TestShippedContainerdConfig(t *testing.T) {
	for _, c := range containerdConfigChecks("../../contrib/systemd/containerd-slacker.toml", "/run/slacker/snapshotter.sock") {
		if c.Status != "ok" {
			t.Errorf("%+v", c)
		}
	}
}

func TestReceiveBufferCheck(t *testing.T) {
	for _, tc := range []struct {
		name          string
		asked         int64
		rmemMax       int
		status, words string
	}{
		{"default, allowed", 0, 4 << 20, "ok", "4.0 MiB per connection"},
		{"default, the kernel's default limit", 0, 212992, "warn", "rmem_max is 212992"},
		{"asked, allowed", 1 << 20, 4 << 20, "ok", "1.0 MiB per connection"},
		{"off", -1, 212992, "ok", "autotuning"},
	} {
		c := receiveBufferCheck(tc.asked, tc.rmemMax)
		if c.Status != tc.status || !strings.Contains(c.Detail, tc.words) {
			t.Errorf("%s: %s %q, want %s and %q", tc.name, c.Status, c.Detail, tc.status, tc.words)
		}
		if c.Status == "warn" && !strings.Contains(c.Fix, "net.core.rmem_max=4194304") {
			t.Errorf("%s: fix %q names no sysctl for the 4 MiB asked", tc.name, c.Fix)
		}
	}
}
