package workload

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// MaxTimeout bounds timeout_s: a run that needs longer is not a start-up benchmark.
const MaxTimeout = 24 * time.Hour

var (
	// Names become image repositories (hellobench/NAME) and OCI tags.
	nameRE = regexp.MustCompile(`^[a-z0-9]+(?:[._-][a-z0-9]+)*$`)
	// A Debian package name, optionally with :arch and =version.
	pkgRE  = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+(?::[a-z0-9-]+)?(?:=[A-Za-z0-9.+~:-]+)?$`)
	userRE = regexp.MustCompile(`^(?:[a-z_][a-z0-9_-]*\$?|[0-9]+)(?::(?:[a-z_][a-z0-9_-]*|[0-9]+))?$`)
)

var workloadKeys = []string{"name", "category", "base", "layers", "files", "cmd", "stdin", "ready", "timeout_s", "user"}

// ParseFile reads and validates a workloads file.
func ParseFile(file string) (*Set, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read workloads: %w", err)
	}
	s, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return s, nil
}

// Parse validates a workloads document. The first invalid field stops parsing;
// the error names the workload and the field.
func Parse(data []byte) (*Set, error) {
	var doc map[string]any
	if _, err := toml.Decode(string(data), &doc); err != nil {
		return nil, fmt.Errorf("parse toml: %w", err)
	}
	for k := range doc {
		if k != "workload" {
			return nil, fmt.Errorf("unknown top-level key %q (only [[workload]] tables are allowed)", k)
		}
	}
	raw, ok := doc["workload"]
	if !ok {
		return nil, errors.New("no [[workload]] tables")
	}
	tables, ok := raw.([]map[string]any)
	if !ok {
		return nil, fmt.Errorf("workload must be an array of tables ([[workload]]), got %s", typeName(raw))
	}
	set := &Set{}
	seen := map[string]int{}
	for i, t := range tables {
		w, err := parseWorkload(i, t)
		if err != nil {
			return nil, err
		}
		if j, dup := seen[w.Name]; dup {
			return nil, fmt.Errorf("workload %q (#%d): name already used by workload #%d", w.Name, i+1, j+1)
		}
		seen[w.Name] = i
		set.Workloads = append(set.Workloads, w)
	}
	return set, nil
}

// fieldError names the workload (or its position when the name is unknown).
type fieldError struct {
	who   string
	field string
	err   error
}

func (e *fieldError) Error() string { return fmt.Sprintf("%s: %s: %v", e.who, e.field, e.err) }
func (e *fieldError) Unwrap() error { return e.err }

func parseWorkload(i int, t map[string]any) (*Workload, error) {
	w := &Workload{Index: i}
	who := fmt.Sprintf("workload #%d", i+1)
	fail := func(field string, format string, args ...any) error {
		return &fieldError{who: who, field: field, err: fmt.Errorf(format, args...)}
	}
	if v, ok := t["name"]; ok {
		s, ok := v.(string)
		if !ok {
			return nil, fail("name", "want a string, got %s", typeName(v))
		}
		if !nameRE.MatchString(s) {
			return nil, fail("name", "%q is not a valid name (lowercase letters, digits, '.', '_', '-')", s)
		}
		w.Name = s
		who = fmt.Sprintf("workload %q (#%d)", s, i+1)
	} else {
		return nil, fail("name", "missing")
	}
	keys := sortedKeys(t)
	for _, k := range keys {
		if !slices.Contains(workloadKeys, k) {
			return nil, fail(k, "unknown key (known: %s)", strings.Join(workloadKeys, ", "))
		}
	}

	cat, err := str(t, "category", true)
	if err != nil {
		return nil, fail("category", "%v", err)
	}
	if !slices.Contains(Categories, Category(cat)) {
		return nil, fail("category", "unknown category %q (one of %v)", cat, Categories)
	}
	w.Category = Category(cat)

	base, err := str(t, "base", true)
	if err != nil {
		return nil, fail("base", "%v", err)
	}
	if !slices.Contains(Bases, Base(base)) {
		return nil, fail("base", "unknown base %q (one of %v)", base, Bases)
	}
	w.Base = Base(base)

	w.Layers = [][]string{}
	if v, ok := t["layers"]; ok {
		groups, ok := v.([]any)
		if !ok {
			return nil, fail("layers", "want an array of package arrays, got %s", typeName(v))
		}
		for gi, g := range groups {
			pkgs, err := strings1(g)
			if err != nil {
				return nil, fail(fmt.Sprintf("layers[%d]", gi), "%v", err)
			}
			if len(pkgs) == 0 {
				return nil, fail(fmt.Sprintf("layers[%d]", gi), "empty package group")
			}
			for _, p := range pkgs {
				if !pkgRE.MatchString(p) {
					return nil, fail(fmt.Sprintf("layers[%d]", gi), "%q is not a Debian package name", p)
				}
			}
			w.Layers = append(w.Layers, pkgs)
		}
	}

	w.Files = map[string]string{}
	if v, ok := t["files"]; ok {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, fail("files", "want a table of path = content, got %s", typeName(v))
		}
		for _, p := range sortedKeys(m) {
			c, ok := m[p].(string)
			if !ok {
				return nil, fail("files", "content of %q: want a string, got %s", p, typeName(m[p]))
			}
			if !path.IsAbs(p) || path.Clean(p) != p || p == "/" || strings.Contains(p, "/../") {
				return nil, fail("files", "%q is not a clean absolute file path", p)
			}
			w.Files[p] = c
		}
	}

	v, ok := t["cmd"]
	if !ok {
		return nil, fail("cmd", "missing (the argv run in the container)")
	}
	cmd, err := strings1(v)
	if err != nil {
		return nil, fail("cmd", "%v", err)
	}
	if len(cmd) == 0 || cmd[0] == "" {
		return nil, fail("cmd", "empty argv")
	}
	w.Cmd = cmd

	if _, ok := t["stdin"]; ok {
		s, err := str(t, "stdin", false)
		if err != nil {
			return nil, fail("stdin", "%v", err)
		}
		w.Stdin, w.HasStdin = s, true
	}

	rv, ok := t["ready"]
	if !ok {
		return nil, fail("ready", "missing (exactly one of exit, log, tcp, http+port)")
	}
	rt, ok := rv.(map[string]any)
	if !ok {
		return nil, fail("ready", "want an inline table such as { exit = 0 }, got %s", typeName(rv))
	}
	if w.Ready, err = parseReady(rt); err != nil {
		return nil, fail("ready", "%v", err)
	}

	tv, ok := t["timeout_s"]
	if !ok {
		return nil, fail("timeout_s", "missing")
	}
	var secs float64
	switch x := tv.(type) {
	case int64:
		secs = float64(x)
	case float64:
		secs = x
	default:
		return nil, fail("timeout_s", "want a number of seconds, got %s", typeName(tv))
	}
	if math.IsNaN(secs) || secs <= 0 || secs > MaxTimeout.Seconds() {
		return nil, fail("timeout_s", "%v is not in (0, %d]", tv, int(MaxTimeout.Seconds()))
	}
	w.Timeout = time.Duration(secs * float64(time.Second))

	if _, ok := t["user"]; ok {
		u, err := str(t, "user", true)
		if err != nil {
			return nil, fail("user", "%v", err)
		}
		if !userRE.MatchString(u) {
			return nil, fail("user", "%q is not a user name or uid[:gid]", u)
		}
		w.User = u
	}
	return w, nil
}

var readyKeys = []string{"exit", "log", "tcp", "http", "port"}

func parseReady(t map[string]any) (Ready, error) {
	var kinds []string
	for _, k := range sortedKeys(t) {
		switch k {
		case "exit", "log", "tcp", "http":
			kinds = append(kinds, k)
		case "port":
		default:
			return nil, fmt.Errorf("unknown key %q (known: %s)", k, strings.Join(readyKeys, ", "))
		}
	}
	switch len(kinds) {
	case 0:
		return nil, errors.New("no rule (want exactly one of exit, log, tcp, http+port)")
	case 1:
	default:
		return nil, fmt.Errorf("%d rules %v (want exactly one)", len(kinds), kinds)
	}
	_, hasPort := t["port"]
	if hasPort && kinds[0] != "http" {
		return nil, fmt.Errorf("port only goes with http (use tcp = PORT for a bare port)")
	}
	switch kinds[0] {
	case "exit":
		n, err := integer(t["exit"], 0, 255)
		if err != nil {
			return nil, fmt.Errorf("exit: %w", err)
		}
		return &Exit{Code: n}, nil
	case "log":
		s, ok := t["log"].(string)
		if !ok {
			return nil, fmt.Errorf("log: want a regular expression string, got %s", typeName(t["log"]))
		}
		if s == "" {
			return nil, errors.New("log: empty regular expression matches everything")
		}
		re, err := regexp.Compile(s)
		if err != nil {
			return nil, fmt.Errorf("log: %w", err)
		}
		return &Log{Pattern: re}, nil
	case "tcp":
		n, err := integer(t["tcp"], 1, 65535)
		if err != nil {
			return nil, fmt.Errorf("tcp: %w", err)
		}
		return &TCP{Port: n}, nil
	default: // http
		p, ok := t["http"].(string)
		if !ok {
			return nil, fmt.Errorf("http: want a path string, got %s", typeName(t["http"]))
		}
		if !strings.HasPrefix(p, "/") {
			return nil, fmt.Errorf("http: path %q must start with /", p)
		}
		if !hasPort {
			return nil, errors.New("http needs port = PORT")
		}
		n, err := integer(t["port"], 1, 65535)
		if err != nil {
			return nil, fmt.Errorf("port: %w", err)
		}
		return &HTTP{Path: p, Port: n}, nil
	}
}

func str(t map[string]any, key string, nonEmpty bool) (string, error) {
	v, ok := t[key]
	if !ok {
		return "", errors.New("missing")
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("want a string, got %s", typeName(v))
	}
	if nonEmpty && s == "" {
		return "", errors.New("empty")
	}
	return s, nil
}

func strings1(v any) ([]string, error) {
	a, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("want an array of strings, got %s", typeName(v))
	}
	out := make([]string, 0, len(a))
	for i, e := range a {
		s, ok := e.(string)
		if !ok {
			return nil, fmt.Errorf("element %d: want a string, got %s", i, typeName(e))
		}
		out = append(out, s)
	}
	return out, nil
}

func integer(v any, lo, hi int64) (int, error) {
	n, ok := v.(int64)
	if !ok {
		return 0, fmt.Errorf("want an integer, got %s", typeName(v))
	}
	if n < lo || n > hi {
		return 0, fmt.Errorf("%d is not in [%d, %d]", n, lo, hi)
	}
	return int(n), nil
}

func typeName(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case int64:
		return "an integer"
	case float64:
		return "a float"
	case bool:
		return "a boolean"
	case []any, []map[string]any:
		return "an array"
	case map[string]any:
		return "a table"
	case time.Time:
		return "a datetime"
	default:
		return fmt.Sprintf("%T", v)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
