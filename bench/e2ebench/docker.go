package e2ebench

import (
	"time"

	"github.com/slacker-dev/slacker/bench/rig"
)

// DockerResults is what BenchmarkDockerPullRun writes with -docker-bench-out.
type DockerResults struct {
	Date time.Time `json:"date"`
	// Machine is one line: kernel, CPUs and CPU model.
	Machine string `json:"machine"`
	Commit  string `json:"commit"`
	// Command is the command line of the run; the benchmark does not write it
	// (docs/bench/docker-2026-11-22.json has it, added by hand).
	Command string         `json:"command,omitempty"`
	Runs    int            `json:"runs"`
	Samples []DockerSample `json:"samples"`
}

// DockerSample is one cold `docker pull` + `docker run --rm IMAGE echo hello`.
type DockerSample struct {
	System string  `json:"system"` // "slacker" (the graph driver) or "overlay2"
	Image  string  `json:"image"`
	Run    int     `json:"run"`
	PullS  float64 `json:"pull_s"`
	RunS   float64 `json:"run_s"`
	// Fetched is what slackerd read from its store (Slacker only).
	Fetched int64 `json:"fetched_bytes,omitempty"`
}

// Docker systems.
const (
	DockerSlacker  = "slacker"
	DockerOverlay2 = "overlay2"
)

// ReadDocker reads a results file of BenchmarkDockerPullRun.
func ReadDocker(path string) (*DockerResults, error) {
	var r DockerResults
	if err := rig.ReadJSON(path, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Images returns the images sampled, in the order of their first sample.
func (r *DockerResults) Images() []string {
	var out []string
	seen := map[string]bool{}
	for _, s := range r.Samples {
		if !seen[s.Image] {
			seen[s.Image] = true
			out = append(out, s.Image)
		}
	}
	return out
}

// DockerMetric picks one number of a sample.
type DockerMetric func(DockerSample) float64

// The metrics the benchmark's table shows.
var (
	DockerPull    DockerMetric = func(s DockerSample) float64 { return s.PullS }
	DockerRun     DockerMetric = func(s DockerSample) float64 { return s.RunS }
	DockerPullRun DockerMetric = func(s DockerSample) float64 { return s.PullS + s.RunS }
	DockerFetched DockerMetric = func(s DockerSample) float64 { return float64(s.Fetched) }
)

// Median is the median of f over the samples of system and image (0 if none).
func (r *DockerResults) Median(system, image string, f DockerMetric) float64 {
	var v []float64
	for _, s := range r.Samples {
		if s.System == system && s.Image == image {
			v = append(v, f(s))
		}
	}
	return Median(v)
}
