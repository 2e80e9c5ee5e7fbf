package launch

import (
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

func TestTailAndConfig(t *testing.T) {
	w := &tailWriter{max: 64}
	w.Write([]byte("one\ntwo\nthree\n"))
	w.Write([]byte("four\nfive\nsix\nseven"))
	if got := w.String(); got != "three | four | five | six | seven" {
		t.Fatalf("tail %q", got)
	}
	w = &tailWriter{max: 8}
	w.Write([]byte("hello world"))
	if got := w.String(); got != "lo world" {
		t.Fatalf("tail %q", got)
	}
	c := ImageConfig(v1.Config{User: "u", Cmd: []string{"x"}, Env: []string{"A=1"}, WorkingDir: "/w", Entrypoint: []string{"e"}})
	if c.User != "u" || c.Cmd[0] != "x" || c.Env[0] != "A=1" || c.WorkingDir != "/w" || c.Entrypoint[0] != "e" {
		t.Fatalf("config %+v", c)
	}
	if !strings.HasSuffix((&ctrLauncher{o: Options{Dir: "/d"}}).pidFile("x"), "/d/pid-x") {
		t.Fatal("pid file")
	}
}
