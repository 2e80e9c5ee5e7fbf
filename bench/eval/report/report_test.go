package report

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/slacker-dev/slacker/bench/eval"
)

type fake struct{ s eval.Section }

func (f fake) Section() eval.Section { return f.s }

func TestLoadAndWrite(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	items := []Item{
		{Name: "missing", Load: func(string) (eval.Sectioner, error) { t.Fatal("loaded a missing item"); return nil, nil }},
		{Name: "a", Load: func(p string) (eval.Sectioner, error) {
			return fake{eval.Section{Item: "a", Title: "A <b>", Paper: "the paper said x|y", Meta: eval.NewMeta("a"),
				Figures:   []eval.Figure{{File: "a-1.svg", Title: "fig", SVG: "<svg/>"}},
				Tables:    []eval.Table{{Title: "t", Header: []string{"h1", "h2"}, Rows: [][]string{{"1", "a|b"}}, Note: "n"}},
				Headlines: []eval.Headline{{Name: "ratio", Value: "2x", Paper: "5x"}}}}, nil
		}},
	}
	secs, err := Load(dir, items)
	if err != nil || len(secs) != 1 {
		t.Fatalf("load: %v, %d sections", err, len(secs))
	}
	secs[0].Meta.Fail("one thing")
	if err := Write(dir, secs); err != nil {
		t.Fatal(err)
	}
	svg, _ := os.ReadFile(filepath.Join(dir, "a-1.svg"))
	page, _ := os.ReadFile(filepath.Join(dir, "index.html"))
	md, _ := os.ReadFile(filepath.Join(dir, "summary.md"))
	if string(svg) != "<svg/>" {
		t.Fatalf("svg file %q", svg)
	}
	for _, want := range []string{"A &lt;b&gt;", `<img src="a-1.svg"`, "<td>ratio</td><td>2x</td><td>5x</td>", "failed: one thing", "<td>a|b</td>"} {
		if !strings.Contains(string(page), want) {
			t.Errorf("index.html lacks %q", want)
		}
	}
	for _, want := range []string{"| ratio | 2x | 5x |", "| 1 | a\\|b |", "![fig](a-1.svg)", "- failed: one thing"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("summary.md lacks %q:\n%s", want, md)
		}
	}
	bad := []Item{{Name: "a", Load: func(p string) (eval.Sectioner, error) { return nil, os.ErrInvalid }}}
	if _, err := Load(dir, bad); err == nil {
		t.Fatal("a failed load is not an error")
	}
}
