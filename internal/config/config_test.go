package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestSnapshotterAndRegistryKeys(t *testing.T) {
	dir := t.TempDir()
	dockerCfg := filepath.Join(dir, "config.json")
	os.WriteFile(dockerCfg, []byte(`{"auths":{}}`), 0o600)
	other := filepath.Join(dir, "auth.json")
	os.WriteFile(other, []byte(`{}`), 0o600)
	for _, tc := range []struct {
		name, toml   string
		wantSocket   string
		wantDocker   string
		wantInsecure bool
		wantErr      string
	}{
		{name: "defaults", toml: ``, wantSocket: "/run/slacker/snapshotter.sock"},
		{name: "next to the API socket", toml: `socket = "/srv/s/api.sock"`, wantSocket: "/srv/s/snapshotter.sock"},
		{name: "explicit", toml: `snapshotter_socket = "/run/x.sock"`, wantSocket: "/run/x.sock"},
		{name: "off", toml: `snapshotter_socket = "off"`, wantSocket: ""},
		{name: "same as API", toml: "socket = \"/a.sock\"\nsnapshotter_socket = \"/a.sock\"", wantErr: "must differ"},
		{name: "credentials", toml: "[registry]\ndocker_config = \"" + dockerCfg + "\"\ninsecure = true",
			wantSocket: "/run/slacker/snapshotter.sock", wantDocker: dockerCfg, wantInsecure: true},
		{name: "credentials file name", toml: "[registry]\ndocker_config = \"" + other + "\"", wantErr: "config.json"},
		{name: "credentials missing", toml: "[registry]\ndocker_config = \"" + dir + "/no/config.json\"", wantErr: "no such file"},
		{name: "unknown key", toml: "[registry]\npassword = \"x\"", wantErr: "unknown keys"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "slackerd.toml")
			os.WriteFile(p, []byte(tc.toml), 0o600)
			d, err := Load(p)
			var r Resolved
			if err == nil {
				r, err = d.Resolve()
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.SnapshotterSocket != tc.wantSocket || r.DockerConfig != tc.wantDocker || r.InsecureRegistry != tc.wantInsecure {
				t.Fatalf("got socket %q docker %q insecure %v", r.SnapshotterSocket, r.DockerConfig, r.InsecureRegistry)
			}
		})
	}
}

func TestStartupTrace(t *testing.T) {
	for _, tc := range []struct {
		value   string
		want    time.Duration
		wantErr bool
	}{
		{value: "", want: 0}, // the node's default
		{value: "45s", want: 45 * time.Second},
		{value: "off", want: -1},
		{value: "0s", wantErr: true},
		{value: "-5s", wantErr: true},
		{value: "soon", wantErr: true},
	} {
		d := Defaults()
		d.Root, d.StartupTrace = t.TempDir(), tc.value
		r, err := d.Resolve()
		if tc.wantErr {
			if err == nil || !strings.Contains(err.Error(), "startup_trace") {
				t.Errorf("%q: err %v, want one naming startup_trace", tc.value, err)
			}
			continue
		}
		if err != nil || r.StartupWindow != tc.want {
			t.Errorf("%q: window %v, err %v; want %v", tc.value, r.StartupWindow, err, tc.want)
		}
	}
}

func TestContainerRoot(t *testing.T) {
	for value, want := range map[string]string{"": "shared", "shared": "shared", "block": "block", "zfs": ""} {
		d := Defaults()
		d.Root, d.ContainerRoot = t.TempDir(), value
		r, err := d.Resolve()
		if want == "" {
			if err == nil || !strings.Contains(err.Error(), `container_root "zfs"`) {
				t.Errorf("%q: err %v, want one naming container_root", value, err)
			}
			continue
		}
		if err != nil || r.ContainerRoot != want {
			t.Errorf("%q: %q, err %v; want %q", value, r.ContainerRoot, err, want)
		}
	}
}

func TestLocalImages(t *testing.T) {
	for value, want := range map[string]int64{"": DefaultLocalImageBytes, "off": 0, "2GiB": 2 << 30, "0": -1, "lots": -1} {
		d := Defaults()
		d.Root, d.LocalImages = t.TempDir(), value
		r, err := d.Resolve()
		if want < 0 {
			if err == nil || !strings.Contains(err.Error(), "local_images") {
				t.Errorf("%q: err %v, want one naming local_images", value, err)
			}
			continue
		}
		if err != nil || r.LocalImageBytes != want {
			t.Errorf("%q: %d, err %v; want %d", value, r.LocalImageBytes, err, want)
		}
	}
}

func TestLocalImageFormat(t *testing.T) {
	for _, value := range []string{"", "tree", "ext4", "erofs"} {
		d := Defaults()
		d.Root, d.LocalImageFormat = t.TempDir(), value
		r, err := d.Resolve()
		if value == "erofs" {
			if err == nil || !strings.Contains(err.Error(), "local_image_format") {
				t.Errorf("%q: err %v, want one naming local_image_format", value, err)
			}
			continue
		}
		if err != nil || r.LocalImageFormat != value {
			t.Errorf("%q: %q, err %v", value, r.LocalImageFormat, err)
		}
	}
}

func TestImageRootLinger(t *testing.T) {
	for value, want := range map[string]time.Duration{"": DefaultImageRootLinger, "off": 0, "30s": 30 * time.Second, "0s": -1, "-1m": -1, "soon": -1} {
		d := Defaults()
		d.Root, d.ImageRootLinger = t.TempDir(), value
		r, err := d.Resolve()
		if want < 0 {
			if err == nil || !strings.Contains(err.Error(), "image_root_linger") {
				t.Errorf("%q: err %v, want one naming image_root_linger", value, err)
			}
			continue
		}
		if err != nil || r.ImageRootLinger != want {
			t.Errorf("%q: %v, err %v; want %v", value, r.ImageRootLinger, err, want)
		}
	}
}

// TestShippedConfig: the example in contrib/systemd loads and resolves.
func TestShippedConfig(t *testing.T) {
	d, err := Load("../../contrib/systemd/slackerd.toml")
	if err != nil {
		t.Fatal(err)
	}
	r, err := d.Resolve()
	if err != nil || r.SnapshotterSocket != "/run/slacker/snapshotter.sock" {
		t.Fatalf("%+v %v", r, err)
	}
}

func TestFUSEHold(t *testing.T) {
	for value, want := range map[string]time.Duration{"": DefaultFUSEHold, "off": 0, "30s": 30 * time.Second, "0s": -1, "-1m": -1, "soon": -1} {
		d := Defaults()
		d.Root, d.FUSEHold = t.TempDir(), value
		r, err := d.Resolve()
		if want < 0 {
			if err == nil || !strings.Contains(err.Error(), "fuse_hold") {
				t.Errorf("%q: err %v, want one naming fuse_hold", value, err)
			}
			continue
		}
		if err != nil || r.FUSEHold != want {
			t.Errorf("%q: %v, err %v; want %v", value, r.FUSEHold, err, want)
		}
	}
}

// Sizes that must be whole 4 KiB blocks, each in its bounds; a bad one gets an
// error naming its setting.
func TestBlockMultiples(t *testing.T) {
	for _, tc := range []struct {
		key    string
		set    func(*Daemon, string)
		get    func(Resolved) int64
		values map[string]int64 // -1: refused
	}{
		{"chunk_size", func(d *Daemon, v string) { d.ChunkSize = v }, func(r Resolved) int64 { return r.ChunkSize },
			map[string]int64{"256KiB": 256 << 10, "64MiB": 64 << 20, "0": -1, "6000": -1, "128MiB": -1, "": -1}},
		{"volume_readahead", func(d *Daemon, v string) { d.VolumeReadahead = v }, func(r Resolved) int64 { return r.VolumeReadahead },
			map[string]int64{"": 0, "16KiB": 16 << 10, "128KiB": 128 << 10, "4KiB": 4096, "0": -1, "1000": -1, "32MiB": -1, "lots": -1}},
		{"startup_chunk_size", func(d *Daemon, v string) { d.StartupChunkSize = v }, func(r Resolved) int64 { return r.StartupChunkSize },
			map[string]int64{"": 0, "256KiB": 256 << 10, "4MiB": 4 << 20, "0": -1, "6000": -1, "128MiB": -1, "big": -1}},
	} {
		for value, want := range tc.values {
			d := Defaults()
			d.Root = t.TempDir()
			tc.set(&d, value)
			r, err := d.Resolve()
			if want < 0 {
				if err == nil || !strings.Contains(err.Error(), tc.key) {
					t.Errorf("%s %q: err %v, want one naming %s", tc.key, value, err, tc.key)
				}
				continue
			}
			if err != nil || tc.get(r) != want {
				t.Errorf("%s %q: %d, err %v; want %d", tc.key, value, tc.get(r), err, want)
			}
		}
	}
}

func TestFirstStartReadahead(t *testing.T) {
	const bad = -2
	for value, want := range map[string]int64{"": 0, "off": -1, "256KiB": 256 << 10, "1MiB": 1 << 20, "0": bad, "128MiB": bad, "lots": bad} {
		d := Defaults()
		d.Root, d.FirstStartReadahead = t.TempDir(), value
		r, err := d.Resolve()
		if want == bad {
			if err == nil || !strings.Contains(err.Error(), "first_start_readahead") {
				t.Errorf("%q: err %v, want one naming first_start_readahead", value, err)
			}
			continue
		}
		if err != nil || r.FirstStartReadahead != want {
			t.Errorf("%q: %d, err %v; want %d", value, r.FirstStartReadahead, err, want)
		}
	}
}

func TestStartupReadahead(t *testing.T) {
	const bad = -2
	for value, want := range map[string]int64{"": 0, "off": -1, "16KiB": 16 << 10, "1MiB": 1 << 20, "0": bad, "6000": bad, "32MiB": bad, "lots": bad} {
		d := Defaults()
		d.Root, d.StartupReadahead = t.TempDir(), value
		r, err := d.Resolve()
		if want == bad {
			if err == nil || !strings.Contains(err.Error(), "startup_readahead") || !strings.Contains(err.Error(), "off") {
				t.Errorf("%q: err %v, want one naming startup_readahead and off", value, err)
			}
			continue
		}
		if err != nil || r.StartupReadahead != want {
			t.Errorf("%q: %d, err %v; want %d", value, r.StartupReadahead, err, want)
		}
	}
}

func TestReplayReadahead(t *testing.T) {
	const bad = -2
	for value, want := range map[string]int64{"": 0, "off": -1, "4KiB": 4 << 10, "8KiB": 8 << 10, "0": bad, "6000": bad, "32MiB": bad, "lots": bad} {
		d := Defaults()
		d.Root, d.ReplayReadahead = t.TempDir(), value
		r, err := d.Resolve()
		if want == bad {
			if err == nil || !strings.Contains(err.Error(), "replay_readahead") || !strings.Contains(err.Error(), "off") {
				t.Errorf("%q: err %v, want one naming replay_readahead and off", value, err)
			}
			continue
		}
		if err != nil || r.ReplayReadahead != want {
			t.Errorf("%q: %d, err %v; want %d", value, r.ReplayReadahead, err, want)
		}
	}
}

func TestStoreReceiveBuffer(t *testing.T) {
	const bad = -2
	for value, want := range map[string]int64{"": 0, "off": -1, "4MiB": 4 << 20, "64KiB": 64 << 10, "100000": 100000,
		"0": bad, "32KiB": bad, "128MiB": bad, "lots": bad} {
		d := Defaults()
		d.Root, d.StoreReceiveBuffer = t.TempDir(), value
		r, err := d.Resolve()
		if want == bad {
			if err == nil || !strings.Contains(err.Error(), "store_receive_buffer") || !strings.Contains(err.Error(), "off") {
				t.Errorf("%q: err %v, want one naming store_receive_buffer and off", value, err)
			}
			continue
		}
		if err != nil || r.StoreReceiveBuffer != want {
			t.Errorf("%q: %d, err %v; want %d", value, r.StoreReceiveBuffer, err, want)
		}
	}
}
