package e2ebench

import (
	"encoding/json"
	"math"
	"path/filepath"
	"reflect"
	"testing"
)

func TestMedian(t *testing.T) {
	for _, tt := range []struct {
		v    []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
	} {
		in := append([]float64(nil), tt.v...)
		if got := Median(tt.v); got != tt.want {
			t.Errorf("Median(%v) = %v, want %v", tt.v, got, tt.want)
		}
		if !reflect.DeepEqual(in, tt.v) {
			t.Errorf("Median sorted its argument: %v", tt.v)
		}
	}
}

func TestDockerMedians(t *testing.T) {
	r := &DockerResults{Samples: []DockerSample{
		{System: "overlay2", Image: "java", PullS: 8, RunS: 1},
		{System: "slacker", Image: "minbase", PullS: 0.2, RunS: 0.8, Fetched: 7e6},
		{System: "slacker", Image: "minbase", PullS: 0.4, RunS: 0.6, Fetched: 9e6},
		{System: "slacker", Image: "minbase", PullS: 0.3, RunS: 1.2, Fetched: 8e6},
		{System: "overlay2", Image: "minbase", PullS: 4, RunS: 0.5},
	}}
	if got := r.Images(); !reflect.DeepEqual(got, []string{"java", "minbase"}) {
		t.Errorf("images %v", got)
	}
	for _, tt := range []struct {
		sys, img string
		f        DockerMetric
		want     float64
	}{
		{DockerSlacker, "minbase", DockerPull, 0.3},
		{DockerSlacker, "minbase", DockerRun, 0.8},
		{DockerSlacker, "minbase", DockerPullRun, 1.0}, // sums 1.0, 1.0, 1.5: the median of the sums
		{DockerSlacker, "minbase", DockerFetched, 8e6},
		{DockerOverlay2, "minbase", DockerPullRun, 4.5},
		{DockerOverlay2, "nonesuch", DockerPull, 0},
	} {
		if got := r.Median(tt.sys, tt.img, tt.f); math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("Median(%s, %s) = %v, want %v", tt.sys, tt.img, got, tt.want)
		}
	}
}

func TestStoresMedians(t *testing.T) {
	r := &StoresResults{Samples: []StoresSample{
		{System: "local", Image: "minbase", Metric: StoresPublish, Value: 4, Run: 0},
		{System: "s3-1gbit", Image: "minbase", Metric: StoresPull, Value: 0.2, Run: 1},
		{System: "local", Image: "minbase", Metric: StoresPull, Value: 0.1, Run: 1},
		{System: "local", Image: "minbase", Metric: StoresPull, Value: 0.3, Run: 2},
	}}
	if got := r.Systems(); !reflect.DeepEqual(got, []string{"local", "s3-1gbit"}) {
		t.Errorf("systems %v", got)
	}
	if got := r.Median("local", "minbase", StoresPull); math.Abs(got-0.2) > 1e-12 {
		t.Errorf("median pull %v, want 0.2", got)
	}
	if got := r.Median("local", "minbase", StoresRun); got != 0 {
		t.Errorf("median of nothing %v, want 0", got)
	}
}

// The committed results read with these types, and the medians docs/BENCHMARKS.md
// quotes come out of them.
func TestCommittedResults(t *testing.T) {
	d, err := ReadDocker(filepath.Join("..", "..", "docs", "bench", "docker-2026-11-22.json"))
	if err != nil {
		t.Fatal(err)
	}
	if d.Runs != 5 || len(d.Samples) != 20 || d.Commit != "c0e2638" || d.Machine == "" || d.Date.IsZero() {
		t.Errorf("docker: runs %d, %d samples, commit %q, machine %q, date %v", d.Runs, len(d.Samples), d.Commit, d.Machine, d.Date)
	}
	if got := d.Images(); !reflect.DeepEqual(got, []string{"minbase", "java"}) {
		t.Errorf("docker images %v", got)
	}
	if got := d.Median(DockerOverlay2, "java", DockerPull); math.Abs(got-8.074681835) > 1e-9 {
		t.Errorf("docker overlay2 java pull median %v", got)
	}
	s, err := ReadStores(filepath.Join("..", "..", "docs", "bench", "stores-2026-11-22.json"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Runs != 5 || !reflect.DeepEqual(s.Images, []string{"minbase", "big"}) || len(s.Samples) != 206 || s.Table == "" {
		t.Errorf("stores: runs %d, images %v, %d samples", s.Runs, s.Images, len(s.Samples))
	}
	// The benchmark's own table rounds the medians these types compute.
	if got := s.Median("local", "minbase", StoresPullRun); math.Round(got*1000) != 251 {
		t.Errorf("stores local minbase pull + run median %v, the table says 251 ms", got)
	}
	a, err := ReadAttached(filepath.Join("..", "..", "docs", "bench", "attached-2026-11-27.json"))
	if err != nil {
		t.Fatal(err)
	}
	if a.Runs != 5 || !reflect.DeepEqual(a.Systems(), []string{AttachedOrdinary, AttachedSlacker, AttachedStock}) ||
		len(a.Samples) != 5*2*3*4 || a.Table == "" {
		t.Errorf("attached: runs %d, systems %v, %d samples", a.Runs, a.Systems(), len(a.Samples))
	}
	if got := a.Median(AttachedOrdinary, "big", StoresPullRun); math.Round(got*1000) != 276 {
		t.Errorf("attached ordinary-name big pull + run median %v, the table says 276 ms", got)
	}
}

// What the benchmarks write reads back the same: the field names are the format.
func TestRoundTrip(t *testing.T) {
	d := DockerResults{Machine: "Linux 6.18, 2 CPUs", Commit: "abc", Runs: 1,
		Samples: []DockerSample{{System: "slacker", Image: "minbase", Run: 1, PullS: 0.2, RunS: 0.8, Fetched: 7}}}
	b, _ := json.Marshal(d)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	sample := m["samples"].([]any)[0].(map[string]any)
	for _, k := range []string{"system", "image", "run", "pull_s", "run_s", "fetched_bytes"} {
		if _, ok := sample[k]; !ok {
			t.Errorf("docker sample has no %q: %s", k, b)
		}
	}
	if _, ok := m["command"]; ok {
		t.Errorf("an empty command is written: %s", b)
	}
	s := StoresResults{Runs: 1, Images: []string{"minbase"}, Table: "|x|",
		Samples: []StoresSample{{System: "local", Image: "minbase", Metric: StoresPull, Value: 0.1, Run: 1}}}
	b, _ = json.Marshal(s)
	var back StoresResults
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, s) {
		t.Errorf("stores round trip: %+v, %v", back, err)
	}
}
