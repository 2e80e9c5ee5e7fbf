package docsgen

import (
	"fmt"
	"strings"

	"github.com/slacker-dev/slacker/bench/core"
	"github.com/slacker-dev/slacker/bench/rig"
)

// The core benchmark's results (docs/bench/core-*.json, `slacker-bench core`).
// SYSTEM is "slacker" or "overlayfs"; METRIC one of the benchmark's (pull_s,
// run_s, pull_run_s, fetched_bytes, seqread_cold_s, seqread_warm_s,
// peak_rss_bytes, append_s, append_s_fsync, cow_s, cow_s_fsync); IMAGES one image
// or several, comma-separated (several render as a range).
func init() {
	figures["core"] = map[string]figure{
		// table: the benchmark's summary table, as its --markdown prints it, with
		// the number of runs in the header.
		"table": text(coreTable),
		// median SYSTEM IMAGES METRIC
		"median": coreFigure(3, 1, func(r *core.Report, img string, a []string) (float64, error) {
			return coreMedian(r, a[0], img, a[2])
		}),
		// diff SYSTEM IMAGES METRIC OTHER: the median of METRIC minus that of OTHER.
		"diff": coreFigure(4, 1, func(r *core.Report, img string, a []string) (float64, error) {
			x, err := coreMedian(r, a[0], img, a[2])
			if err != nil {
				return 0, err
			}
			y, err := coreMedian(r, a[0], img, a[3])
			return x - y, err
		}),
		// ratio IMAGES METRIC: overlayfs's median over Slacker's.
		"ratio": coreFigure(2, 0, func(r *core.Report, img string, a []string) (float64, error) {
			s, err := coreMedian(r, "slacker", img, a[1])
			if err != nil {
				return 0, err
			}
			o, err := coreMedian(r, "overlayfs", img, a[1])
			return o / s, err
		}),
		// share IMAGES: Slacker's median bytes moved over the image's uncompressed
		// size.
		"share": coreFigure(1, 0, func(r *core.Report, img string, a []string) (float64, error) {
			f, err := coreMedian(r, "slacker", img, "fetched_bytes")
			if err != nil {
				return 0, err
			}
			info, err := coreImage(r, img)
			return f / float64(info.DataBytes), err
		}),
		// max SYSTEM IMAGES METRIC: the largest sample.
		"max": coreFigure(3, 1, func(r *core.Report, img string, a []string) (float64, error) {
			if _, n := r.Median(a[0], img, a[2]); n == 0 {
				return 0, fmt.Errorf("no samples of %s %s %s", a[0], img, a[2])
			}
			return r.Max(a[0], img, a[2]), nil
		}),
		// samples SYSTEM IMAGES METRIC: every sample (their range).
		"samples": numbers(3, func(d *Data, src string, a []string) ([]float64, error) {
			r, err := d.core(src)
			if err != nil {
				return nil, err
			}
			var vs []float64
			for _, img := range strings.Split(a[1], ",") {
				for _, s := range r.Samples {
					if s.System == a[0] && s.Image == img && s.Metric == a[2] {
						vs = append(vs, s.Value)
					}
				}
			}
			if len(vs) == 0 {
				return nil, fmt.Errorf("no samples of %s %s %s", a[0], a[1], a[2])
			}
			return vs, nil
		}),
		// layers IMAGES: the image's layers.
		"layers": coreFigure(1, 0, func(r *core.Report, img string, a []string) (float64, error) {
			info, err := coreImage(r, img)
			return float64(info.Layers), err
		}),
		// size IMAGES data|compressed: the image's uncompressed or gzip size.
		"size": coreFigure(2, 0, func(r *core.Report, img string, a []string) (float64, error) {
			info, err := coreImage(r, img)
			switch a[1] {
			case "data":
				return float64(info.DataBytes), err
			case "compressed":
				return float64(info.CompressedBytes), err
			}
			return 0, fmt.Errorf("size %q: data or compressed", a[1])
		}),
		// runs: how many cold runs each measurement had.
		"runs": number(0, func(d *Data, src string, _ []string) (float64, error) {
			r, err := d.core(src)
			if err != nil {
				return 0, err
			}
			return float64(r.Runs), nil
		}),
	}
}

func (d *Data) core(src string) (*core.Report, error) {
	return load(d, src, func(p string) (*core.Report, error) {
		var r core.Report
		return &r, rig.ReadJSON(p, &r)
	})
}

func coreMedian(r *core.Report, sys, img, metric string) (float64, error) {
	v, n := r.Median(sys, img, metric)
	if n == 0 {
		return 0, fmt.Errorf("no samples of %s %s %s", sys, img, metric)
	}
	return v, nil
}

func coreImage(r *core.Report, name string) (core.ImageInfo, error) {
	for _, i := range r.Images {
		if i.Name == name {
			return i, nil
		}
	}
	return core.ImageInfo{}, fmt.Errorf("no image %q", name)
}

// coreFigure is a figure of nargs arguments whose argument imgArg names the
// images: one value per image.
func coreFigure(nargs, imgArg int, f func(r *core.Report, img string, args []string) (float64, error)) figure {
	return numbers(nargs, func(d *Data, src string, args []string) ([]float64, error) {
		r, err := d.core(src)
		if err != nil {
			return nil, err
		}
		var vs []float64
		for _, img := range strings.Split(args[imgArg], ",") {
			v, err := f(r, img, args)
			if err != nil {
				return nil, err
			}
			vs = append(vs, v)
		}
		return vs, nil
	})
}

func coreTable(d *Data, srcs []string, args []string) (string, error) {
	if len(srcs) != 1 || len(args) != 0 {
		return "", fmt.Errorf("table: one source, no arguments")
	}
	r, err := d.core(srcs[0])
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| image | measure (median of %d) | Slacker | containerd + overlayfs | speedup |\n", r.Runs)
	b.WriteString("| --- | --- | --- | --- | --- |\n")
	for _, row := range r.Rows() {
		b.WriteString("| " + strings.Join(row, " | ") + " |\n")
	}
	return b.String(), nil
}
