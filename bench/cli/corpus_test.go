package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/slacker-dev/slacker/bench/corpus"
)

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"4096", 4096, true},
		{"1MiB", 1 << 20, true},
		{"2 GiB", 2 << 30, true},
		{"16K", 16 << 10, true},
		{"1MB", 1000 * 1000, true},
		{"0", 0, true},
		{"-1", 0, false},
		{"1.5MiB", 0, false},
		{"lots", 0, false},
		{"", 0, false},
	}
	for _, tt := range tests {
		got, err := parseSize(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("parseSize(%q) = %d, %v; want %d, ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func run(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	cmd := NewCommand()
	var out, errb bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errb)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), errb.String(), err
}

func TestCommandTree(t *testing.T) {
	cmd := NewCommand()
	want := []string{"build", "gc", "list", "push", "rm", "serve", "synth"}
	for _, c := range cmd.Commands() {
		if c.Name() != "corpus" {
			continue
		}
		var got []string
		for _, sc := range c.Commands() {
			got = append(got, sc.Name())
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("corpus subcommands %v, want %v", got, want)
		}
		return
	}
	t.Fatal("no corpus command")
}

func TestCommandErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"corpus", "build", "--dir", "/nonexistent-x"}, "--workloads FILE is required"},
		{[]string{"corpus", "build", "-w", "/nonexistent.toml"}, "read workloads"},
		{[]string{"corpus", "list", "--dir", "/nonexistent-x"}, "no corpus in /nonexistent-x"},
		{[]string{"corpus", "synth", "--size", "big"}, `--size: bad size "big"`},
		{[]string{"corpus", "push", "--registry", "127.0.0.1:1", "--serve"}, "--serve only goes with"},
	}
	for _, tt := range tests {
		_, _, err := run(t, tt.args...)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: error %v, want %q", tt.args, err, tt.want)
		}
	}
}

func TestSynthThenList(t *testing.T) {
	dir := t.TempDir()
	out, _, err := run(t, "corpus", "synth", "--dir", dir, "--files", "20", "--size", "4KiB", "--layers", "2", "--min-free", "0")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out, "synth-f20-s4kib-l2-r1\t2 layers") {
		t.Fatalf("synth output %q", out)
	}
	out, _, err = run(t, "corpus", "list", "--dir", dir, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var imgs []corpus.ListedImage
	if err := json.Unmarshal([]byte(out), &imgs); err != nil {
		t.Fatal(err)
	}
	if len(imgs) != 1 || imgs[0].Name != "synth-f20-s4kib-l2-r1" || len(imgs[0].Layers) != 2 || imgs[0].Record == nil {
		t.Fatalf("list: %+v", imgs)
	}
	if _, _, err := run(t, "corpus", "rm", "--dir", dir, "nope"); err == nil {
		t.Fatal("rm of a missing image succeeded")
	}
	if _, _, err := run(t, "corpus", "rm", "--dir", dir, "synth-f20-s4kib-l2-r1"); err != nil {
		t.Fatal(err)
	}
	out, _, err = run(t, "corpus", "gc", "--dir", dir)
	if err != nil || !strings.HasPrefix(out, "freed ") || strings.HasPrefix(out, "freed 0 B") {
		t.Fatalf("gc after rm: %q %v", out, err)
	}
	out, _, _ = run(t, "corpus", "list", "--dir", dir)
	if !strings.Contains(out, "0 images") {
		t.Fatalf("list after rm: %q", out)
	}
}
