package eval

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// CgroupRoot is where the cgroup v1 hierarchies are mounted.
var CgroupRoot = "/sys/fs/cgroup"

// Cgroup is a cgroup v1 path (like runc's cgroupsPath, e.g. "/slacker-eval/hp")
// present in the memory and blkio hierarchies; runc creates the same path in the
// others for containers placed under it.
type Cgroup string

func (c Cgroup) dir(controller string) string {
	return filepath.Join(CgroupRoot, controller, string(c))
}

// Child is the cgroup name under c.
func (c Cgroup) Child(name string) Cgroup { return Cgroup(filepath.Join(string(c), name)) }

// Create makes c in the memory and blkio hierarchies. With a disk device (major:minor)
// it sets a read limit no disk reaches, which makes the kernel account the bytes
// read by the cgroup's tasks (blkio.throttle.io_service_bytes counts only where a
// throttling rule applies; children inherit the rule).
func (c Cgroup) Create(device string) error {
	for _, ctl := range []string{"memory", "blkio"} {
		if err := os.MkdirAll(c.dir(ctl), 0o755); err != nil {
			return fmt.Errorf("cgroup %s: %w", c, err)
		}
	}
	if device != "" {
		if err := os.WriteFile(filepath.Join(c.dir("blkio"), "blkio.throttle.read_bps_device"), []byte(device+" 1099511627776\n"), 0o644); err != nil {
			return fmt.Errorf("cgroup %s: blkio accounting: %w", c, err)
		}
	}
	return nil
}

// SetMemoryLimit limits the cgroup's memory (with its descendants); 0 removes the
// limit.
func (c Cgroup) SetMemoryLimit(n int64) error {
	v := "-1"
	if n > 0 {
		v = strconv.FormatInt(n, 10)
	}
	return os.WriteFile(filepath.Join(c.dir("memory"), "memory.limit_in_bytes"), []byte(v), 0o644)
}

// Enter moves process pid into c (memory and blkio).
func (c Cgroup) Enter(pid int) error {
	for _, ctl := range []string{"memory", "blkio"} {
		if err := os.WriteFile(filepath.Join(c.dir(ctl), "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			return fmt.Errorf("move %d into %s %s: %w", pid, ctl, c, err)
		}
	}
	return nil
}

// MemoryStat reads memory.stat (totals include descendants), plus usage and
// max_usage under those names.
func (c Cgroup) MemoryStat() (map[string]int64, error) {
	m, err := readKV(filepath.Join(c.dir("memory"), "memory.stat"))
	if err != nil {
		return nil, err
	}
	for _, f := range []string{"usage_in_bytes", "max_usage_in_bytes", "failcnt"} {
		if b, err := os.ReadFile(filepath.Join(c.dir("memory"), "memory."+f)); err == nil {
			if v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil {
				m[f] = v
			}
		}
	}
	return m, nil
}

// OOMKills is the number of OOM kills in the cgroup (memory.oom_control).
func (c Cgroup) OOMKills() int64 {
	m, _ := readKV(filepath.Join(c.dir("memory"), "memory.oom_control"))
	return m["oom_kill"]
}

// IO returns the bytes the cgroup and its descendants read and wrote on block
// devices (accounted once Create set a rule).
func (c Cgroup) IO() (read, written int64, err error) {
	f, err := os.Open(filepath.Join(c.dir("blkio"), "blkio.throttle.io_service_bytes_recursive"))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		r, w := ParseIOServiceLine(sc.Text())
		read, written = read+r, written+w
	}
	return read, written, sc.Err()
}

// ParseIOServiceLine reads one line of blkio.throttle.io_service_bytes: "MAJ:MIN Read
// N" counts as read, "MAJ:MIN Write N" as written; totals and other lines count
// nothing.
func ParseIOServiceLine(line string) (read, written int64) {
	f := strings.Fields(line)
	if len(f) != 3 || !strings.Contains(f[0], ":") {
		return 0, 0
	}
	n, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil {
		return 0, 0
	}
	switch f[1] {
	case "Read":
		return n, 0
	case "Write":
		return 0, n
	}
	return 0, 0
}

// Remove removes c and everything below it in every hierarchy, deepest first,
// waiting a little for exiting tasks.
func (c Cgroup) Remove() error {
	ents, err := os.ReadDir(CgroupRoot)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range ents {
		root := filepath.Join(CgroupRoot, e.Name(), string(c))
		var dirs []string
		filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			var err error
			for try := 0; try < 50; try++ {
				if err = os.Remove(d); err == nil || errors.Is(err, os.ErrNotExist) {
					err = nil
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// readKV reads "key value" lines.
func readKV(path string) (map[string]int64, error) {
	lines, err := Lines(path)
	if err != nil {
		return nil, err
	}
	m := map[string]int64{}
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) == 2 {
			if v, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				m[f[0]] = v
			}
		}
	}
	return m, nil
}

// DeviceOf returns the major:minor of the block device holding path's filesystem
// ("" if it is not a plain block device, e.g. on a device mapper or overlay).
func DeviceOf(path string) string {
	lines, err := Lines("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	best, dev := "", ""
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) < 5 {
			continue
		}
		mp := f[4]
		if (path == mp || strings.HasPrefix(path, strings.TrimSuffix(mp, "/")+"/")) && len(mp) >= len(best) {
			best, dev = mp, f[2]
		}
	}
	return dev
}

// ProcRSS is a process's resident set size in bytes (0 if unknown).
func ProcRSS(pid int) int64 {
	lines, err := Lines(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range lines {
		if strings.HasPrefix(l, "VmRSS:") {
			f := strings.Fields(l)
			if len(f) >= 2 {
				v, _ := strconv.ParseInt(f[1], 10, 64)
				return v << 10
			}
		}
	}
	return 0
}

// ProcCPU is the CPU time (user + system) process pid has used, 0 if unknown.
func ProcCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	return parseStatCPU(string(b))
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times (100 on Linux).
const clockTicks = 100

// parseStatCPU reads utime and stime (fields 14 and 15) of a /proc/PID/stat line;
// the command (field 2) may hold spaces and parentheses, so fields count from the
// last ')'.
func parseStatCPU(stat string) time.Duration {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(stat[i+1:]) // f[0] is field 3 (state)
	if len(f) < 13 {
		return 0
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return time.Duration(u+s) * time.Second / clockTicks
}

// CPUUsage is the CPU time the cgroup and its descendants used (cpuacct.usage),
// 0 where the cpuacct hierarchy has no such cgroup.
func (c Cgroup) CPUUsage() time.Duration {
	b, err := os.ReadFile(filepath.Join(c.dir("cpuacct"), "cpuacct.usage"))
	if err != nil {
		return 0
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0
	}
	return time.Duration(n)
}
