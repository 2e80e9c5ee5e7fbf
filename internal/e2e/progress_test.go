package e2e

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/slacker-dev/slacker/internal/testenv"
	"github.com/slacker-dev/slacker/internal/testutil"
)

// TestProgress: long commands show their progress on stderr, their result on
// stdout: plain lines where stderr is not a terminal (each layer of a conversion,
// each phase of gc and check, with amounts and "done"), JSON lines with --json
// (gc's phases streamed from slackerd as it works, the result alone on stdout), and
// nothing with -q.
func TestProgress(t *testing.T) {
	testutil.RequireTool(t, "runc")
	layout := testenv.DebianOCI(t)
	work := t.TempDir()
	p := testenv.StartProcess(t, filepath.Join(work, "node"), filepath.Join(work, "store"))
	run := func(want int, args ...string) (string, string) {
		t.Helper()
		out, errOut, code := p.CLI(t, args...)
		if code != want {
			t.Fatalf("slacker %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, want, out, errOut)
		}
		return out, errOut
	}

	out, errOut := run(0, "convert", "oci:"+layout+":bookworm", "debian:bookworm")
	if !strings.Contains(out, "debian:bookworm: snapshot sha256:") || strings.Contains(out, "layer 1/") {
		t.Errorf("convert's stdout:\n%s", out)
	}
	for _, want := range []string{"converting oci:", "base filesystem: ", "layer 1/1 ", " MiB (100%)", " done\n"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("no %q in convert's progress:\n%s", want, errOut)
		}
	}
	if strings.ContainsAny(errOut, "\r\x1b") {
		t.Errorf("terminal control characters in progress written to a pipe:\n%q", errOut)
	}

	out, errOut = run(0, "gc", "--grace", "0", "--dry-run", "--json")
	var rep struct {
		Objects int `json:"Objects"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.Objects == 0 {
		t.Fatalf("gc --json's stdout is not its report: %v\n%s", err, out)
	}
	phases := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(errOut), "\n") {
		var e struct {
			Event string `json:"event"`
			Task  string `json:"task"`
			Done  int64  `json:"done"`
		}
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("gc --json's progress line %q: %v", line, err)
		}
		if e.Event == "done" {
			phases[e.Task] = true
		}
	}
	for _, ph := range []string{"gc: list", "gc: mark", "gc: sweep"} {
		if !phases[ph] {
			t.Errorf("no phase %q done in gc's progress:\n%s", ph, errOut)
		}
	}

	out, errOut = run(0, "check", "--read-data")
	if !strings.Contains(out, ": 0 problems") || !strings.Contains(errOut, "check: read: ") || !strings.Contains(errOut, " done\n") {
		t.Errorf("check --read-data: stdout %q, progress %q", out, errOut)
	}
	if _, errOut = run(0, "gc", "--grace", "0", "--dry-run", "-q"); errOut != "" {
		t.Errorf("gc -q wrote progress: %q", errOut)
	}
}
