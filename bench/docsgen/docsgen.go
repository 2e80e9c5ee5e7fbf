package docsgen

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/slacker-dev/slacker/internal/atomicfile"
)

// resultDirs are where committed results live, relative to the repository root.
// A file's directory and name say what kind of results it holds (path).
var resultDirs = []string{"docs/bench", "docs/hellobench", "docs/eval", "docs/eval/breakdown"}

// Data renders figures from the results committed in a repository.
type Data struct {
	// Root is the repository's root directory.
	Root   string
	loaded map[string]any
}

// New returns the renderer of the repository at root.
func New(root string) *Data { return &Data{Root: root, loaded: map[string]any{}} }

// A figure is one function of a kind of results: numbers or text.
type figure struct {
	// numbers returns the values of one results file (src) for args; the marker
	// has nargs arguments and then a format (format.go). Several sources, or
	// several values of one, render as their range.
	numbers func(d *Data, src string, args []string) ([]float64, error)
	nargs   int
	// text renders the figure (a table) from the sources.
	text func(d *Data, srcs []string, args []string) (string, error)
}

// numbers is a figure of nargs arguments and a format.
func numbers(nargs int, f func(d *Data, src string, args []string) ([]float64, error)) figure {
	return figure{numbers: f, nargs: nargs}
}

// number is a figure of one value per source.
func number(nargs int, f func(d *Data, src string, args []string) (float64, error)) figure {
	return numbers(nargs, func(d *Data, src string, args []string) ([]float64, error) {
		v, err := f(d, src, args)
		return []float64{v}, err
	})
}

// text is a figure rendered as text.
func text(f func(d *Data, srcs []string, args []string) (string, error)) figure {
	return figure{text: f}
}

// figures are the functions of each kind of results.
var figures = map[string]map[string]figure{}

// path returns the results file named src, relative to the root, and its kind.
func (d *Data) path(src string) (string, string, error) {
	p, err := cached(d, src+"#path", func() ([2]string, error) {
		rel, kind, err := d.findResults(src)
		return [2]string{rel, kind}, err
	})
	return p[0], p[1], err
}

func (d *Data) findResults(src string) (string, string, error) {
	if strings.ContainsAny(src, `/\`) || src == "" || strings.HasPrefix(src, ".") {
		return "", "", fmt.Errorf("results %q: name a file by its base name without .json", src)
	}
	var found []string
	for _, dir := range resultDirs {
		p := filepath.Join(d.Root, dir, src+".json")
		if _, err := os.Stat(p); err == nil {
			found = append(found, filepath.Join(dir, src+".json"))
		}
	}
	switch len(found) {
	case 0:
		return "", "", fmt.Errorf("results %q: no %s.json in %s", src, src, strings.Join(resultDirs, ", "))
	case 1:
	default:
		return "", "", fmt.Errorf("results %q: more than one file has that name: %s", src, strings.Join(found, ", "))
	}
	rel := found[0]
	switch dir := filepath.Dir(rel); {
	case dir == "docs/bench" && strings.HasPrefix(src, "core-"):
		return rel, "core", nil
	case dir == "docs/bench" && strings.HasPrefix(src, "docker-"):
		return rel, "docker", nil
	case dir == "docs/bench" && strings.HasPrefix(src, "stores-"):
		return rel, "stores", nil
	case dir == "docs/bench" && strings.HasPrefix(src, "attached-"):
		return rel, "attached", nil
	case dir == "docs/hellobench":
		return rel, "hello", nil
	case strings.HasPrefix(dir, "docs/eval"):
		var m struct {
			Meta struct {
				Item string `json:"item"`
			} `json:"meta"`
		}
		b, err := os.ReadFile(filepath.Join(d.Root, rel))
		if err != nil {
			return "", "", err
		}
		if err := json.Unmarshal(b, &m); err != nil {
			return "", "", fmt.Errorf("decode %s: %w", rel, err)
		}
		if m.Meta.Item == "" {
			return "", "", fmt.Errorf("%s: no meta.item: not an evaluation item's results", rel)
		}
		return rel, "eval", nil
	}
	return "", "", fmt.Errorf("%s: no figures are defined for this kind of results", rel)
}

// load reads and caches the results file src with read.
func load[T any](d *Data, src string, read func(path string) (T, error)) (T, error) {
	return cached(d, src, func() (T, error) {
		var zero T
		rel, _, err := d.path(src)
		if err != nil {
			return zero, err
		}
		return read(filepath.Join(d.Root, rel))
	})
}

// cached returns what make made the first time it was asked for key.
func cached[T any](d *Data, key string, make func() (T, error)) (T, error) {
	if v, ok := d.loaded[key]; ok {
		return v.(T), nil
	}
	v, err := make()
	if err != nil {
		return v, err
	}
	d.loaded[key] = v
	return v, nil
}

// Figure renders the figure a marker's spec names: SOURCE[,SOURCE...] FUNC ARG...
func (d *Data) Figure(spec string) (string, error) {
	out, err := d.figure(strings.Fields(spec))
	if err != nil {
		return "", fmt.Errorf("%q: %w", spec, err)
	}
	if strings.Contains(out, "\n") {
		// A block: its own lines between the two markers.
		out = "\n" + strings.TrimSuffix(out, "\n") + "\n"
	}
	return out, nil
}

func (d *Data) figure(f []string) (string, error) {
	if len(f) < 2 {
		return "", errors.New("a figure is SOURCE FUNC ARG...")
	}
	srcs := strings.Split(f[0], ",")
	kind := ""
	for _, src := range srcs {
		_, k, err := d.path(src)
		if err != nil {
			return "", err
		}
		if kind != "" && k != kind {
			return "", fmt.Errorf("%s holds %s results, %s %s: one figure reads one kind", src, k, srcs[0], kind)
		}
		kind = k
	}
	fig, ok := figures[kind][f[1]]
	args := f[2:]
	if !ok && strings.Contains(f[1], ":") {
		// A kind's "*" figure takes its own name as the first argument.
		fig, ok = figures[kind]["*"]
		args = f[1:]
	}
	if !ok {
		var names []string
		for n := range figures[kind] {
			names = append(names, n)
		}
		slices.Sort(names)
		return "", fmt.Errorf("%s results have no figure %q (they have %s)", kind, f[1], strings.Join(names, ", "))
	}
	if fig.text != nil {
		return fig.text(d, srcs, args)
	}
	if len(args) != fig.nargs+1 {
		return "", fmt.Errorf("%s takes %d arguments and a format, not %q", f[1], fig.nargs, strings.Join(args, " "))
	}
	var vs []float64
	for _, src := range srcs {
		v, err := fig.numbers(d, src, args[:fig.nargs])
		if err != nil {
			return "", fmt.Errorf("%s: %w", src, err)
		}
		vs = append(vs, v...)
	}
	return formatValues(args[fig.nargs], vs)
}

// A Diff is a marked figure whose text is not what its data renders.
type Diff struct {
	File string // relative to the root
	Line int
	Spec string
	Have string // the text in the doc
	Want string // what the data renders
}

func (x Diff) String() string {
	if strings.Contains(x.Have+x.Want, "\n") {
		return fmt.Sprintf("%s:%d: %s:\n--- the doc has:%s--- the data renders:%s", x.File, x.Line, x.Spec, x.Have, x.Want)
	}
	return fmt.Sprintf("%s:%d: %s: the doc has %q, the data renders %q", x.File, x.Line, x.Spec, x.Have, x.Want)
}

// Files are the docs whose figures are rendered: README.md and every Markdown
// file under docs/, relative to the root.
func (d *Data) Files() ([]string, error) {
	files := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(d.Root, "docs"), func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !e.IsDir() && strings.HasSuffix(p, ".md") {
			rel, err := filepath.Rel(d.Root, p)
			if err != nil {
				return err
			}
			files = append(files, rel)
		}
		return nil
	})
	return files, err
}

// RenderDoc returns doc (the file rel) with every figure rendered from the data,
// the figures whose text changed, and how many figures it has. A figure that
// cannot be rendered is an error naming its line; all of them are reported.
func (d *Data) RenderDoc(rel, doc string) (string, []Diff, int, error) {
	ms, err := Parse(doc)
	if err != nil {
		return "", nil, 0, fmt.Errorf("%s: %w", rel, err)
	}
	texts := make([]string, len(ms))
	var diffs []Diff
	var errs []error
	for i, m := range ms {
		t, err := d.Figure(m.Spec)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s:%d: %w", rel, m.Line, err))
			texts[i] = m.Text
			continue
		}
		texts[i] = t
		if t != m.Text {
			diffs = append(diffs, Diff{File: rel, Line: m.Line, Spec: m.Spec, Have: m.Text, Want: t})
		}
	}
	if len(errs) > 0 {
		return "", nil, len(ms), errors.Join(errs...)
	}
	return Replace(doc, ms, texts), diffs, len(ms), nil
}

// Result is what Check or Write found.
type Result struct {
	// Figures counts the marked figures of each file that has any.
	Figures map[string]int
	// Diffs are the figures whose text is not what the data renders (Write has
	// rewritten them).
	Diffs []Diff
}

// Check renders every figure of every doc and reports those that differ from the
// data, changing nothing.
func (d *Data) Check() (Result, error) { return d.run(false) }

// Write renders every figure of every doc and rewrites (atomically) the docs whose
// figures differ from the data; a doc with a figure that cannot be rendered is left
// as it is, and the error names the figure.
func (d *Data) Write() (Result, error) { return d.run(true) }

func (d *Data) run(write bool) (Result, error) {
	res := Result{Figures: map[string]int{}}
	files, err := d.Files()
	if err != nil {
		return res, err
	}
	var errs []error
	for _, rel := range files {
		p := filepath.Join(d.Root, rel)
		b, err := os.ReadFile(p)
		if err != nil {
			return res, err
		}
		out, diffs, n, err := d.RenderDoc(rel, string(b))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if n > 0 {
			res.Figures[rel] = n
		}
		res.Diffs = append(res.Diffs, diffs...)
		if write && len(diffs) > 0 {
			st, err := os.Stat(p)
			if err != nil {
				return res, err
			}
			if err := atomicfile.WriteFile(p, []byte(out), st.Mode().Perm()); err != nil {
				return res, fmt.Errorf("write %s: %w", rel, err)
			}
		}
	}
	return res, errors.Join(errs...)
}
