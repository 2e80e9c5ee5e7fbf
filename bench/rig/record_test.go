package rig

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRecord: a run's record names this machine (as Linux describes it), the
// program by its base name, and the time in UTC.
func TestRecord(t *testing.T) {
	before := time.Now()
	r := NewRecord()
	if r.Date.Location() != time.UTC || r.Date.Before(before.Add(-time.Second)) || r.Date.After(time.Now()) {
		t.Errorf("date %v", r.Date)
	}
	m := r.Machine
	if m.Kernel == "" || m.CPUs <= 0 || !strings.HasSuffix(m.Memory, " kB") || m.Load == "" || m.Hostname == "" {
		t.Errorf("machine %+v", m)
	}
	if len(r.Command) == 0 || r.Command[0] != filepath.Base(os.Args[0]) || strings.Contains(r.Command[0], "/") {
		t.Errorf("command %q (args %q)", r.Command, os.Args)
	}
	if r.Commit == "" {
		t.Error("no commit")
	}
}

// TestJSON: a results file is indented by one space, ends with a newline, leaves
// no temporary file, and reads back; a corrupt one names its path.
func TestJSON(t *testing.T) {
	type doc struct {
		Name   string    `json:"name"`
		Values []float64 `json:"values"`
	}
	path := filepath.Join(t.TempDir(), "sub", "out.json")
	if err := WriteJSON(path, doc{Name: "a", Values: []float64{1.5}}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := "{\n \"name\": \"a\",\n \"values\": [\n  1.5\n ]\n}\n"; string(b) != want {
		t.Errorf("file %q, want %q", b, want)
	}
	if _, err := os.Stat(path + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("temporary file: %v", err)
	}
	var back doc
	if err := ReadJSON(path, &back); err != nil || back.Name != "a" || len(back.Values) != 1 || back.Values[0] != 1.5 {
		t.Errorf("read back %+v, %v", back, err)
	}
	if err := os.WriteFile(path, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := ReadJSON(path, &back); err == nil || !strings.Contains(err.Error(), "decode "+path) {
		t.Errorf("corrupt file: %v", err)
	}
	if err := ReadJSON(path+".missing", &back); !os.IsNotExist(err) {
		t.Errorf("missing file: %v", err)
	}
}

func TestProgress(t *testing.T) {
	var b bytes.Buffer
	NewProgress(&b).Printf("pulled %s in %.1fs", "redis", 1.25)
	line := b.String()
	if len(line) != len("[15:04:05] pulled redis in 1.2s\n") || line[0] != '[' || line[9] != ']' || !strings.HasSuffix(line, "] pulled redis in 1.2s\n") {
		t.Errorf("line %q", line)
	}
	var nilProgress *Progress
	nilProgress.Printf("nothing")      // discarded, no panic
	NewProgress(nil).Printf("nothing") // likewise
}
