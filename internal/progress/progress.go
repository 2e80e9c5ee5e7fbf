package progress

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/slacker-dev/slacker/internal/units"
)

// Reporter receives a long command's progress: steps, each said in a line, and
// tasks whose amount of work is known (bytes or items), done a piece at a time.
// Safe for concurrent use.
type Reporter interface {
	// Step says that a step is done.
	Step(format string, args ...any)
	// Start begins a task of total units (0 or less: not known in advance).
	Start(what string, total int64, unit Unit) Task
}

// Task is one measured piece of work.
type Task interface {
	// Add counts n more units done.
	Add(n int64)
	// Done ends the task (once; later calls do nothing).
	Done()
}

// Unit is what a task counts.
type Unit int

const (
	Bytes Unit = iota // shown as KiB, MiB, ... with a rate
	Items             // shown as counts ("objects", "chunks")
)

// Mode is how a Reporter shows progress.
type Mode int

const (
	Off   Mode = iota // nothing (-q)
	Lines             // plain lines: steps, and a task's state every few seconds and at its end
	Bar               // a bar with the amount, rate and estimate, redrawn in place (a terminal)
	JSON              // one JSON object per event (--json), for a script
)

// Options configure New.
type Options struct {
	Quiet bool // nothing at all
	JSON  bool // JSON lines
	// Every is how often Lines reports a task under way (default 5 s).
	Every time.Duration
}

// ModeFor returns the mode New chooses for w: Off with Quiet, JSON with JSON, Bar
// where w is a terminal, Lines elsewhere (a pipe, a file, CI's log).
func ModeFor(w io.Writer, o Options) Mode {
	switch {
	case o.Quiet:
		return Off
	case o.JSON:
		return JSON
	}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		return Bar
	}
	return Lines
}

// New returns the Reporter that writes to w in the mode ModeFor chooses.
func New(w io.Writer, o Options) Reporter { return NewMode(w, ModeFor(w, o), o) }

// NewMode returns a Reporter of mode m writing to w.
func NewMode(w io.Writer, m Mode, o Options) Reporter {
	if o.Every <= 0 {
		o.Every = 5 * time.Second
	}
	if m == Off {
		return Discard
	}
	return &reporter{w: w, mode: m, every: o.Every}
}

// Discard is a Reporter that shows nothing.
var Discard Reporter = discard{}

type discard struct{}

func (discard) Step(string, ...any)            {}
func (discard) Start(string, int64, Unit) Task { return discardTask{} }

type discardTask struct{}

func (discardTask) Add(int64) {}
func (discardTask) Done()     {}

type reporter struct {
	mu    sync.Mutex // one writer at a time
	w     io.Writer
	mode  Mode
	every time.Duration
	bar   *progressbar.ProgressBar // the bar drawn now (Bar), cleared before a step line
}

// event is a JSON line.
type event struct {
	Event   string  `json:"event"` // step, start, progress, done
	Message string  `json:"message,omitempty"`
	Task    string  `json:"task,omitempty"`
	Unit    string  `json:"unit,omitempty"`
	Done    int64   `json:"done"`
	Total   int64   `json:"total,omitempty"`
	Seconds float64 `json:"seconds,omitempty"`
}

func (r *reporter) emit(e event) {
	b, _ := json.Marshal(e)
	fmt.Fprintf(r.w, "%s\n", b)
}

func (r *reporter) Step(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.mu.Lock()
	defer r.mu.Unlock()
	switch r.mode {
	case JSON:
		r.emit(event{Event: "step", Message: msg})
	case Bar:
		if r.bar != nil {
			r.bar.Clear()
		}
		fmt.Fprintln(r.w, msg)
		if r.bar != nil {
			r.bar.RenderBlank()
		}
	default:
		fmt.Fprintln(r.w, msg)
	}
}

func (r *reporter) Start(what string, total int64, unit Unit) Task {
	t := &task{r: r, what: what, total: total, unit: unit, start: time.Now()}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch r.mode {
	case JSON:
		r.emit(event{Event: "start", Task: what, Unit: unit.String(), Total: total})
	case Bar:
		max := total
		if max <= 0 {
			max = -1 // a spinner
		}
		opts := []progressbar.Option{
			progressbar.OptionSetWriter(r.w), progressbar.OptionSetDescription(what),
			progressbar.OptionSetPredictTime(true), progressbar.OptionSetElapsedTime(true),
			progressbar.OptionThrottle(100 * time.Millisecond), progressbar.OptionSetWidth(30),
			progressbar.OptionShowCount(), progressbar.OptionOnCompletion(func() { fmt.Fprintln(r.w) }),
		}
		if unit == Bytes {
			opts = append(opts, progressbar.OptionShowBytes(true), progressbar.OptionUseIECUnits(true))
		} else {
			opts = append(opts, progressbar.OptionShowIts(), progressbar.OptionSetItsString("it"))
		}
		if r.bar != nil { // one bar at a time: a new task ends the drawing of the last
			r.bar.Clear()
		}
		t.bar = progressbar.NewOptions64(max, opts...)
		r.bar = t.bar
	case Lines:
		t.last = t.start
	}
	return t
}

type task struct {
	r     *reporter
	what  string
	total int64
	unit  Unit
	start time.Time

	mu   sync.Mutex
	done int64
	last time.Time // of the last line (Lines) or event (JSON)
	bar  *progressbar.ProgressBar
	over bool
}

func (t *task) Add(n int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.over {
		return
	}
	t.done += n
	switch t.r.mode {
	case Bar:
		t.r.mu.Lock()
		t.bar.Add64(n)
		t.r.mu.Unlock()
	case Lines, JSON:
		if now := time.Now(); now.Sub(t.last) >= t.r.every {
			t.last = now
			t.r.mu.Lock()
			if t.r.mode == JSON {
				t.r.emit(event{Event: "progress", Task: t.what, Unit: t.unit.String(), Done: t.done, Total: t.total,
					Seconds: now.Sub(t.start).Seconds()})
			} else {
				fmt.Fprintln(t.r.w, t.line(now))
			}
			t.r.mu.Unlock()
		}
	}
}

func (t *task) Done() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.over {
		return
	}
	t.over = true
	now := time.Now()
	t.r.mu.Lock()
	defer t.r.mu.Unlock()
	switch t.r.mode {
	case Bar:
		if t.total <= 0 {
			t.bar.ChangeMax64(t.done)
		}
		t.bar.Finish()
		if t.r.bar == t.bar {
			t.r.bar = nil
		}
	case JSON:
		t.r.emit(event{Event: "done", Task: t.what, Unit: t.unit.String(), Done: t.done, Total: t.total,
			Seconds: now.Sub(t.start).Seconds()})
	case Lines:
		if now.Sub(t.start) >= t.r.every/5 || t.done > 0 { // a task too short to report says so only at its end
			fmt.Fprintln(t.r.w, t.line(now)+" done")
		}
	}
}

// line is a task's state in words: "what: 12.0 MiB of 48.0 MiB (25%), 3.1 MiB/s, about 12s left".
func (t *task) line(now time.Time) string {
	el := now.Sub(t.start).Seconds()
	s := t.what + ": " + t.unit.format(t.done)
	if t.total > 0 {
		s += fmt.Sprintf(" of %s (%d%%)", t.unit.format(t.total), t.done*100/t.total)
	}
	if el >= 1 && t.done > 0 { // a rate over less than a second says little
		rate := float64(t.done) / el
		s += ", " + t.unit.format(int64(rate)) + "/s"
		if t.total > t.done {
			left := time.Duration(float64(t.total-t.done) / rate * float64(time.Second)).Round(time.Second)
			s += fmt.Sprintf(", about %s left", left)
		}
	}
	return s
}

func (u Unit) String() string {
	if u == Bytes {
		return "bytes"
	}
	return "items"
}

func (u Unit) format(n int64) string {
	if u == Bytes {
		return units.Bytes(n)
	}
	return fmt.Sprint(n)
}

// Reader counts what is read through r into t.
func Reader(r io.Reader, t Task) io.Reader { return &countingReader{r: r, t: t} }

type countingReader struct {
	r io.Reader
	t Task
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n > 0 {
		c.t.Add(int64(n))
	}
	return n, err
}
