package docsgen

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	doc := "# Title\n\n" +
		"Pull is <!-- fig a median x s1 -->1.0 s<!-- /fig --> and <!-- fig b ratio x1 -->2x<!-- /fig -->.\n\n" +
		"<!-- fig c table -->\n| a |\n| --- |\n| 1 |\n<!-- /fig -->\n"
	ms, err := Parse(doc)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		spec, text string
		line       int
	}{
		{"a median x s1", "1.0 s", 3},
		{"b ratio x1", "2x", 3},
		{"c table", "\n| a |\n| --- |\n| 1 |\n", 5},
	}
	if len(ms) != len(want) {
		t.Fatalf("%d markers, want %d: %+v", len(ms), len(want), ms)
	}
	for i, w := range want {
		if ms[i].Spec != w.spec || ms[i].Text != w.text || ms[i].Line != w.line {
			t.Errorf("marker %d: %q %q line %d; want %q %q line %d", i, ms[i].Spec, ms[i].Text, ms[i].Line, w.spec, w.text, w.line)
		}
	}
	got := Replace(doc, ms, []string{"9.9 s", "3x", "\n| b |\n"})
	wantDoc := "# Title\n\n" +
		"Pull is <!-- fig a median x s1 -->9.9 s<!-- /fig --> and <!-- fig b ratio x1 -->3x<!-- /fig -->.\n\n" +
		"<!-- fig c table -->\n| b |\n<!-- /fig -->\n"
	if got != wantDoc {
		t.Errorf("Replace:\n%s\nwant:\n%s", got, wantDoc)
	}
	if same := Replace(doc, ms, []string{"1.0 s", "2x", "\n| a |\n| --- |\n| 1 |\n"}); same != doc {
		t.Errorf("replacing every figure by its own text changed the doc:\n%s", same)
	}
}

// Markers in code are text, so a doc can show the syntax; a code span may cross a
// line break within a paragraph.
func TestParseSkipsCode(t *testing.T) {
	doc := "```\n<!-- fig x y -->1<!-- /fig -->\n```\n" +
		"Write `<!-- fig x y -->1<!-- /fig -->` like this, and close with `<!-- /fig\n-->`... no: `<!-- /fig -->`.\n\n" +
		"A span that crosses a line (`--quick\n--profile 1gbit`, <!-- fig a b d -->3<!-- /fig -->, `x.json`).\n\n" +
		"An unclosed ` backtick is literal\n\nand ends with its paragraph: <!-- fig c d d -->4<!-- /fig -->\n" +
		"``a double ` span``<!-- fig e f d -->5<!-- /fig -->\n"
	ms, err := Parse(doc)
	if err != nil {
		t.Fatal(err)
	}
	var specs []string
	for _, m := range ms {
		specs = append(specs, m.Spec+"="+m.Text)
	}
	if got := strings.Join(specs, ";"); got != "a b d=3;c d d=4;e f d=5" {
		t.Errorf("markers %q", got)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tt := range []struct{ doc, want string }{
		{"a <!-- fig x y -->1\n", "line 1: \"x y\" is never closed"},
		{"a\n1<!-- /fig -->\n", "line 2: <!-- /fig --> without an opening marker"},
		{"<!-- /fig --> <!-- fig x y -->1<!-- /fig -->", "line 1: <!-- /fig --> without an opening marker"},
		{"<!-- fig x y -->1 <!-- fig z w -->2<!-- /fig --><!-- /fig -->", "markers do not nest"},
		{"<!-- fig  -->1<!-- /fig -->", "no figure named"},
		{"<!-- fig x\ny -->1<!-- /fig -->", "must close its comment on its line"},
	} {
		_, err := Parse(tt.doc)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q) = %v, want an error with %q", tt.doc, err, tt.want)
		}
	}
}
