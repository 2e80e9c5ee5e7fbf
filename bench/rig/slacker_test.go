package rig

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/slacker-dev/slacker/internal/api"
)

// fakeBinaries writes a slackerd that does nothing and a slacker that logs its
// arguments to log and answers `images --json` (after --insecure-registry, which
// the rig passes first) with one image, ref, whose snapshot
// is sha256:00...
func fakeBinaries(t *testing.T, log, ref string) (slacker, slackerd string) {
	t.Helper()
	dir := t.TempDir()
	slacker, slackerd = filepath.Join(dir, "slacker"), filepath.Join(dir, "slackerd")
	images := `[{"name":"` + ref + `","descriptor":{"snapshot":"sha256:` + strings.Repeat("0", 64) + `"}}]`
	script := "#!/bin/sh\necho \"$*\" >> " + log + "\n" +
		"if [ \"$1\" = --insecure-registry ]; then shift; fi\n" +
		"if [ \"$1\" = images ]; then echo '" + images + "'; fi\n"
	if err := os.WriteFile(slacker, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(slackerd, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return slacker, slackerd
}

// TestSlackerRootModes: a Slacker system's root mode names it ("slacker-block"
// for block, "slacker" otherwise), starts slackerd with --container-root after any
// extra flags, passes --root-mode to `slacker run`, publishes under its own
// repository, and makes Mount's volume in its mode (the API's default, a block
// clone, when it has none); an unknown mode is refused.
func TestSlackerRootModes(t *testing.T) {
	log := filepath.Join(t.TempDir(), "cli.log")
	const ref = "127.0.0.1:5000/x/img:latest"
	slacker, slackerd := fakeBinaries(t, log, ref)

	// A fake slackerd API that records the volumes asked for.
	sock := filepath.Join(t.TempDir(), "slackerd.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var asked []api.CreateVolumeRequest
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/volumes", func(w http.ResponseWriter, r *http.Request) {
		var req api.CreateVolumeRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		asked = append(asked, req)
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(api.Volume{ID: req.ID, Mountpoint: "/mnt/" + req.ID, Mode: req.Mode})
	})
	srv := &http.Server{Handler: mux}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })

	tests := []struct {
		mode, name string
		daemonFlag bool
	}{
		{"", "slacker", false},
		{RootShared, "slacker", true},
		{RootBlock, "slacker-block", true},
	}
	for _, tt := range tests {
		os.Remove(log)
		asked = nil
		s, err := NewSlacker(SlackerOptions{Dir: "/d", Slacker: slacker, Slackerd: slackerd, RootMode: tt.mode,
			DaemonArgs: []string{"--container-root", "shared", "--chunk-size", "64KiB"}})
		if err != nil {
			t.Fatal(err)
		}
		if s.Name() != tt.name || s.RootMode() != tt.mode {
			t.Errorf("mode %q: name %q, root mode %q", tt.mode, s.Name(), s.RootMode())
		}
		if got, want := s.ref("reg:5000", "nginx"), "reg:5000/"+tt.name+"/nginx:latest"; got != want {
			t.Errorf("mode %q: publishes to %s, want %s", tt.mode, got, want)
		}
		s.root = "/d/node"
		args := s.daemonArgs(s.root)
		i := slices.Index(args, "--chunk-size")
		last := args[len(args)-2:]
		switch {
		case i < 0:
			t.Errorf("mode %q: the extra flags are lost: %v", tt.mode, args)
		case tt.daemonFlag && (last[0] != "--container-root" || last[1] != tt.mode):
			t.Errorf("mode %q: slackerd %v does not end with --container-root %s", tt.mode, args, tt.mode)
		case !tt.daemonFlag && slices.Index(args[i:], "--container-root") >= 0:
			t.Errorf("mode %q: slackerd %v has a root mode of the system's", tt.mode, args)
		}

		s.root, s.client = filepath.Dir(sock), api.NewClient(sock)
		ctx := context.Background()
		if _, err := s.Run(ctx, ref, []string{"true"}, nil); err != nil {
			t.Fatal(err)
		}
		mnt, release, err := s.Mount(ctx, ref)
		if err != nil {
			t.Fatalf("mode %q: mount: %v", tt.mode, err)
		}
		if len(asked) != 1 || asked[0].Mode != tt.mode || !asked[0].Mount || asked[0].Snapshot.Encoded() != strings.Repeat("0", 64) ||
			mnt != "/mnt/"+asked[0].ID {
			t.Errorf("mode %q: mount asked for %+v, got %s", tt.mode, asked, mnt)
		}
		_ = release // the fake has no DELETE; nothing to release
		b, err := os.ReadFile(log)
		if err != nil {
			t.Fatal(err)
		}
		run := strings.SplitN(string(b), "\n", 2)[0]
		want := "--insecure-registry run --rm -i " + ref + " -- true"
		if tt.mode != "" {
			want = "--insecure-registry run --rm -i --root-mode " + tt.mode + " " + ref + " -- true"
		}
		if run != want {
			t.Errorf("mode %q: ran %q, want %q", tt.mode, run, want)
		}
	}
	if _, err := NewSlacker(SlackerOptions{Slacker: slacker, Slackerd: slackerd, RootMode: "zfs"}); err == nil || !strings.Contains(err.Error(), `"zfs"`) {
		t.Fatalf("unknown mode: %v", err)
	}
}
