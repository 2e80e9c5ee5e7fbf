package docsgen

import (
	"fmt"
	"strings"

	"github.com/slacker-dev/slacker/bench/e2ebench"
)

// BenchmarkDeployAttached's results (docs/bench/attached-*.json): SYSTEMS and
// IMAGES are one or several, comma-separated; a system is one of the ways the
// image is deployed (ordinary-name, slacker-name, overlayfs); METRIC is one of the
// benchmark's (pull_s, run_s, pull_run_s, fetched_bytes).
func init() {
	figures["attached"] = map[string]figure{
		"median": storesMedianFigure, // median SYSTEMS IMAGES METRIC
		// vs SYSTEMS IMAGES OTHER: pull + run of SYSTEMS over OTHER's.
		"vs": storesFigure(3, func(r *e2ebench.StoresResults, sys, img string, a []string) (float64, error) {
			x, err := storesMedian(r, sys, img, e2ebench.StoresPullRun)
			if err != nil {
				return 0, err
			}
			o, err := storesMedian(r, a[2], img, e2ebench.StoresPullRun)
			return x / o, err
		}),
		"runs": storesRuns, // cold runs per image and system
		// table: the medians, one row per image and system, with the systems named
		// for readers.
		"table": text(attachedTable),
	}
}

// attachedNames are the systems of BenchmarkDeployAttached in the order of its
// table, named for readers.
var attachedNames = []struct{ system, name string }{
	{e2ebench.AttachedOrdinary, "ordinary name, descriptor attached (Slacker snapshotter)"},
	{e2ebench.AttachedSlacker, "Slacker name (Slacker snapshotter)"},
	{e2ebench.AttachedStock, "ordinary name, stock containerd (overlayfs)"},
}

func attachedTable(d *Data, srcs []string, args []string) (string, error) {
	if len(srcs) != 1 || len(args) != 0 {
		return "", fmt.Errorf("table: one source, no arguments")
	}
	r, err := d.stores(srcs[0])
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("| image | deployed as | CRI pull | run echo hello | pull + run | vs the Slacker name | moved |\n| --- | --- | --- | --- | --- | --- | --- |\n")
	for _, img := range r.Images {
		ref, err := storesMedian(r, e2ebench.AttachedSlacker, img, e2ebench.StoresPullRun)
		if err != nil {
			return "", err
		}
		for i, s := range attachedNames {
			var v [4]float64
			for j, m := range []string{e2ebench.StoresPull, e2ebench.StoresRun, e2ebench.StoresPullRun, e2ebench.StoresFetched} {
				if v[j], err = storesMedian(r, s.system, img, m); err != nil {
					return "", err
				}
			}
			label := "| " + img + " |"
			if i > 0 {
				label = "| |"
			}
			var e fv
			fmt.Fprintf(&b, "%s %s | %s | %s | %s | %s | %s |\n", label, s.name, e.f("ms0", v[0]), e.f("ms0", v[1]), e.f("ms0", v[2]),
				e.f("x2", v[2]/ref), e.f("hbytes", v[3]))
			if e.err != nil {
				return "", e.err
			}
		}
	}
	return b.String(), nil
}
