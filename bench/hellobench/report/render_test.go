package report

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/slacker-dev/slacker/bench/hellobench/harness"
)

// wellFormedSVG parses b as XML and checks its root is an <svg> and no coordinate
// or label is NaN or infinite.
func wellFormedSVG(t *testing.T, name string, b []byte) {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(b))
	root := ""
	elems := 0
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Errorf("%s is not well-formed XML: %v", name, err)
			return
		}
		if se, ok := tok.(xml.StartElement); ok {
			if root == "" {
				root = se.Name.Local
				if se.Name.Space != "http://www.w3.org/2000/svg" {
					t.Errorf("%s: root namespace %q", name, se.Name.Space)
				}
			}
			elems++
			for _, a := range se.Attr {
				if strings.Contains(a.Value, "NaN") || strings.Contains(a.Value, "Inf") {
					t.Errorf("%s: <%s %s=%q>", name, se.Name.Local, a.Name.Local, a.Value)
				}
			}
		}
		if cd, ok := tok.(xml.CharData); ok && (bytes.Contains(cd, []byte("NaN")) || bytes.Contains(cd, []byte("Inf"))) {
			t.Errorf("%s: text %q", name, cd)
		}
	}
	if root != "svg" || elems < 5 {
		t.Errorf("%s: root <%s>, %d elements", name, root, elems)
	}
}

var figureKinds = []string{"cdf-push", "cdf-pull", "cdf-run", "category-times", "speedup", "sizes-cdf", "sizes-category"}

// TestWrite renders two profiles and checks the page names every figure, the
// summary, per-workload rows and failures, and that every SVG is well-formed.
func TestWrite(t *testing.T) {
	loop := testResults()
	link := testResults()
	link.Profile = harness.Profile{Name: "1gbit", RateBits: 1e9, RTTMillis: 1, Registry: "10.213.1.2:5000", Store: "registry://x", StoreRemote: true}
	link.Notes = []string{"a <note> & more"}
	dir := t.TempDir()
	if err := Write(dir, []*harness.Results{loop, link}); err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(filepath.Join(dir, "index.html"))
	if err != nil {
		t.Fatal(err)
	}
	html := string(page)
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1+2*len(figureKinds) {
		t.Errorf("%d files written, want index.html and %d figures", len(ents), 2*len(figureKinds))
	}
	for _, p := range []string{"loopback", "1gbit"} {
		for _, k := range figureKinds {
			f := p + "-" + k + ".svg"
			b, err := os.ReadFile(filepath.Join(dir, f))
			if err != nil {
				t.Errorf("figure %s: %v", f, err)
				continue
			}
			wellFormedSVG(t, f, b)
			if !strings.Contains(html, `<img src="`+f+`"`) {
				t.Errorf("index.html does not show %s", f)
			}
		}
		if !strings.Contains(html, `<h2 id="`+p+`">Profile `+p+`</h2>`) || !strings.Contains(html, `<a href="#`+p+`">`) {
			t.Errorf("index.html has no section for %s", p)
		}
	}
	for _, want := range []string{
		"<h3>slacker against overlayfs</h3>",
		"<td>7.50x (9.50x)</td>",     // deployment speedup, median (p90)
		"<td>10.0x (10.0x)</td>",     // development
		"<td>3 of 10</td><td>1</td>", // failed samples of slacker, of overlayfs
		"deployment speedup, median (p90), 2 workloads",
		// Per workload: one row per system, speedups against the baseline.
		`<td class=l rowspan=2>alpha</td><td class=l rowspan=2>distro</td><td rowspan=2>40.0 MB / 100.0 MB</td><td class=l>slacker</td><td>4</td>`,
		"<td>10.0x / 10.0x</td>",
		"<td>5.00x / –</td>",
		`<td class=l>overlayfs</td><td>2 <span class="fail">(1 failed)</span></td>`,
		`<td class=l>slacker</td><td>0 <span class="fail">(3 failed)</span></td>`,
		// Failures are listed, with their stage and escaped reason.
		`<h3 class=fail>Failed runs (4)</h3>`,
		`<td class=l>gamma</td><td class=l>slacker</td><td class=l>deployment</td><td>3</td><td class=l>start</td><td class=l>&lt;&amp;&gt; &#34;quoted&#34;</td>`,
		"<b>Note:</b> a &lt;note&gt; &amp; more.",
		"emulated link 1 Gbit/s, RTT 1 ms, between the node and the registry and Slacker&#39;s store",
		// Each workload printed the same output on both systems.
		"printed the same standard output on every system",
		// First push: slacker's beta publish failed.
		`<tr><td class=l>slacker</td><td>1 <span class="fail">(1 failed)</span></td>`,
	} {
		if !strings.Contains(html, want) {
			t.Errorf("index.html lacks %q", want)
		}
	}
	if strings.Contains(html, "NaN") || strings.Contains(html, "Inf") {
		t.Errorf("index.html shows NaN or Inf")
	}
	for _, tag := range []string{"table", "tr", "figure", "h3"} {
		if o, c := strings.Count(html, "<"+tag), strings.Count(html, "</"+tag+">"); o != c {
			t.Errorf("index.html: %d <%s> and %d </%s>", o, tag, c, tag)
		}
	}
}

// TestWriteDegenerate renders results with nothing to plot on some or all axes: no
// samples, only failures, one workload, zero times and sizes. Every figure must
// still be well-formed, without NaN or infinite coordinates.
func TestWriteDegenerate(t *testing.T) {
	allFailed := testResults()
	for i := range allFailed.Samples {
		allFailed.Samples[i].OK = false
	}
	one := &harness.Results{Version: 1, Profile: harness.Profile{Name: "100mbit", RateBits: 1e8},
		Systems:   []harness.SystemInfo{{Name: "overlayfs"}, {Name: "slacker"}},
		Workloads: []harness.WorkloadInfo{{Name: "zero", Category: "other"}},
		Samples: []harness.Sample{
			{Workload: "zero", Category: "other", System: "overlayfs", Cycle: harness.Deployment, OK: true, ReadBytes: -1},
			{Workload: "zero", Category: "other", System: "slacker", Cycle: harness.Deployment, OK: true, ReadBytes: 0, Output: "x"},
		}}
	only := testResults()
	only.Systems = only.Systems[1:] // the baseline alone
	for _, tt := range []struct {
		name string
		r    *harness.Results
	}{
		{"empty", &harness.Results{Version: 1, Profile: harness.Profile{Name: "loopback"}}},
		{"no samples", &harness.Results{Version: 1, Profile: harness.Profile{Name: "loopback"},
			Systems: []harness.SystemInfo{{Name: "overlayfs"}, {Name: "slacker"}}, Workloads: testResults().Workloads}},
		{"all failed", allFailed},
		{"zeros", one},
		{"baseline only", only},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := Write(dir, []*harness.Results{tt.r}); err != nil {
				t.Fatal(err)
			}
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				b, err := os.ReadFile(filepath.Join(dir, e.Name()))
				if err != nil {
					t.Fatal(err)
				}
				if strings.HasSuffix(e.Name(), ".svg") {
					wellFormedSVG(t, e.Name(), b)
				} else if bytes.Contains(b, []byte("NaN")) || bytes.Contains(b, []byte("Inf")) {
					t.Errorf("%s shows NaN or Inf", e.Name())
				}
			}
			if len(ents) != 1+len(figureKinds) {
				t.Errorf("%d files", len(ents))
			}
			var text strings.Builder
			WriteTable(&text, tt.r)
			WriteMarkdown(&text, []*harness.Results{tt.r})
			if strings.Contains(text.String(), "NaN") || strings.Contains(text.String(), "Inf") {
				t.Errorf("text summaries show NaN or Inf:\n%s", text.String())
			}
		})
	}
}

func TestWriteOutputsDiffer(t *testing.T) {
	r := testResults()
	for i := range r.Samples {
		if r.Samples[i].System == "slacker" {
			r.Samples[i].Output = "something else\n"
		}
	}
	dir := t.TempDir()
	if err := Write(dir, []*harness.Results{r}); err != nil {
		t.Fatal(err)
	}
	page, _ := os.ReadFile(filepath.Join(dir, "index.html"))
	if !bytes.Contains(page, []byte("<p class=fail>Standard output differs between systems for: alpha, beta.</p>")) {
		t.Errorf("index.html does not report the different outputs")
	}
}

func TestWriteTable(t *testing.T) {
	var b strings.Builder
	WriteTable(&b, testResults())
	out := b.String()
	rows := map[string]*regexp.Regexp{
		"alpha slacker":   regexp.MustCompile(`(?m)^alpha\s+slacker\s+4\s+200 ms\s+500 ms\s+700 ms\s+200 ms\s+900 ms\s+10\.0 MB\s+2\.0 MB\s+10\.0x / 10\.0x$`),
		"alpha overlayfs": regexp.MustCompile(`(?m)^alpha\s+overlayfs\s+4\s+6\.00 s\s+1\.00 s\s+7\.00 s\s+2\.00 s\s+9\.00 s\s+40\.0 MB\s+–\s*$`),
		"beta overlayfs":  regexp.MustCompile(`(?m)^beta\s+overlayfs\s+2 \(1 failed\)\s+11\.00 s`),
		"beta slacker":    regexp.MustCompile(`(?m)^beta\s+slacker\s+3\s+1\.20 s.*5\.00x / -$`),
		"gamma slacker":   regexp.MustCompile(`(?m)^gamma\s+slacker\s+0 \(3 failed\)\s+-\s+-\s+-\s+-\s+-\s+-\s+-\s+- / -$`),
		"summary": regexp.MustCompile(`(?m)^slacker vs overlayfs, profile loopback: deployment 7\.50x median \(p90 9\.50x\), development 10\.0x \(p90 10\.0x\); ` +
			`pull p90 1\.10 s vs 10\.00 s; run time ratio 0\.65; fetched 15\.0% of the image \(median\); 3 of 10 samples failed \(overlayfs: 1\)$`),
	}
	for what, re := range rows {
		if !re.MatchString(out) {
			t.Errorf("table lacks %s:\n%s", what, out)
		}
	}
}

func TestWriteMarkdown(t *testing.T) {
	link := testResults()
	link.Profile = harness.Profile{Name: "1gbit", RateBits: 1e9}
	link.Notes = []string{"the store was local"}
	var b strings.Builder
	WriteMarkdown(&b, []*harness.Results{testResults(), link})
	out := b.String()
	for _, want := range []string{
		"| loopback | slacker vs overlayfs | 7.50x (9.50x) | 10.0x (10.0x) | 1.10 s vs 10.00 s | 0.65 | 15.0% | 3 of 10 (overlayfs: 1) |",
		"| 1gbit | slacker vs overlayfs | 7.50x (9.50x) |",
		"| loopback | deployment speedup (median) ≥ 5x on loopback (slacker) | 7.50x | met |",
		"| 1gbit | deployment speedup (median) ≥ 10x at 1 Gbit/s (slacker) | 7.50x | not met |",
		"| loopback | development speedup (median) ≥ 20x (slacker) | 10.0x | not met |",
		"| loopback | bytes fetched ≤ 10% of the image (median) (slacker) | 15.0% | not met |",
		"Note (1gbit): the store was local.",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("markdown lacks %q:\n%s", want, out)
		}
	}
	// Tables: every row has as many cells as its header.
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "| profile | system") && strings.Count(l, "|") != 9 {
			t.Errorf("header %q", l)
		}
	}
}

func TestFormats(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		f    func(float64) string
		in   float64
		want string
	}{
		{secs, 0.0042, "4.2 ms"}, {secs, 0.25, "250 ms"}, {secs, 12.345, "12.35 s"}, {secs, 150, "150 s"}, {secs, nan, "–"}, {secs, math.Inf(1), "–"},
		{x, 7.5, "7.50x"}, {x, 12.34, "12.3x"}, {x, nan, "–"}, {x, math.Inf(1), "–"},
		{pct, 0.153, "15.3%"}, {pct, nan, "–"},
		{mbytes, 1500, "2 kB"}, {mbytes, 2.5e6, "2.5 MB"}, {mbytes, 3.25e9, "3.25 GB"}, {mbytes, nan, "–"},
		{fmtSeconds, 0, "0"}, {fmtSeconds, 0.0005, "500µs"}, {fmtSeconds, 0.01, "10ms"}, {fmtSeconds, 10, "10s"}, {fmtSeconds, 600, "10min"},
		{fmtBytes, 100, "100B"}, {fmtBytes, 1e4, "10kB"}, {fmtBytes, 1e7, "10MB"}, {fmtBytes, 1e10, "10GB"},
		{fmtTimes, 12.345, "12.3x"},
	}
	for i, tt := range tests {
		if got := tt.f(tt.in); got != tt.want {
			t.Errorf("%d: format(%v) = %q, want %q", i, tt.in, got, tt.want)
		}
	}
}

func TestAxis(t *testing.T) {
	tests := []struct {
		log            bool
		lo, hi         float64
		wantLo, wantHi float64
	}{
		{false, 0, 1, 0, 1},
		{false, 0, 7.3, 0, 8},
		{false, 3, 3, 3, 4},
		{true, 0.02, 35, 0.01, 100},
		{true, 5, 5, 1, 10},
		{true, 0, 0, 1e-9, 1e-8},
		{false, math.NaN(), 1, 0, 1},
		{true, math.Inf(1), math.Inf(-1), 1e-9, 1},
	}
	for _, tt := range tests {
		a := &axis{p0: 0, p1: 100, log: tt.log}
		a.setRange(tt.lo, tt.hi)
		if !near(a.lo, tt.wantLo) || !near(a.hi, tt.wantHi) || len(a.ticks) < 2 {
			t.Errorf("setRange(%v, %v, log %v) = %v..%v ticks %v; want %v..%v", tt.lo, tt.hi, tt.log, a.lo, a.hi, a.ticks, tt.wantLo, tt.wantHi)
		}
		if p := a.px(a.lo); p != 0 {
			t.Errorf("px(lo) = %v", p)
		}
		if p := a.px(a.hi); !near(p, 100) {
			t.Errorf("px(hi) = %v", p)
		}
	}
}
