package rig

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFindBinaries: given paths win; slackerd is found next to slacker before
// PATH; both are looked for on PATH; neither found is an error saying what to do.
func TestFindBinaries(t *testing.T) {
	bin, path := t.TempDir(), t.TempDir()
	for _, p := range []string{filepath.Join(bin, "slacker"), filepath.Join(bin, "slackerd"), filepath.Join(path, "slacker"), filepath.Join(path, "slackerd")} {
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", path)
	tests := []struct {
		slacker, slackerd string
		want              Binaries
	}{
		{"/x/slacker", "/y/slackerd", Binaries{"/x/slacker", "/y/slackerd"}},
		{filepath.Join(bin, "slacker"), "", Binaries{filepath.Join(bin, "slacker"), filepath.Join(bin, "slackerd")}},
		{"/x/slacker", "", Binaries{"/x/slacker", filepath.Join(path, "slackerd")}},
		{"", "", Binaries{filepath.Join(path, "slacker"), filepath.Join(path, "slackerd")}},
	}
	for _, tt := range tests {
		got, err := FindBinaries(tt.slacker, tt.slackerd)
		if err != nil || got != tt.want {
			t.Errorf("FindBinaries(%q, %q) = %+v, %v; want %+v", tt.slacker, tt.slackerd, got, err, tt.want)
		}
	}
	t.Setenv("PATH", t.TempDir())
	if _, err := FindBinaries("", ""); err == nil || !strings.Contains(err.Error(), "scripts/setup.sh") {
		t.Errorf("nothing to find: %v", err)
	}
	if err := (Binaries{Slacker: filepath.Join(bin, "slacker")}).Check(); err == nil {
		t.Error("Check accepted a missing slackerd")
	}
	if err := (Binaries{filepath.Join(bin, "slacker"), filepath.Join(bin, "slackerd")}).Check(); err != nil {
		t.Errorf("Check: %v", err)
	}
}
