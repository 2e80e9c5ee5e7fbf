// Package cmd_test holds what the programs promise as a whole.
package cmd_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/slacker-dev/slacker/internal/testutil"
)

const module = "github.com/slacker-dev/slacker/"

// TestProductLinksNoBenchOrTestCode: slacker and slackerd link no benchmark
// (bench/...), no test environment (internal/testenv/..., the services it starts)
// and no fault-injection proxy. Benchmarks are slacker-bench's; a product package
// that imports one of them would ship it.
func TestProductLinksNoBenchOrTestCode(t *testing.T) {
	gobin := testutil.RequireTool(t, "go")
	out, err := exec.Command(gobin, "list", "-deps", module+"cmd/slacker", module+"cmd/slackerd").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	ours := 0
	for _, p := range deps {
		rel, ok := strings.CutPrefix(p, module)
		if !ok {
			continue
		}
		ours++
		for _, banned := range []string{"bench/", "internal/testenv", "internal/faultproxy", "internal/e2e", "internal/testutil"} {
			if rel == strings.TrimSuffix(banned, "/") || strings.HasPrefix(rel, banned) {
				t.Errorf("the product links %s", p)
			}
		}
	}
	if ours < 10 {
		t.Fatalf("go list -deps named %d of our packages, expected the product's: %q", ours, deps)
	}
}
