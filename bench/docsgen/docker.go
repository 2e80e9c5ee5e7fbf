package docsgen

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/slacker-dev/slacker/bench/e2ebench"
)

// BenchmarkDockerPullRun's results (docs/bench/docker-*.json): SYSTEM is "slacker"
// (the graph driver) or "overlay2"; METRIC is pull, run, pull-run (the median of
// each sample's sum) or fetched (bytes slackerd read from its store); IMAGES one or
// several, comma-separated.
func init() {
	figures["docker"] = map[string]figure{
		// median SYSTEM IMAGES METRIC
		"median": dockerFigure(3, 1, func(r *e2ebench.DockerResults, img string, a []string) (float64, error) {
			return dockerMedian(r, a[0], img, a[2])
		}),
		// ratio IMAGES METRIC: overlay2's median over the graph driver's.
		"ratio": dockerFigure(2, 0, func(r *e2ebench.DockerResults, img string, a []string) (float64, error) {
			s, err := dockerMedian(r, e2ebench.DockerSlacker, img, a[1])
			if err != nil {
				return 0, err
			}
			o, err := dockerMedian(r, e2ebench.DockerOverlay2, img, a[1])
			return o / s, err
		}),
		// fetched-vs IMAGE BYTES: BYTES (a size the marker states, e.g. the
		// image's gzip layers, which the results do not record) over the median
		// bytes the graph driver's node read from its store.
		"fetched-vs": dockerFigure(2, 0, func(r *e2ebench.DockerResults, img string, a []string) (float64, error) {
			n, err := strconv.ParseFloat(a[1], 64)
			if err != nil || n <= 0 {
				return 0, fmt.Errorf("fetched-vs: %q is not a size in bytes", a[1])
			}
			f, err := dockerMedian(r, e2ebench.DockerSlacker, img, "fetched")
			return n / f, err
		}),
		// runs: samples per image and system.
		"runs": number(0, func(d *Data, src string, _ []string) (float64, error) {
			r, err := d.docker(src)
			if err != nil {
				return 0, err
			}
			return float64(r.Runs), nil
		}),
	}
}

func (d *Data) docker(src string) (*e2ebench.DockerResults, error) {
	return load(d, src, e2ebench.ReadDocker)
}

func dockerMedian(r *e2ebench.DockerResults, sys, img, metric string) (float64, error) {
	var f e2ebench.DockerMetric
	switch metric {
	case "pull":
		f = e2ebench.DockerPull
	case "run":
		f = e2ebench.DockerRun
	case "pull-run":
		f = e2ebench.DockerPullRun
	case "fetched":
		f = e2ebench.DockerFetched
	default:
		return 0, fmt.Errorf("metric %q: pull, run, pull-run or fetched", metric)
	}
	n := 0
	for _, s := range r.Samples {
		if s.System == sys && s.Image == img {
			n++
		}
	}
	if n == 0 {
		return 0, fmt.Errorf("no samples of %s %s", sys, img)
	}
	return r.Median(sys, img, f), nil
}

func dockerFigure(nargs, imgArg int, f func(r *e2ebench.DockerResults, img string, args []string) (float64, error)) figure {
	return numbers(nargs, func(d *Data, src string, args []string) ([]float64, error) {
		r, err := d.docker(src)
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
