package docsgen

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCommittedDocs: every marked figure of README.md and docs/ is what the
// committed results render. It fails when a number was edited by hand, or new
// results were committed without `slacker-bench docs`; the message names the file,
// the line, the figure and both texts.
func TestCommittedDocs(t *testing.T) {
	d := New(filepath.Join("..", ".."))
	res, err := d.Check()
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range res.Diffs {
		t.Errorf("%s\n(render the docs again: slacker-bench docs)", x)
	}
	// The docs that quote committed results keep their figures marked: a doc whose
	// markers were all removed would pass the check above with its numbers unchecked.
	for _, f := range []string{"README.md", "docs/BENCHMARKS.md", "docs/EVALUATION.md", "docs/hellobench/README.md", "docs/hellobench.md", "docs/design.md"} {
		if res.Figures[f] == 0 {
			t.Errorf("%s has no marked figures", f)
		}
	}
}

// Every "<!-- fig " outside a fenced code block is a marker the renderer sees: a
// figure hidden in what the parser takes for code would go unchecked.
func TestNoHiddenMarkers(t *testing.T) {
	d := New(filepath.Join("..", ".."))
	files, err := d.Files()
	if err != nil {
		t.Fatal(err)
	}
	for _, rel := range files {
		b, err := os.ReadFile(filepath.Join(d.Root, rel))
		if err != nil {
			t.Fatal(err)
		}
		n, fenced := 0, false
		for _, line := range strings.Split(string(b), "\n") {
			t := strings.TrimLeft(line, " ")
			if strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~") {
				fenced = !fenced
				continue
			}
			if !fenced {
				n += strings.Count(line, openPrefix)
			}
		}
		ms, err := Parse(string(b))
		if err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
		if len(ms) != n {
			t.Errorf("%s: %d markers outside fenced code, the renderer sees %d (one in a code span?)", rel, n, len(ms))
		}
	}
}
