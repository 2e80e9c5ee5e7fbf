package core

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
)

// Median returns the median of the samples of system, image and metric, and how
// many there were.
func (r *Report) Median(sys, img, metric string) (float64, int) {
	var v []float64
	for _, s := range r.Samples {
		if s.System == sys && s.Image == img && s.Metric == metric {
			v = append(v, s.Value)
		}
	}
	if len(v) == 0 {
		return 0, 0
	}
	sort.Float64s(v)
	if len(v)%2 == 1 {
		return v[len(v)/2], len(v)
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2, len(v)
}

// Max returns the largest sample.
func (r *Report) Max(sys, img, metric string) float64 {
	m := 0.0
	for _, s := range r.Samples {
		if s.System == sys && s.Image == img && s.Metric == metric && s.Value > m {
			m = s.Value
		}
	}
	return m
}

func (r *Report) image(name string) ImageInfo {
	for _, i := range r.Images {
		if i.Name == name {
			return i
		}
	}
	return ImageInfo{Name: name}
}

// row is one line of the summary.
type row struct {
	image, what      string
	slacker, overlay string
	ratio            string
}

func secs(v float64) string {
	switch {
	case v == 0:
		return "-"
	case v < 0.01:
		return fmt.Sprintf("%.2f ms", v*1000)
	case v < 1:
		return fmt.Sprintf("%.0f ms", v*1000)
	default:
		return fmt.Sprintf("%.2f s", v)
	}
}

func mb(v float64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f MB", v/1e6)
}

func ratio(a, b float64) string {
	if a == 0 || b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1fx", b/a)
}

func (r *Report) rows() []row {
	var out []row
	timeRow := func(img, label, metric string) {
		s, _ := r.Median("slacker", img, metric)
		o, _ := r.Median("overlayfs", img, metric)
		if s == 0 && o == 0 {
			return
		}
		out = append(out, row{img, label, secs(s), secs(o), ratio(s, o)})
	}
	for _, info := range r.Images {
		img := info.Name
		timeRow(img, "pull", "pull_s")
		timeRow(img, "run echo hello", "run_s")
		timeRow(img, "pull + run", "pull_run_s")
		fs, _ := r.Median("slacker", img, "fetched_bytes")
		fo, _ := r.Median("overlayfs", img, "fetched_bytes")
		if fs > 0 {
			out = append(out, row{img, "bytes moved for pull + run", fmt.Sprintf("%s (%.1f%% of %s)", mb(fs), 100*fs/float64(info.DataBytes), mb(float64(info.DataBytes))),
				fmt.Sprintf("%s (gzip)", mb(fo)), ratio(fs, fo)})
		}
		timeRow(img, "read every file, cold", "seqread_cold_s")
		timeRow(img, "read every file, warm", "seqread_warm_s")
		if m := r.Max("slacker", img, "peak_rss_bytes"); m > 0 {
			out = append(out, row{img, "slackerd peak RSS", mb(m), "-", "-"})
		}
	}
	timeRow("append16", "1-byte append to a 16 MiB file, cold (open+write)", "append_s")
	timeRow("append16", "same, with fsync", "append_s_fsync")
	timeRow("append16", "1-byte append after a stat (copy-on-write alone)", "cow_s")
	timeRow("append16", "same, with fsync", "cow_s_fsync")
	return out
}

// Rows returns the summary's rows, as WriteMarkdown prints them: image, measure,
// Slacker's median, containerd + overlayfs's median, and overlayfs / Slacker.
func (r *Report) Rows() [][]string {
	var out [][]string
	for _, x := range r.rows() {
		out = append(out, []string{x.image, x.what, x.slacker, x.overlay, x.ratio})
	}
	return out
}

// WriteTable prints the summary: medians of each system and overlayfs/slacker.
func (r *Report) WriteTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "IMAGE\tMEASURE (median of %d)\tSLACKER\tCONTAINERD+OVERLAYFS\tSPEEDUP\n", r.Runs)
	for _, x := range r.rows() {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", x.image, x.what, x.slacker, x.overlay, x.ratio)
	}
	tw.Flush()
	for _, f := range r.Failed {
		fmt.Fprintf(w, "FAILED: %s\n", f)
	}
}

// WriteMarkdown prints the summary as a Markdown table with the run's context.
func (r *Report) WriteMarkdown(w io.Writer) {
	fmt.Fprintf(w, "Measured %s on %s (%d CPUs, %s, kernel %s), commit %s, %d cold runs per cell.\n\n",
		r.Date.Format("2006-01-02"), r.Machine.CPU, r.Machine.CPUs, r.Machine.Memory, r.Machine.Kernel, r.Commit, r.Runs)
	fmt.Fprintln(w, "| image | measure (median) | Slacker | containerd + overlayfs | speedup |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- |")
	for _, x := range r.rows() {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", x.image, x.what, x.slacker, x.overlay, x.ratio)
	}
	if len(r.Failed) > 0 {
		fmt.Fprintf(w, "\nFailed runs: %s\n", strings.Join(r.Failed, "; "))
	}
}
