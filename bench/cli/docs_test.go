package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runDocs(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := NewCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(append([]string{"docs"}, args...))
	err := cmd.Execute()
	return out.String(), err
}

// `slacker-bench docs --check` on the repository: every figure as its data
// renders it, nothing written.
func TestDocsCheck(t *testing.T) {
	out, err := runDocs(t, "--check", "--root", filepath.Join("..", ".."))
	if err != nil || !strings.Contains(out, "all as their data renders them") {
		t.Fatalf("docs --check: %v\n%s", err, out)
	}
}

// A figure that differs is listed and --check fails; without --check it is
// rewritten.
func TestDocsRewrites(t *testing.T) {
	root := t.TempDir()
	mustWrite := func(rel, s string) {
		t.Helper()
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	src, err := os.ReadFile(filepath.Join("..", "..", "docs", "bench", "core-2026-11-22b.json"))
	if err != nil {
		t.Fatal(err)
	}
	mustWrite("docs/bench/core-2026-11-22b.json", string(src))
	mustWrite("README.md", "Runs: <!-- fig core-2026-11-22b runs d -->7<!-- /fig -->.\n")
	out, err := runDocs(t, "--check", "--root", root)
	if err == nil || !strings.Contains(out, `README.md:1: core-2026-11-22b runs d: the doc has "7", the data renders "5"`) {
		t.Fatalf("docs --check of a wrong figure: %v\n%s", err, out)
	}
	if out, err := runDocs(t, "--root", root); err != nil || !strings.Contains(out, "figures: 1 in 1 files, 1 rewritten") {
		t.Fatalf("docs: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "README.md")); string(b) != "Runs: <!-- fig core-2026-11-22b runs d -->5<!-- /fig -->.\n" {
		t.Errorf("README.md after docs: %q", b)
	}
	if _, err := runDocs(t, "--root", filepath.Join(root, "docs", "bench")); err == nil || !strings.Contains(err.Error(), "not the repository's root") {
		t.Errorf("docs outside a repository: %v", err)
	}
}
