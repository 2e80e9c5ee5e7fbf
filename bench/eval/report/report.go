package report

import (
	"errors"
	"fmt"
	"html"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/slacker-dev/slacker/bench/eval"
)

// Item tells the report how to load one item's results (DIR/Name.json).
type Item struct {
	Name string
	Load func(path string) (eval.Sectioner, error)
}

// Load returns the sections of the items whose JSON file is in dir, in items' order.
func Load(dir string, items []Item) ([]eval.Section, error) {
	var out []eval.Section
	for _, it := range items {
		p := filepath.Join(dir, it.Name+".json")
		if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		s, err := it.Load(p)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		out = append(out, s.Section())
	}
	return out, nil
}

// Write renders sections into dir: every figure as its SVG file, index.html and
// summary.md.
func Write(dir string, sections []eval.Section) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, s := range sections {
		for _, f := range s.Figures {
			if err := os.WriteFile(filepath.Join(dir, f.File), []byte(f.SVG), 0o644); err != nil {
				return err
			}
		}
	}
	var h strings.Builder
	HTML(&h, sections)
	if err := os.WriteFile(filepath.Join(dir, "index.html"), []byte(h.String()), 0o644); err != nil {
		return err
	}
	var m strings.Builder
	Markdown(&m, sections)
	return os.WriteFile(filepath.Join(dir, "summary.md"), []byte(m.String()), 0o644)
}

func esc(s string) string { return html.EscapeString(s) }

// HTML writes the page.
func HTML(w io.Writer, sections []eval.Section) {
	fmt.Fprint(w, `<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>Slacker: the papers' evaluation, reproduced</title>
<style>
body{font-family:DejaVu Sans,Helvetica,Arial,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
h1{font-size:1.6em}h2{margin-top:2.2em;border-bottom:1px solid #ccc}h3{font-size:1.05em}
.paper{background:#f6f6f6;border-left:4px solid #999;padding:.5em 1em}
table{border-collapse:collapse;margin:.8em 0;font-size:.9em}td,th{border:1px solid #ccc;padding:.25em .6em;text-align:right}
td:first-child,th:first-child{text-align:left}.meta{color:#666;font-size:.85em}.fail{color:#a00}
figure{margin:1em 0}figcaption{font-size:.85em;color:#444;max-width:900px}
</style></head><body>
<h1>Slacker: the papers' evaluation, reproduced</h1>
<p>Each section is one command, <code>slacker-bench eval ITEM</code>; Slacker and containerd + overlayfs were measured side by side in the same run. See docs/EVALUATION.md for the discussion of each figure.</p>
`)
	if hl := headlines(sections); len(hl) > 0 {
		fmt.Fprint(w, "<h2>Headline numbers</h2>\n<table><tr><th>measure</th><th>ours</th><th>paper</th></tr>\n")
		for _, x := range hl {
			fmt.Fprintf(w, "<tr><td>%s</td><td>%s</td><td>%s</td></tr>\n", esc(x.Name), esc(x.Value), esc(x.Paper))
		}
		fmt.Fprint(w, "</table>\n")
	}
	for _, s := range sections {
		fmt.Fprintf(w, "<h2 id=\"%s\">%s</h2>\n", esc(s.Item), esc(s.Title))
		if s.Meta != nil {
			m := s.Meta
			fmt.Fprintf(w, "<p class=\"meta\">%s, commit %s, %s (%d CPUs, %s, load %s), %s; command: <code>%s</code></p>\n",
				m.Date.Format(time.RFC3339), esc(m.Commit), esc(m.Machine.CPU), m.Machine.CPUs, esc(m.Machine.Memory), esc(m.Machine.Load),
				time.Duration(m.Elapsed*float64(time.Second)).Round(time.Second), esc(strings.Join(m.Command, " ")))
			for _, f := range m.Failed {
				fmt.Fprintf(w, "<p class=\"fail\">failed: %s</p>\n", esc(f))
			}
			for _, n := range m.Notes {
				fmt.Fprintf(w, "<p class=\"meta\">note: %s</p>\n", esc(n))
			}
		}
		if s.Paper != "" {
			fmt.Fprintf(w, "<p class=\"paper\"><b>Paper:</b> %s</p>\n", esc(s.Paper))
		}
		for _, f := range s.Figures {
			fmt.Fprintf(w, "<figure><img src=\"%s\" alt=\"%s\"><figcaption><b>%s.</b> %s</figcaption></figure>\n", esc(f.File), esc(f.Title), esc(f.Title), esc(f.Caption))
		}
		for _, t := range s.Tables {
			fmt.Fprintf(w, "<h3>%s</h3>\n<table><tr>", esc(t.Title))
			for _, c := range t.Header {
				fmt.Fprintf(w, "<th>%s</th>", esc(c))
			}
			fmt.Fprint(w, "</tr>\n")
			for _, r := range t.Rows {
				fmt.Fprint(w, "<tr>")
				for _, c := range r {
					fmt.Fprintf(w, "<td>%s</td>", esc(c))
				}
				fmt.Fprint(w, "</tr>\n")
			}
			fmt.Fprint(w, "</table>\n")
			if t.Note != "" {
				fmt.Fprintf(w, "<p class=\"meta\">%s</p>\n", esc(t.Note))
			}
		}
	}
	fmt.Fprint(w, "</body></html>\n")
}

func headlines(sections []eval.Section) []eval.Headline {
	var out []eval.Headline
	for _, s := range sections {
		out = append(out, s.Headlines...)
	}
	return out
}

// mdCell escapes a Markdown table cell.
func mdCell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// Markdown writes the headline numbers and every table as Markdown.
func Markdown(w io.Writer, sections []eval.Section) {
	if hl := headlines(sections); len(hl) > 0 {
		fmt.Fprint(w, "## Headline numbers\n\n| measure | ours | paper |\n| --- | --- | --- |\n")
		for _, x := range hl {
			fmt.Fprintf(w, "| %s | %s | %s |\n", mdCell(x.Name), mdCell(x.Value), mdCell(x.Paper))
		}
		fmt.Fprintln(w)
	}
	for _, s := range sections {
		fmt.Fprintf(w, "## %s\n\n", s.Title)
		if s.Meta != nil {
			fmt.Fprintf(w, "%s, commit %s, load %s, took %s: `%s`\n\n", s.Meta.Date.Format("2006-01-02 15:04 MST"), s.Meta.Commit, s.Meta.Machine.Load,
				time.Duration(s.Meta.Elapsed*float64(time.Second)).Round(time.Second), strings.Join(s.Meta.Command, " "))
			for _, f := range s.Meta.Failed {
				fmt.Fprintf(w, "- failed: %s\n", f)
			}
			for _, n := range s.Meta.Notes {
				fmt.Fprintf(w, "- note: %s\n", n)
			}
			if len(s.Meta.Failed)+len(s.Meta.Notes) > 0 {
				fmt.Fprintln(w)
			}
		}
		for _, f := range s.Figures {
			fmt.Fprintf(w, "![%s](%s)\n\n", f.Title, f.File)
		}
		for _, t := range s.Tables {
			fmt.Fprintf(w, "**%s**\n\n|", t.Title)
			for _, c := range t.Header {
				fmt.Fprintf(w, " %s |", mdCell(c))
			}
			fmt.Fprint(w, "\n|")
			for range t.Header {
				fmt.Fprint(w, " --- |")
			}
			fmt.Fprintln(w)
			for _, r := range t.Rows {
				fmt.Fprint(w, "|")
				for _, c := range r {
					fmt.Fprintf(w, " %s |", mdCell(c))
				}
				fmt.Fprintln(w)
			}
			if t.Note != "" {
				fmt.Fprintf(w, "\n%s\n", t.Note)
			}
			fmt.Fprintln(w)
		}
	}
}
