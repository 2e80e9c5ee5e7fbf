package eval

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/slacker-dev/slacker/internal/buildinfo"
)

// Meta describes one run of an item.
type Meta struct {
	Item    string    `json:"item"`
	Date    time.Time `json:"date"`
	Commit  string    `json:"commit"`
	Machine Machine   `json:"machine"`
	Command []string  `json:"command,omitempty"`
	// Elapsed is the run's wall-clock time in seconds.
	Elapsed float64 `json:"elapsed_s"`
	// Notes are remarks made during the run (a repeated sample, a skipped case).
	Notes []string `json:"notes,omitempty"`
	// Failed lists what failed; the other results are kept.
	Failed []string `json:"failed,omitempty"`

	mu    sync.Mutex
	start time.Time
}

// Machine describes where an item ran.
type Machine struct {
	Kernel string `json:"kernel"`
	CPU    string `json:"cpu"`
	CPUs   int    `json:"cpus"`
	Memory string `json:"memory"`
	// Load is the 1-minute load average when the run started: other work on a shared
	// machine shows here.
	Load string `json:"load"`
}

// NewMeta starts the record of a run of item.
func NewMeta(item string) *Meta {
	return &Meta{Item: item, Date: time.Now().UTC(), Commit: buildinfo.Commit(), Machine: ThisMachine(),
		Command: os.Args, start: time.Now()}
}

// Done sets Elapsed.
func (m *Meta) Done() { m.Elapsed = time.Since(m.start).Seconds() }

// Note adds a remark; Fail records a failure. Both are safe for concurrent use.
func (m *Meta) Note(format string, args ...any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.Notes = append(m.Notes, fmt.Sprintf(format, args...))
}

func (m *Meta) Fail(format string, args ...any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.Failed = append(m.Failed, fmt.Sprintf(format, args...))
}

// ThisMachine describes the machine.
func ThisMachine() Machine {
	m := Machine{CPUs: runtime.NumCPU()}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				_, v, _ := strings.Cut(l, ":")
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		l, _, _ := strings.Cut(string(b), "\n")
		m.Memory = strings.Join(strings.Fields(strings.TrimPrefix(l, "MemTotal:")), " ")
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			m.Load = f[0]
		}
	}
	return m
}

// WriteJSON writes v to path atomically (indented, with a final newline).
func WriteJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// ReadJSON decodes the file at path into v.
func ReadJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("decode %s: %w", path, err)
	}
	return nil
}

// Progress prints timestamped progress lines; a nil writer discards them. It is safe
// for concurrent use.
type Progress struct {
	mu sync.Mutex
	w  io.Writer
}

// NewProgress returns a Progress writing to w.
func NewProgress(w io.Writer) *Progress { return &Progress{w: w} }

// Printf prints one line.
func (p *Progress) Printf(format string, args ...any) {
	if p == nil || p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "[%s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// Binaries are the programs an item drives.
type Binaries struct {
	Slacker, Slackerd string
}

// Check reports a missing binary with what to do.
func (b Binaries) Check() error {
	for _, p := range []string{b.Slacker, b.Slackerd} {
		if p == "" {
			return fmt.Errorf("slacker and slackerd binaries are needed (scripts/setup.sh builds them into bin/)")
		}
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("%w (scripts/setup.sh builds bin/slacker and bin/slackerd)", err)
		}
	}
	return nil
}

// NeedTools returns an error naming the first of tools not on PATH, with the Debian
// package to install.
func NeedTools(tools map[string]string) error {
	for t, pkg := range tools {
		if _, err := exec.LookPath(t); err != nil {
			return fmt.Errorf("%s is not installed (apt-get install %s, or scripts/setup.sh)", t, pkg)
		}
	}
	return nil
}

// NeedRoot refuses to run an item without root.
func NeedRoot(item string) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("bench eval %s must run as root (it mounts filesystems and starts daemons)", item)
	}
	return nil
}

// Lines reads a file's lines (for /proc files).
func Lines(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out, sc.Err()
}

// Command runs a program to completion; a failure (or a non-zero exit) is an error
// carrying the end of its output.
func Command(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		s := strings.TrimSpace(string(out))
		if len(s) > 800 {
			s = "..." + s[len(s)-800:]
		}
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, s)
	}
	return nil
}
