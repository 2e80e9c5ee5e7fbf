package cli

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// TestTree: slacker-bench has the commands and flags `slacker bench` had (less
// slacker's own global flags, which no benchmark read), so every documented
// command line still works with the program's name changed.
func TestTree(t *testing.T) {
	want := map[string][]string{
		"":               nil,
		"core":           {"corpus", "dir", "images", "markdown", "micro", "results", "runs", "slackerd-arg"},
		"hello":          {"corpus", "cycles", "dir", "keep-dir", "markdown", "only", "optimize", "out", "profile", "publish-unshaped", "quick", "rtt", "runs", "seed", "slacker", "slackerd", "slackerd-arg", "stargz", "store", "store-compress", "store-server", "systems", "warmup", "workloads"},
		"report":         {"markdown", "out"},
		"corpus":         {"dir", "json", "verbose"},
		"corpus build":   {"dir", "force", "install-recommends", "jobs", "json", "keep-apt-cache", "min-free", "mirror", "only", "recheck", "snapshot", "suite", "verbose", "workloads"},
		"corpus gc":      {"dir", "json", "verbose"},
		"corpus list":    {"dir", "json", "verbose"},
		"corpus push":    {"addr", "dir", "json", "only", "prefix", "registry", "serve", "verbose"},
		"corpus rm":      {"dir", "json", "verbose"},
		"corpus serve":   {"addr", "dir", "json", "verbose"},
		"corpus synth":   {"dir", "files", "json", "layers", "min-free", "name", "seed", "size", "verbose"},
		"eval":           {"corpus", "images", "keep", "out", "runs", "seed", "slackerd-arg", "work"},
		"eval analysis":  {"corpus", "images", "keep", "only", "out", "runs", "seed", "slackerd-arg", "static", "work", "workloads"},
		"eval hpmapper":  {"block", "cmd", "containers", "corpus", "image", "images", "keep", "limits", "out", "parallel", "ready", "runs", "seed", "slackerd-arg", "timeout", "work", "workloads"},
		"eval longrun":   {"block", "corpus", "duration", "images", "keep", "only", "out", "runs", "seed", "slackerd-arg", "start-timeout", "work", "workloads"},
		"eval micro":     {"block", "corpus", "files", "images", "keep", "layers", "only", "opens", "out", "rerun-runs", "runs", "seed", "sizes", "skip", "slackerd-arg", "work", "workloads"},
		"eval multimake": {"corpus", "images", "iterations", "keep", "only", "out", "runs", "seed", "slackerd-arg", "tests", "work"},
		"eval report":    {"corpus", "images", "keep", "out", "runs", "seed", "slackerd-arg", "work"},
		"eval scale":     {"corpus", "counts", "images", "keep", "max-bytes", "out", "runs", "seed", "sizes", "slackerd-arg", "work"},
		"docs":           {"check", "root"},
		"eval storage":   {"corpus", "depth", "file-size", "images", "jobs", "keep", "loop-size", "out", "runs", "runtime", "seed", "slackerd-arg", "sweep", "sweep-runtime", "targets", "work"},
	}
	got := map[string][]string{}
	var walk func(c *cobra.Command, path string)
	walk = func(c *cobra.Command, path string) {
		var flags []string
		add := func(f *pflag.Flag) {
			if f.Name != "help" && !slices.Contains(flags, f.Name) {
				flags = append(flags, f.Name)
			}
		}
		c.InitDefaultHelpFlag()
		c.LocalFlags().VisitAll(add)
		c.InheritedFlags().VisitAll(add)
		slices.Sort(flags)
		got[path] = flags
		for _, sc := range c.Commands() {
			if sc.Name() == "help" || sc.Name() == "completion" {
				continue
			}
			walk(sc, strings.TrimSpace(path+" "+sc.Name()))
		}
	}
	root := NewCommand()
	walk(root, "")
	if !reflect.DeepEqual(got, want) {
		for k := range want {
			if !reflect.DeepEqual(got[k], want[k]) {
				t.Errorf("slacker-bench %s: flags %q, want %q", k, got[k], want[k])
			}
		}
		for k := range got {
			if _, ok := want[k]; !ok {
				t.Errorf("unexpected command slacker-bench %s", k)
			}
		}
	}
	if root.Use != "slacker-bench" {
		t.Errorf("root command %q", root.Use)
	}
}

// TestBlockFlag: the items that measure Slacker's default mode beside overlayfs
// measure slacker-block too unless told not to.
func TestBlockFlag(t *testing.T) {
	root := NewCommand()
	for _, item := range []string{"micro", "hpmapper", "longrun"} {
		c, _, err := root.Find([]string{"eval", item})
		if err != nil {
			t.Fatal(err)
		}
		if f := c.Flags().Lookup("block"); f == nil || f.DefValue != "true" {
			t.Errorf("eval %s: --block %+v, want on by default", item, f)
		}
	}
}
