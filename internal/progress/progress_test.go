package progress

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

func work(r Reporter) {
	r.Step("base filesystem: %s", "sha256:abc")
	t := r.Start("layer 1/1", 3<<20, Bytes)
	for range 3 {
		time.Sleep(15 * time.Millisecond)
		t.Add(1 << 20)
	}
	t.Done()
	t.Done() // a second Done does nothing
	t.Add(1) // nor does an Add after it
	c := r.Start("objects", 0, Items)
	c.Add(7)
	c.Done()
	r.Step("converted")
}

// TestLines: steps as lines; a task under way every Every, and once at its end
// with its total, rate and the word done.
func TestLines(t *testing.T) {
	var b bytes.Buffer
	work(NewMode(&b, Lines, Options{Every: 10 * time.Millisecond}))
	out := b.String()
	for _, want := range []string{"base filesystem: sha256:abc\n", "layer 1/1: 1.0 MiB of 3.0 MiB (33%)",
		"layer 1/1: 3.0 MiB of 3.0 MiB (100%) done\n", "objects: 7", "converted\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\r") || strings.Contains(out, "\x1b") {
		t.Errorf("terminal control characters in plain lines:\n%q", out)
	}
}

// TestJSON: one JSON object per line, every event with its task, unit and amounts.
func TestJSON(t *testing.T) {
	var b bytes.Buffer
	work(NewMode(&b, JSON, Options{Every: 10 * time.Millisecond}))
	var events []event
	for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		var e event
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		events = append(events, e)
	}
	first, last := events[0], events[len(events)-1]
	if first.Event != "step" || first.Message != "base filesystem: sha256:abc" || last.Event != "step" || last.Message != "converted" {
		t.Fatalf("events %+v", events)
	}
	var done []event
	for _, e := range events {
		if e.Event == "done" {
			done = append(done, e)
		}
	}
	if len(done) != 2 || done[0].Task != "layer 1/1" || done[0].Done != 3<<20 || done[0].Total != 3<<20 || done[0].Unit != "bytes" ||
		done[1].Task != "objects" || done[1].Done != 7 || done[1].Unit != "items" {
		t.Fatalf("done events %+v", done)
	}
}

// TestBar: a bar redrawn in place, with its description and the amount in bytes,
// and step lines between bars.
func TestBar(t *testing.T) {
	var b bytes.Buffer
	work(NewMode(&b, Bar, Options{}))
	out := b.String()
	for _, want := range []string{"layer 1/1", "3.0 MiB", "\r", "base filesystem: sha256:abc\n", "converted\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%q", want, out)
		}
	}
}

// TestModeFor: -q is silence whatever else; --json JSON; a pipe or file plain
// lines.
func TestModeFor(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, c := range []struct {
		w    io.Writer
		o    Options
		want Mode
	}{
		{f, Options{Quiet: true, JSON: true}, Off},
		{f, Options{JSON: true}, JSON},
		{f, Options{}, Lines},
		{&bytes.Buffer{}, Options{}, Lines},
	} {
		if got := ModeFor(c.w, c.o); got != c.want {
			t.Errorf("%T %+v: mode %d, want %d", c.w, c.o, got, c.want)
		}
	}
	var b bytes.Buffer
	work(New(&b, Options{Quiet: true}))
	if b.Len() != 0 {
		t.Fatalf("quiet wrote %q", b.String())
	}
}
