package docsgen

import (
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
var attachedNames = []namedSystem{
	{e2ebench.AttachedOrdinary, "ordinary name, descriptor attached (Slacker snapshotter)"},
	{e2ebench.AttachedSlacker, "Slacker name (Slacker snapshotter)"},
	{e2ebench.AttachedStock, "ordinary name, stock containerd (overlayfs)"},
}

func attachedTable(d *Data, srcs []string, args []string) (string, error) {
	return deployTable(d, srcs, args, attachedNames, e2ebench.AttachedSlacker,
		"| image | deployed as | CRI pull | run echo hello | pull + run | vs the Slacker name | moved |")
}
