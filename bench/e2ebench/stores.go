package e2ebench

import (
	"time"

	"github.com/slacker-dev/slacker/bench/rig"
)

// StoresResults is what BenchmarkDeployStores writes with SLACKER_BENCH_RESULTS.
type StoresResults struct {
	Date   time.Time `json:"date"`
	Runs   int       `json:"runs"`
	Images []string  `json:"images"`
	// Samples hold every measurement; publish_s samples (run 0) are the one
	// conversion and push of each image into each store.
	Samples []StoresSample `json:"samples"`
	// Table is the benchmark's own Markdown table of medians, as it printed it.
	Table string `json:"table"`
}

// StoresSample is one measurement of one system (a store, possibly behind the
// emulated link) and image.
type StoresSample struct {
	System string  `json:"system"`
	Image  string  `json:"image"`
	Metric string  `json:"metric"`
	Value  float64 `json:"value"` // seconds or bytes, per Metric
	Run    int     `json:"run"`
}

// The metrics of BenchmarkDeployStores.
const (
	StoresPublish = "publish_s"     // convert + push of the image into the store, once
	StoresPull    = "pull_s"        // cold slacker pull
	StoresRun     = "run_s"         // slacker run --rm IMAGE echo hello
	StoresPullRun = "pull_run_s"    // the two
	StoresFetched = "fetched_bytes" // what the node read from the store
)

// ReadStores reads a results file of BenchmarkDeployStores.
func ReadStores(path string) (*StoresResults, error) {
	var r StoresResults
	if err := rig.ReadJSON(path, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Systems returns the systems sampled, in the order of their first sample.
func (r *StoresResults) Systems() []string {
	var out []string
	seen := map[string]bool{}
	for _, s := range r.Samples {
		if !seen[s.System] {
			seen[s.System] = true
			out = append(out, s.System)
		}
	}
	return out
}

// Median is the median of the samples of system, image and metric (0 if none).
func (r *StoresResults) Median(system, image, metric string) float64 {
	var v []float64
	for _, s := range r.Samples {
		if s.System == system && s.Image == image && s.Metric == metric {
			v = append(v, s.Value)
		}
	}
	return Median(v)
}
