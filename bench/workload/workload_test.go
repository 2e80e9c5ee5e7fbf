package workload

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"
)

// The real workloads file of the project, copied from shared/hellobench.
const realFile = "testdata/workloads.toml"

func TestParseRealFile(t *testing.T) {
	set, err := ParseFile(realFile)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(set.Workloads); got != 40 {
		t.Fatalf("parsed %d workloads, want 40", got)
	}
	perCat := map[Category]int{}
	for i, w := range set.Workloads {
		perCat[w.Category]++
		if w.Index != i {
			t.Errorf("%s: index %d, want %d", w.Name, w.Index, i)
		}
	}
	for _, c := range Categories {
		if perCat[c] == 0 {
			t.Errorf("no workload in category %s", c)
		}
	}
	tests := []struct {
		name   string
		base   Base
		layers int
		ready  string
		user   string
		files  int
	}{
		{"debian", Minbase, 0, "{ exit = 0 }", "", 0},
		{"busybox", Scratch, 1, "{ exit = 0 }", "", 0},
		{"gcc", Minbase, 4, "{ exit = 0 }", "", 1},
		{"postgres", Minbase, 3, `{ log = "database system is ready to accept connections" }`, "postgres", 0},
		{"memcached", Minbase, 1, "{ tcp = 11211 }", "", 0},
		{"registry", Minbase, 2, `{ http = "/v2/", port = 5000 }`, "", 0},
		{"hello-world", Scratch, 0, "{ exit = 0 }", "", 0},
	}
	for _, tt := range tests {
		w := set.Get(tt.name)
		if w == nil {
			t.Errorf("%s: missing", tt.name)
			continue
		}
		if w.Base != tt.base || len(w.Layers) != tt.layers || w.Ready.String() != tt.ready || w.User != tt.user || len(w.Files) != tt.files {
			t.Errorf("%s: got base=%s layers=%d ready=%s user=%q files=%d", tt.name, w.Base, len(w.Layers), w.Ready, w.User, len(w.Files))
		}
	}
	if w := set.Get("perl"); w.Cmd[2] != `print "hello\n"` {
		t.Errorf("perl cmd not unescaped: %q", w.Cmd[2])
	}
	if w := set.Get("tomcat"); w.Timeout != 240*time.Second {
		t.Errorf("tomcat timeout %v", w.Timeout)
	}
	if w := set.Get("gcc"); !strings.Contains(w.Files["/src/hello.c"], "puts(\"hello\")") {
		t.Errorf("gcc file content %q", w.Files["/src/hello.c"])
	}
}

const valid = `
[[workload]]
name = "w"
category = "distro"
base = "minbase"
layers = [["aa", "bb"], ["cc"]]
cmd = ["echo", "hi"]
ready = { exit = 0 }
timeout_s = 10
`

// mutate returns valid with one line replaced (or appended when old is "").
func mutate(old, new string) string {
	if old == "" {
		return valid + new + "\n"
	}
	if !strings.Contains(valid, old) {
		panic("test bug: " + old)
	}
	return strings.Replace(valid, old, new, 1)
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want string // substring of the error
	}{
		{"syntax", "[[workload]\nname=", "parse toml"},
		{"no workloads", "", "no [[workload]] tables"},
		{"top-level key", "x = 1\n" + valid, `unknown top-level key "x"`},
		{"unknown key", mutate("", `colour = "red"`), `workload "w" (#1): colour: unknown key`},
		{"missing name", mutate(`name = "w"`, ""), "workload #1: name: missing"},
		{"bad name", mutate(`name = "w"`, `name = "W W"`), "not a valid name"},
		{"unknown category", mutate(`category = "distro"`, `category = "games"`), `workload "w" (#1): category: unknown category "games"`},
		{"unknown base", mutate(`base = "minbase"`, `base = "alpine"`), `base: unknown base "alpine"`},
		{"base not string", mutate(`base = "minbase"`, `base = 3`), "base: want a string, got an integer"},
		{"empty group", mutate(`layers = [["aa", "bb"], ["cc"]]`, `layers = [["aa"], []]`), "layers[1]: empty package group"},
		{"bad package", mutate(`layers = [["aa", "bb"], ["cc"]]`, `layers = [["a b"]]`), `"a b" is not a Debian package name`},
		{"layers not nested", mutate(`layers = [["aa", "bb"], ["cc"]]`, `layers = ["aa"]`), "layers[0]: want an array of strings"},
		{"missing cmd", mutate(`cmd = ["echo", "hi"]`, ""), "cmd: missing"},
		{"empty cmd", mutate(`cmd = ["echo", "hi"]`, `cmd = []`), "cmd: empty argv"},
		{"cmd not strings", mutate(`cmd = ["echo", "hi"]`, `cmd = ["echo", 1]`), "cmd: element 1: want a string"},
		{"missing ready", mutate(`ready = { exit = 0 }`, ""), "ready: missing"},
		{"no rule", mutate(`ready = { exit = 0 }`, `ready = {}`), "ready: no rule"},
		{"two rules", mutate(`ready = { exit = 0 }`, `ready = { exit = 0, tcp = 80 }`), "ready: 2 rules [exit tcp]"},
		{"unknown rule", mutate(`ready = { exit = 0 }`, `ready = { exitt = 0 }`), `ready: unknown key "exitt"`},
		{"exit range", mutate(`ready = { exit = 0 }`, `ready = { exit = 300 }`), "exit: 300 is not in [0, 255]"},
		{"bad regex", mutate(`ready = { exit = 0 }`, `ready = { log = "(" }`), "log: error parsing regexp"},
		{"empty regex", mutate(`ready = { exit = 0 }`, `ready = { log = "" }`), "log: empty regular expression"},
		{"tcp port", mutate(`ready = { exit = 0 }`, `ready = { tcp = 0 }`), "tcp: 0 is not in [1, 65535]"},
		{"http no port", mutate(`ready = { exit = 0 }`, `ready = { http = "/" }`), "http needs port"},
		{"http bad path", mutate(`ready = { exit = 0 }`, `ready = { http = "x", port = 80 }`), "must start with /"},
		{"port without http", mutate(`ready = { exit = 0 }`, `ready = { exit = 0, port = 80 }`), "port only goes with http"},
		{"missing timeout", mutate(`timeout_s = 10`, ""), "timeout_s: missing"},
		{"zero timeout", mutate(`timeout_s = 10`, `timeout_s = 0`), "timeout_s: 0 is not in (0, 86400]"},
		{"negative timeout", mutate(`timeout_s = 10`, `timeout_s = -5`), "is not in (0, 86400]"},
		{"string timeout", mutate(`timeout_s = 10`, `timeout_s = "10"`), "timeout_s: want a number of seconds, got a string"},
		{"relative file", mutate("", `files = { "src/a" = "x" }`), `"src/a" is not a clean absolute file path`},
		{"dotdot file", mutate("", `files = { "/a/../b" = "x" }`), "not a clean absolute file path"},
		{"file content", mutate("", `files = { "/a" = 1 }`), `content of "/a": want a string`},
		{"bad user", mutate("", `user = "root user"`), "not a user name"},
		{"stdin type", mutate("", `stdin = 3`), "stdin: want a string"},
		{"duplicate", valid + valid, `workload "w" (#2): name already used by workload #1`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.doc))
			if err == nil {
				t.Fatalf("no error, want %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q does not contain %q", err, tt.want)
			}
		})
	}
}

func TestParseOtherFile(t *testing.T) {
	doc := `
[[workload]]
name = "cat"
category = "other"
base = "scratch"
layers = [["busybox-static"], ["hello"]]
files = { "/etc/motd" = "hi\n" }
cmd = ["/bin/busybox", "cat"]
stdin = "hello\n"
ready = { log = "^hello$" }
timeout_s = 1.5
user = "1000:1000"

[[workload]]
name = "web"
category = "web-server"
base = "standard"
cmd = ["httpd"]
ready = { http = "/health", port = 8080 }
timeout_s = 30
`
	set, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	c := set.Get("cat")
	if !c.HasStdin || c.Stdin != "hello\n" || c.Timeout != 1500*time.Millisecond || c.User != "1000:1000" {
		t.Fatalf("cat: %+v", c)
	}
	if got := c.Packages(); strings.Join(got, ",") != "busybox-static,hello" {
		t.Fatalf("packages %v", got)
	}
	web := set.Get("web")
	if web.HasStdin || len(web.Layers) != 0 || web.Layers == nil {
		t.Fatalf("web: %+v", web)
	}
	h, ok := web.Ready.(*HTTP)
	if !ok || h.URL("127.0.0.1") != "http://127.0.0.1:8080/health" {
		t.Fatalf("web ready %v", web.Ready)
	}
	sel, err := set.Select([]string{"web", "cat"})
	if err != nil || len(sel) != 2 || sel[0].Name != "cat" {
		t.Fatalf("select: %v %v", sel, err)
	}
	if _, err := set.Select([]string{"nope"}); err == nil || !strings.Contains(err.Error(), `no workload named "nope"`) {
		t.Fatalf("select unknown: %v", err)
	}
}

func TestImageHash(t *testing.T) {
	base, err := Parse([]byte(valid))
	if err != nil {
		t.Fatal(err)
	}
	h0 := base.Workloads[0].ImageHash()
	tests := []struct {
		name     string
		doc      string
		sameHash bool
	}{
		{"identical", valid, true},
		{"timeout only", mutate(`timeout_s = 10`, `timeout_s = 99`), true},
		{"stdin only", mutate("", `stdin = "x"`), true},
		{"cmd", mutate(`cmd = ["echo", "hi"]`, `cmd = ["echo", "ho"]`), false},
		{"group order", mutate(`layers = [["aa", "bb"], ["cc"]]`, `layers = [["cc"], ["aa", "bb"]]`), false},
		{"file", mutate("", `files = { "/a" = "x" }`), false},
		{"user", mutate("", `user = "nobody"`), false},
		{"ready", mutate(`ready = { exit = 0 }`, `ready = { exit = 1 }`), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Parse([]byte(tt.doc))
			if err != nil {
				t.Fatal(err)
			}
			if got := s.Workloads[0].ImageHash() == h0; got != tt.sameHash {
				t.Fatalf("same hash = %v, want %v", got, tt.sameHash)
			}
		})
	}
}

func TestReadyHelpers(t *testing.T) {
	e := &Exit{Code: 0}
	if !e.Satisfied(0) || e.Satisfied(1) {
		t.Error("exit 0 rule")
	}
	h := &HTTP{Path: "/", Port: 80}
	for status, want := range map[int]bool{200: true, 302: true, 404: true, 499: true, 500: false, 503: false, 0: false} {
		if h.Accepts(status) != want {
			t.Errorf("http accepts %d = %v", status, !want)
		}
	}
	if (&TCP{Port: 6379}).Address("10.0.0.1") != "10.0.0.1:6379" {
		t.Error("tcp address")
	}
	if (&HTTP{Path: "/v2/", Port: 5000}).URL("::1") != "http://[::1]:5000/v2/" {
		t.Error("http url with ipv6")
	}
}

func mustLog(t *testing.T, re string) *Log {
	t.Helper()
	set, err := Parse([]byte(mutate(`ready = { exit = 0 }`, fmt.Sprintf("ready = { log = %q }", re))))
	if err != nil {
		t.Fatal(err)
	}
	return set.Workloads[0].Ready.(*Log)
}

func TestLineMatcher(t *testing.T) {
	tests := []struct {
		name   string
		re     string
		chunks []string
		want   string // matched line; "" for no match
	}{
		{"whole line", "ready to accept", []string{"starting\nready to accept connections\n"}, "ready to accept connections"},
		{"split across writes", "ready to accept", []string{"rea", "dy to acc", "ept\n"}, "ready to accept"},
		{"crlf", "^ready$", []string{"ready\r\n"}, "ready"},
		{"no newline yet", "ready", []string{"ready"}, ""},
		{"no match", "ready", []string{"a\nb\n"}, ""},
		{"first match wins", "line", []string{"line 1\nline 2\n"}, "line 1"},
		{"anchored start", "^Server startup", []string{"x Server startup in\nServer startup in 5 ms\n"}, "Server startup in 5 ms"},
		{"overlong line is cut not buffered", "^x+$", []string{strings.Repeat("x", maxLine+10) + "\n"}, strings.Repeat("x", maxLine)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := NewLineMatcher(mustLog(t, tt.re))
			w := m.Stream()
			for _, c := range tt.chunks {
				if n, err := w.Write([]byte(c)); n != len(c) || err != nil {
					t.Fatalf("write = %d, %v", n, err)
				}
			}
			line, ok := m.Matched()
			if ok != (tt.want != "") || line != tt.want {
				t.Fatalf("matched %q, %v; want %q", line, ok, tt.want)
			}
			select {
			case <-m.Done():
				if !ok {
					t.Fatal("done without match")
				}
			default:
				if ok {
					t.Fatal("match without done")
				}
			}
		})
	}
}

func TestLineMatcherFlushAndStreams(t *testing.T) {
	m := NewLineMatcher(mustLog(t, "^ready$"))
	out, errw := m.Stream(), m.Stream()
	// Interleaved partial lines on two streams must not mix.
	io.WriteString(out, "rea")
	io.WriteString(errw, "noise")
	io.WriteString(out, "dy")
	if _, ok := m.Matched(); ok {
		t.Fatal("matched before line end")
	}
	Flush(out)
	if line, ok := m.Matched(); !ok || line != "ready" {
		t.Fatalf("after flush: %q %v", line, ok)
	}
}

func TestLineMatcherConcurrent(t *testing.T) {
	m := NewLineMatcher(mustLog(t, "^go 7 done$"))
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := m.Stream()
			for j := range 100 {
				fmt.Fprintf(w, "go %d line %d\n", i, j)
			}
			fmt.Fprintf(w, "go %d done\n", i)
		}()
	}
	wg.Wait()
	if line, ok := m.Matched(); !ok || line != "go 7 done" {
		t.Fatalf("got %q %v", line, ok)
	}
}

func TestFieldErrorUnwrap(t *testing.T) {
	_, err := Parse([]byte(mutate(`base = "minbase"`, `base = "x"`)))
	var fe *fieldError
	if !errors.As(err, &fe) || fe.field != "base" {
		t.Fatalf("want a field error on base, got %v", err)
	}
}

// The containerd copy of the workloads (testdata/workloads-containerd.toml) is
// another file in the same format; its rabbitmq rule must match what RabbitMQ
// 3.10 really prints on stdout.
func TestParseContainerdCopy(t *testing.T) {
	set, err := ParseFile("testdata/workloads-containerd.toml")
	if err != nil {
		t.Fatal(err)
	}
	orig, err := ParseFile(realFile)
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Workloads) != len(orig.Workloads) {
		t.Fatalf("%d workloads, want %d", len(set.Workloads), len(orig.Workloads))
	}
	changed := map[string]bool{}
	for _, w := range set.Workloads {
		if w.ImageHash() != orig.Get(w.Name).ImageHash() {
			changed[w.Name] = true
		}
	}
	if len(changed) != 3 || !changed["httpd"] || !changed["mariadb"] || !changed["rabbitmq"] {
		t.Fatalf("changed workloads %v", changed)
	}
	m := NewLineMatcher(set.Get("rabbitmq").Ready.(*Log))
	io.WriteString(m.Stream(), "  Config file(s): (none)\n\n  Starting broker... completed with 0 plugins.\n")
	if _, ok := m.Matched(); !ok {
		t.Fatal("rabbitmq rule does not match RabbitMQ 3.10's stdout")
	}
}
