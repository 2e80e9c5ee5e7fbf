package docsgen

import (
	"fmt"
	"strings"

	"github.com/slacker-dev/slacker/bench/e2ebench"
)

// BenchmarkDeployStores's results (docs/bench/stores-*.json): SYSTEMS and IMAGES
// are one or several, comma-separated (several render as a range); a system is a
// store (local, s3, registry) or a remote one behind the emulated 1 Gbit/s link
// (s3-1gbit, registry-1gbit); METRIC is one of the benchmark's (publish_s, pull_s,
// run_s, pull_run_s, fetched_bytes).
func init() {
	figures["stores"] = map[string]figure{
		"median": storesMedianFigure, // median SYSTEMS IMAGES METRIC
		// vs-local SYSTEMS IMAGES: pull + run over the local store's.
		"vs-local": storesFigure(2, func(r *e2ebench.StoresResults, sys, img string, a []string) (float64, error) {
			x, err := storesMedian(r, sys, img, e2ebench.StoresPullRun)
			if err != nil {
				return 0, err
			}
			l, err := storesMedian(r, "local", img, e2ebench.StoresPullRun)
			return x / l, err
		}),
		// over-local SYSTEMS IMAGES METRIC: the median minus the local store's.
		"over-local": storesFigure(3, func(r *e2ebench.StoresResults, sys, img string, a []string) (float64, error) {
			x, err := storesMedian(r, sys, img, a[2])
			if err != nil {
				return 0, err
			}
			l, err := storesMedian(r, "local", img, a[2])
			return x - l, err
		}),
		// runs: cold runs per image and system.
		"runs": storesRuns,
		// table: docs/BENCHMARKS.md's table of medians, one row per image and
		// store, as the benchmark prints it with the stores named for readers.
		"table": text(storesTable),
	}
}

// storesMedianFigure is the median figure of a results file in
// BenchmarkDeployStores's format: median SYSTEMS IMAGES METRIC.
var storesMedianFigure = storesFigure(3, func(r *e2ebench.StoresResults, sys, img string, a []string) (float64, error) {
	return storesMedian(r, sys, img, a[2])
})

// storesRuns is the runs figure of a results file in BenchmarkDeployStores's
// format: cold runs per image and system.
var storesRuns = number(0, func(d *Data, src string, _ []string) (float64, error) {
	r, err := d.stores(src)
	if err != nil {
		return 0, err
	}
	return float64(r.Runs), nil
})

func (d *Data) stores(src string) (*e2ebench.StoresResults, error) {
	return load(d, src, e2ebench.ReadStores)
}

func storesMedian(r *e2ebench.StoresResults, sys, img, metric string) (float64, error) {
	for _, s := range r.Samples {
		if s.System == sys && s.Image == img && s.Metric == metric {
			return r.Median(sys, img, metric), nil
		}
	}
	return 0, fmt.Errorf("no samples of %s %s %s", sys, img, metric)
}

func storesFigure(nargs int, f func(r *e2ebench.StoresResults, sys, img string, args []string) (float64, error)) figure {
	return numbers(nargs, func(d *Data, src string, args []string) ([]float64, error) {
		r, err := d.stores(src)
		if err != nil {
			return nil, err
		}
		var vs []float64
		for _, sys := range strings.Split(args[0], ",") {
			for _, img := range strings.Split(args[1], ",") {
				v, err := f(r, sys, img, args)
				if err != nil {
					return nil, err
				}
				vs = append(vs, v)
			}
		}
		return vs, nil
	})
}

// namedSystem is a system of a deployment benchmark and its name for readers.
type namedSystem struct{ system, name string }

// storeNames are the systems of BenchmarkDeployStores in the order of its table,
// named for readers.
var storeNames = []namedSystem{
	{"local", "local"},
	{"s3", "S3"},
	{"registry", "registry"},
	{"s3-1gbit", "S3, 1 Gbit/s"},
	{"registry-1gbit", "registry, 1 Gbit/s"},
}

func storesTable(d *Data, srcs []string, args []string) (string, error) {
	return deployTable(d, srcs, args, storeNames, "local",
		"| image | store | pull | run echo hello | pull + run | vs local | fetched |")
}

// deployTable is the table of medians of a results file in BenchmarkDeployStores's
// format: one row per image and system of systems (in that order), pull, run,
// pull + run, pull + run over ref's, and bytes fetched, under header.
func deployTable(d *Data, srcs []string, args []string, systems []namedSystem, ref, header string) (string, error) {
	if len(srcs) != 1 || len(args) != 0 {
		return "", fmt.Errorf("table: one source, no arguments")
	}
	r, err := d.stores(srcs[0])
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString(header + "\n| --- | --- | --- | --- | --- | --- | --- |\n")
	for _, img := range r.Images {
		base, err := storesMedian(r, ref, img, e2ebench.StoresPullRun)
		if err != nil {
			return "", err
		}
		for i, s := range systems {
			var v [4]float64
			for j, m := range []string{e2ebench.StoresPull, e2ebench.StoresRun, e2ebench.StoresPullRun, e2ebench.StoresFetched} {
				if v[j], err = storesMedian(r, s.system, img, m); err != nil {
					return "", err
				}
			}
			label := "| " + img + " |"
			if i > 0 {
				label = "| |" // the image is the row above's
			}
			var e fv
			fmt.Fprintf(&b, "%s %s | %s | %s | %s | %s | %s |\n", label, s.name, e.f("ms0", v[0]), e.f("ms0", v[1]), e.f("ms0", v[2]),
				e.f("x2", v[2]/base), e.f("hbytes", v[3]))
			if e.err != nil {
				return "", e.err
			}
		}
	}
	return b.String(), nil
}
