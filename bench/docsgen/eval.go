package docsgen

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/slacker-dev/slacker/bench/eval"
	"github.com/slacker-dev/slacker/bench/eval/analysis"
	"github.com/slacker-dev/slacker/bench/eval/micro"
	"github.com/slacker-dev/slacker/bench/eval/stat"
	"github.com/slacker-dev/slacker/bench/rig"
)

// The evaluation's results (docs/eval/ITEM.json and docs/eval/breakdown/*.json,
// `slacker-bench eval ITEM`). Every item keeps its samples as arrays of flat
// records (micro: open, append, rerun; hpmapper, longrun, scale, storage: samples;
// scale: convert; multimake: steps, totals), and a figure aggregates one field,
// or an expression of fields, over the records a filter keeps:
//
//	AGG ARRAY FILTER EXPR              e.g. median samples system=slacker,limit=0 s
//	ratio AGG ARRAY FILTER EXPR FILTER2 EXPR2   AGG of the first over AGG of the second
//	diff AGG ARRAY FILTER EXPR FILTER2 EXPR2    AGG of the first minus AGG of the second
//	vs OTHER AGG ARRAY FILTER EXPR              the same in this results file over in OTHER
//
// AGG is median, mean, sum, min, max, p90 or count; OUTER:INNER@KEY groups the
// records by KEY, takes INNER in each group and OUTER across the groups
// (median:sum@run: the median over runs of each run's sum), and OUTER "each"
// keeps every group's value, which renders as their range. FILTER is "-" or
// comma-separated KEY=VALUE, KEY!=VALUE, KEY<VALUE and KEY>VALUE (numbers compare
// as numbers, NaN matches what is not a number); EXPR is a
// field, or fields and numbers joined by + - * / (left to right); EXPR2 "." is EXPR
// again. Values that are not numbers (a workload that never started) are left out.
// A field of a nested record is PARENT.FIELD (meta machine.load: the load average
// when the item started); a top-level object is one record (meta, corpus) and a
// top-level number a record of one field (containers).
//
// The workload analysis (analysis.json) has one record per image in "images", with
// the fields of its JSON and per-image values of package analysis: read, fetched
// (medians over its starts, bytes), s, s2, read2, hit, written, written2 (the same
// for the second container), top_share, bottom_share, largest_share, gzip
// (tar_bytes / gz_bytes), file_dedup, block_dedup (file bytes over the distinct
// files or 4 KiB blocks), depth3 (file bytes at depth 3 or deeper); and "corpus",
// one record. The micro-benchmark's second run has "rerun-medians": one record per
// workload and system (overlayfs, slacker, and slacker-block when it ran) with
// first and second, the medians the item reports.
func init() {
	figures["eval"] = map[string]figure{
		"ratio": numbers(6, func(d *Data, src string, a []string) ([]float64, error) {
			return evalPair(d, src, a, func(x, y float64) float64 { return x / y })
		}),
		"vs": numbers(5, func(d *Data, src string, a []string) ([]float64, error) {
			if _, kind, err := d.path(a[0]); err != nil || kind != "eval" {
				return nil, fmt.Errorf("vs %s: not an evaluation item's results (%v)", a[0], err)
			}
			x, err := evalValues(d, src, a[1], a[2], a[3], a[4])
			if err != nil {
				return nil, err
			}
			y, err := evalValues(d, a[0], a[1], a[2], a[3], a[4])
			if err != nil {
				return nil, fmt.Errorf("%s: %w", a[0], err)
			}
			if len(x) != 1 || len(y) != 1 {
				return nil, fmt.Errorf("one value on each side, not %d and %d", len(x), len(y))
			}
			return []float64{x[0] / y[0]}, nil
		}),
		"diff": numbers(6, func(d *Data, src string, a []string) ([]float64, error) {
			return evalPair(d, src, a, func(x, y float64) float64 { return x - y })
		}),
		// OUTER:INNER@KEY ARRAY FILTER EXPR
		"*": numbers(4, func(d *Data, src string, a []string) ([]float64, error) {
			return evalValues(d, src, a[0], a[1], a[2], a[3])
		}),
	}
	for _, agg := range []string{"median", "mean", "sum", "min", "max", "p90", "count"} {
		figures["eval"][agg] = numbers(3, func(d *Data, src string, a []string) ([]float64, error) {
			return evalValues(d, src, agg, a[0], a[1], a[2])
		})
	}
}

// A record is one element of a results array.
type record map[string]any

func (d *Data) evalJSON(src string) (map[string]any, error) {
	return cached(d, src+"#json", func() (map[string]any, error) {
		rel, _, err := d.path(src)
		if err != nil {
			return nil, err
		}
		p := filepath.Join(d.Root, rel)
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, fmt.Errorf("decode %s: %w", p, err)
		}
		return m, nil
	})
}

func (d *Data) records(src, array string) ([]record, error) {
	m, err := d.evalJSON(src)
	if err != nil {
		return nil, err
	}
	meta, _ := m["meta"].(map[string]any)
	item, _ := meta["item"].(string)
	switch {
	case item == "analysis" && array == "images":
		return d.analysisImages(src)
	case item == "micro" && array == "rerun-medians":
		return d.rerunMedians(src)
	}
	switch v := m[array].(type) {
	case []any:
		out := make([]record, 0, len(v))
		for i, e := range v {
			r, ok := e.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("%s[%d] is not a record", array, i)
			}
			out = append(out, flatten(r))
		}
		return out, nil
	case map[string]any:
		return []record{flatten(v)}, nil
	case float64:
		return []record{{array: v}}, nil
	}
	return nil, fmt.Errorf("no array %q", array)
}

// flatten names the fields of a record's nested records PARENT.FIELD (meta's
// machine.load), and turns numbers written as strings ("32.74") into numbers.
func flatten(r map[string]any) record {
	out := record{}
	var add func(prefix string, m map[string]any)
	add = func(prefix string, m map[string]any) {
		for k, v := range m {
			switch x := v.(type) {
			case map[string]any:
				add(prefix+k+".", x)
			case string:
				if n, err := strconv.ParseFloat(x, 64); err == nil && k == "load" {
					out[prefix+k] = n
				} else {
					out[prefix+k] = x
				}
			default:
				out[prefix+k] = v
			}
		}
	}
	add("", r)
	return out
}

func (d *Data) analysisImages(src string) ([]record, error) {
	r, err := load(d, src, func(p string) (*analysis.Results, error) {
		var r analysis.Results
		return &r, rig.ReadJSON(p, &r)
	})
	if err != nil {
		return nil, err
	}
	var out []record
	for _, im := range r.Images {
		med := func(f func(analysis.Start) float64) float64 {
			var v []float64
			for _, s := range im.Starts {
				if s.Error == "" {
					v = append(v, f(s))
				}
			}
			return stat.Median(v)
		}
		var depth3 int64
		for i, b := range im.DepthBytes {
			if i >= 2 {
				depth3 += b
			}
		}
		out = append(out, record{
			"name": im.Name, "category": im.Category, "layers": float64(im.Layers),
			"gz_bytes": float64(im.GzBytes), "tar_bytes": float64(im.TarBytes), "file_bytes": float64(im.FileBytes),
			"files": float64(im.Files), "dirs": float64(im.Dirs),
			"read":      im.Read(),
			"fetched":   im.Fetched(),
			"s":         med(func(s analysis.Start) float64 { return s.Seconds }),
			"s2":        med(func(s analysis.Start) float64 { return s.Seconds2 }),
			"read2":     med(func(s analysis.Start) float64 { return float64(s.ReadBytes2) }),
			"hit":       med(func(s analysis.Start) float64 { return float64(s.HitBytes) }),
			"written":   med(func(s analysis.Start) float64 { return float64(s.WrittenBytes) }),
			"written2":  med(func(s analysis.Start) float64 { return float64(s.WrittenBytes2) }),
			"top_share": im.TopShare(), "bottom_share": im.BottomShare(), "largest_share": im.LargestShare(),
			"gzip":        stat.Ratio(float64(im.TarBytes), float64(im.GzBytes)),
			"file_dedup":  stat.Ratio(float64(im.FileBytes), float64(im.UniqueFileBytes)),
			"block_dedup": stat.Ratio(float64(im.FileBytes), float64(im.UniqueBlockBytes)),
			"depth3":      float64(depth3),
		})
	}
	return out, nil
}

func (d *Data) rerunMedians(src string) ([]record, error) {
	r, err := load(d, src, func(p string) (*micro.Results, error) {
		var r micro.Results
		return &r, rig.ReadJSON(p, &r)
	})
	if err != nil {
		return nil, err
	}
	var out []record
	var ws []string
	for _, s := range r.Rerun {
		if !slices.Contains(ws, s.Workload) {
			ws = append(ws, s.Workload)
		}
	}
	var systems []string
	for _, s := range r.Rerun {
		systems = append(systems, s.System)
	}
	for _, sys := range eval.ReportSystems(systems) {
		for _, w := range ws {
			out = append(out, record{"system": sys, "workload": w, "first": r.RerunMedian(sys, w, false), "second": r.RerunMedian(sys, w, true)})
		}
	}
	return out, nil
}

// filter keeps the records that match spec: "-" (all), or comma-separated
// conditions KEY=VALUE, KEY!=VALUE, KEY<VALUE, KEY>VALUE (the last two numbers).
func filter(rs []record, spec string) ([]record, error) {
	if spec == "-" {
		return rs, nil
	}
	type cond struct{ key, op, val string }
	var cs []cond
	for _, c := range strings.Split(spec, ",") {
		i := strings.IndexAny(c, "!=<>")
		if i <= 0 {
			return nil, fmt.Errorf("filter %q: KEY=VALUE, KEY!=VALUE, KEY<VALUE or KEY>VALUE", c)
		}
		op := c[i : i+1]
		if strings.HasPrefix(c[i:], "!=") {
			op = "!="
		} else if op == "!" {
			return nil, fmt.Errorf("filter %q: KEY!=VALUE", c)
		}
		cs = append(cs, cond{c[:i], op, c[i+len(op):]})
	}
	var out []record
	for _, r := range rs {
		keep := true
		for _, c := range cs {
			var ok bool
			switch c.op {
			case "=":
				ok = matches(r[c.key], c.val)
			case "!=":
				ok = !matches(r[c.key], c.val)
			default:
				x, isNum := r[c.key].(float64)
				w, err := strconv.ParseFloat(c.val, 64)
				if err != nil {
					return nil, fmt.Errorf("filter %s%s%s: not a number", c.key, c.op, c.val)
				}
				ok = isNum && ((c.op == "<" && x < w) || (c.op == ">" && x > w))
			}
			if !ok {
				keep = false
				break
			}
		}
		if keep {
			out = append(out, r)
		}
	}
	return out, nil
}

func matches(v any, want string) bool {
	switch x := v.(type) {
	case string:
		return x == want
	case float64:
		if want == "NaN" {
			return math.IsNaN(x)
		}
		w, err := strconv.ParseFloat(want, 64)
		return err == nil && w == x
	case bool:
		return strconv.FormatBool(x) == want
	case nil:
		return want == "null" || want == "NaN"
	}
	return false
}

// value evaluates expr (fields and numbers joined by + - * /, left to right) on r;
// NaN when a field is not a number.
func value(r record, expr string) (float64, error) {
	if f, ok := r[expr]; ok { // a field whose name has a - in it: mm-gcc-11
		x, isNum := f.(float64)
		if !isNum {
			return math.NaN(), nil
		}
		return x, nil
	}
	var acc float64
	op := byte('+')
	for len(expr) > 0 {
		i := strings.IndexAny(expr[1:], "+-*/") + 1
		if i == 0 {
			i = len(expr)
		}
		tok := expr[:i]
		var v float64
		if n, err := strconv.ParseFloat(tok, 64); err == nil {
			v = n
		} else {
			f, ok := r[tok]
			if !ok {
				return 0, fmt.Errorf("no field %q", tok)
			}
			switch x := f.(type) {
			case float64:
				v = x
			default:
				v = math.NaN()
			}
		}
		switch op {
		case '+':
			acc += v
		case '-':
			acc -= v
		case '*':
			acc *= v
		case '/':
			acc /= v
		}
		if i == len(expr) {
			break
		}
		op, expr = expr[i], expr[i+1:]
	}
	return acc, nil
}

func aggregate(agg string, v []float64) (float64, error) {
	switch agg {
	case "median":
		return stat.Median(v), nil
	case "mean":
		return stat.Mean(v), nil
	case "sum":
		return stat.Sum(v), nil
	case "p90":
		return stat.Quantile(v, 0.9), nil
	case "min", "max":
		var s []float64
		for _, x := range v {
			if !math.IsNaN(x) {
				s = append(s, x)
			}
		}
		if len(s) == 0 {
			return math.NaN(), nil
		}
		if agg == "min" {
			return slices.Min(s), nil
		}
		return slices.Max(s), nil
	case "count":
		return float64(len(v)), nil
	}
	return 0, fmt.Errorf("aggregate %q: median, mean, sum, min, max, p90 or count", agg)
}

// evalValues aggregates expr over the records of array that filter keeps; a grouped
// aggregate (OUTER:INNER@KEY) with OUTER "each" gives one value per group.
func evalValues(d *Data, src, agg, array, filt, expr string) ([]float64, error) {
	rs, err := d.records(src, array)
	if err != nil {
		return nil, err
	}
	if rs, err = filter(rs, filt); err != nil {
		return nil, err
	}
	if len(rs) == 0 {
		return nil, fmt.Errorf("no %s records match %s", array, filt)
	}
	vals := func(rs []record) ([]float64, error) {
		var v []float64
		for _, r := range rs {
			if agg == "count" || strings.HasSuffix(agg, ":count") || expr == "-" {
				v = append(v, 1)
				continue
			}
			x, err := value(r, expr)
			if err != nil {
				return nil, err
			}
			v = append(v, x)
		}
		return v, nil
	}
	outer, rest, grouped := strings.Cut(agg, ":")
	if !grouped {
		v, err := vals(rs)
		if err != nil {
			return nil, err
		}
		x, err := aggregate(agg, v)
		return []float64{x}, err
	}
	inner, key, ok := strings.Cut(rest, "@")
	if !ok {
		return nil, fmt.Errorf("aggregate %q: OUTER:INNER@KEY", agg)
	}
	var keys []string
	groups := map[string][]record{}
	for _, r := range rs {
		k := fmt.Sprint(r[key])
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], r)
	}
	var per []float64
	for _, k := range keys {
		v, err := vals(groups[k])
		if err != nil {
			return nil, err
		}
		x, err := aggregate(inner, v)
		if err != nil {
			return nil, err
		}
		per = append(per, x)
	}
	if outer == "each" {
		return per, nil
	}
	x, err := aggregate(outer, per)
	return []float64{x}, err
}

// evalPair: AGG ARRAY FILTER EXPR FILTER2 EXPR2, the two values combined by op.
func evalPair(d *Data, src string, a []string, op func(x, y float64) float64) ([]float64, error) {
	expr2 := a[5]
	if expr2 == "." {
		expr2 = a[3]
	}
	x, err := evalValues(d, src, a[0], a[1], a[2], a[3])
	if err != nil {
		return nil, err
	}
	y, err := evalValues(d, src, a[0], a[1], a[4], expr2)
	if err != nil {
		return nil, err
	}
	if len(x) != 1 || len(y) != 1 {
		return nil, fmt.Errorf("one value on each side, not %d and %d", len(x), len(y))
	}
	return []float64{op(x[0], y[0])}, nil
}
