package eval

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/slacker-dev/slacker/bench/rig"
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
	rec := rig.NewRecord()
	return &Meta{Item: item, Date: rec.Date, Commit: rec.Commit, Machine: machineOf(rec.Machine),
		Command: rec.Command, start: time.Now()}
}

// machineOf keeps the machine fields an item's JSON has always held.
func machineOf(m rig.Machine) Machine {
	return Machine{Kernel: m.Kernel, CPU: m.CPU, CPUs: m.CPUs, Memory: m.Memory, Load: m.Load}
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
		return fmt.Errorf("slacker-bench eval %s must run as root (it mounts filesystems and starts daemons)", item)
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
