package rig

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"
)

// Record is what a results file says about the run that wrote it: when, on which
// machine, from which source and by which command. Each results format keeps the
// fields it has always had (HelloBench's results.json, the evaluation's ITEM.json
// and the core benchmark's JSON differ in which machine fields they hold); Record
// is where all of them come from.
type Record struct {
	Date    time.Time // UTC
	Commit  string    // see Commit
	Machine Machine
	Command []string // see Command
}

// NewRecord describes a run starting now.
func NewRecord() Record {
	return Record{Date: time.Now().UTC(), Commit: Commit(), Machine: ThisMachine(), Command: Command()}
}

// Machine describes where a run happened. A field that could not be read is empty.
type Machine struct {
	Hostname string
	Kernel   string // the kernel release
	CPU      string // the first model name of /proc/cpuinfo
	CPUs     int
	Memory   string // MemTotal as /proc/meminfo says it ("24684084 kB")
	OS       string // PRETTY_NAME of /etc/os-release
	// Load is the 1-minute load average when the machine was read: other work on a
	// shared machine shows here.
	Load string
}

// ThisMachine reads the machine's description from /proc and /etc.
func ThisMachine() Machine {
	m := Machine{CPUs: runtime.NumCPU()}
	m.Hostname, _ = os.Hostname()
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
	if b, err := os.ReadFile("/etc/os-release"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "PRETTY_NAME="); ok {
				m.OS = strings.Trim(v, `"`)
			}
		}
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			m.Load = f[0]
		}
	}
	return m
}

// Command is this program's command line as a results file records it: the
// program's name (without its directory, so the line reads as one to type), then
// its arguments.
func Command() []string {
	if len(os.Args) == 0 {
		return nil
	}
	return append([]string{filepath.Base(os.Args[0])}, os.Args[1:]...)
}

// WriteJSON writes v to path (making its directory) indented by one space with a
// final newline, through a temporary file renamed over path, so a reader never
// sees half a file.
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

// Progress prints timestamped progress lines ("[15:04:05] pulled redis"); a nil
// Progress or writer discards them. It is safe for concurrent use.
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
