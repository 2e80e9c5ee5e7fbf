package storage

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// JobSpec is one fio run: Jobs jobs, each on its own file, at queue depth Depth.
type JobSpec struct {
	RW      string // randread, randwrite, read, write
	BS      int64  // block size in bytes
	Jobs    int
	Depth   int
	Runtime int // seconds, time based
	// Files are the jobs' files relative to Dir, one per job (cycled if fewer).
	Files    []string
	Dir      string
	FileSize int64
	// Direct bypasses the page cache (O_DIRECT), as the paper's libaio runs do.
	Direct bool
}

// JobFile renders the spec as a fio job file: a [global] section and one section
// per job, each with its own file, reported as one group.
func (j JobSpec) JobFile() string {
	var b strings.Builder
	direct := 0
	if j.Direct {
		direct = 1
	}
	fmt.Fprintf(&b, "[global]\nioengine=libaio\ndirect=%d\nrw=%s\nbs=%d\niodepth=%d\nruntime=%d\ntime_based=1\n",
		direct, j.RW, j.BS, j.Depth, j.Runtime)
	fmt.Fprintf(&b, "size=%d\nnorandommap=1\nrandrepeat=0\ngroup_reporting=1\ndirectory=%s\n", j.FileSize, j.Dir)
	fmt.Fprintf(&b, "create_on_open=0\nallow_file_create=0\nfallocate=none\n")
	for i := 0; i < j.Jobs; i++ {
		f := j.Files[i%len(j.Files)]
		fmt.Fprintf(&b, "\n[job%d]\nfilename=%s\n", i, escapeFilename(f))
	}
	return b.String()
}

// escapeFilename escapes the characters fio treats specially in filename= (':'
// separates several files).
func escapeFilename(s string) string { return strings.ReplaceAll(s, ":", `\:`) }

// Result is what one fio run measured, for its one direction.
type Result struct {
	IOPS      float64 `json:"iops"`
	BWBytes   float64 `json:"bw_bytes"`    // bytes per second
	MeanLatUs float64 `json:"mean_lat_us"` // completion latency
	P50Us     float64 `json:"p50_us"`
	P99Us     float64 `json:"p99_us"`
	P999Us    float64 `json:"p999_us"`
	IOs       int64   `json:"ios"`
	RuntimeS  float64 `json:"runtime_s"`
	Errors    int     `json:"errors"`
}

// fioOutput is the part of `fio --output-format=json` read here.
type fioOutput struct {
	Jobs []struct {
		Error int       `json:"error"`
		Read  fioDirOut `json:"read"`
		Write fioDirOut `json:"write"`
	} `json:"jobs"`
}

type fioDirOut struct {
	IOBytes  int64   `json:"io_bytes"`
	BWBytes  float64 `json:"bw_bytes"`
	IOPS     float64 `json:"iops"`
	Runtime  int64   `json:"runtime"` // ms
	TotalIOs int64   `json:"total_ios"`
	ClatNs   struct {
		Mean       float64            `json:"mean"`
		Percentile map[string]float64 `json:"percentile"`
	} `json:"clat_ns"`
}

// ParseFio reads fio's JSON output (group reported) for direction dir ("read" or
// "write"). Text fio prints before its JSON (warnings) is skipped.
func ParseFio(out []byte, dir string) (Result, error) {
	if i := strings.IndexByte(string(out), '{'); i > 0 {
		out = out[i:]
	}
	var o fioOutput
	if err := json.Unmarshal(out, &o); err != nil {
		return Result{}, fmt.Errorf("fio output: %w", err)
	}
	if len(o.Jobs) == 0 {
		return Result{}, fmt.Errorf("fio output has no jobs")
	}
	var r Result
	for _, j := range o.Jobs {
		d := j.Read
		if dir == "write" {
			d = j.Write
		}
		if j.Error != 0 {
			r.Errors++
		}
		r.IOPS += d.IOPS
		r.BWBytes += d.BWBytes
		r.IOs += d.TotalIOs
		r.RuntimeS = max(r.RuntimeS, float64(d.Runtime)/1000)
		// With group_reporting there is one job entry; percentiles of several entries
		// cannot be merged, so the first one's are kept.
		if r.P50Us == 0 {
			r.MeanLatUs = d.ClatNs.Mean / 1000
			r.P50Us = percentile(d.ClatNs.Percentile, 50) / 1000
			r.P99Us = percentile(d.ClatNs.Percentile, 99) / 1000
			r.P999Us = percentile(d.ClatNs.Percentile, 99.9) / 1000
		}
	}
	return r, nil
}

// percentile finds fio's percentile key for p ("99.900000").
func percentile(m map[string]float64, p float64) float64 {
	for k, v := range m {
		if f, err := strconv.ParseFloat(k, 64); err == nil && f == p {
			return v
		}
	}
	return 0
}
