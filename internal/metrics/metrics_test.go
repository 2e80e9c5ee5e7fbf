package metrics

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/slacker-dev/slacker/internal/cache"
	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/fetch"
	"github.com/slacker-dev/slacker/internal/labels"
	"github.com/slacker-dev/slacker/internal/node"
	"github.com/slacker-dev/slacker/internal/prefetch"
)

type fakeNode struct {
	st   node.Stats
	vols []node.VolumeInfo
}

func (f *fakeNode) Stats() node.Stats          { return f.st }
func (f *fakeNode) Volumes() []node.VolumeInfo { return f.vols }

// scrape returns the metric families a GET /metrics answers.
func scrape(t *testing.T, h http.Handler) map[string]*familyValues {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	return parse(t, resp.Body)
}

// familyValues maps a metric's labels ("k=v,k=v", sorted) to its value (a
// histogram's count).
type familyValues map[string]float64

func parse(t *testing.T, r io.Reader) map[string]*familyValues {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(r)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*familyValues{}
	for name, f := range fams {
		fv := familyValues{}
		for _, m := range f.Metric {
			var ls []string
			for _, l := range m.Label {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			v := 0.0
			switch {
			case m.Counter != nil:
				v = m.Counter.GetValue()
			case m.Gauge != nil:
				v = m.Gauge.GetValue()
			case m.Histogram != nil:
				v = float64(m.Histogram.GetSampleCount())
			}
			fv[strings.Join(ls, ",")] = v
		}
		out[name] = &fv
	}
	return out
}

func value(t *testing.T, fams map[string]*familyValues, name, labels string) float64 {
	t.Helper()
	f, ok := fams[name]
	if !ok {
		t.Fatalf("no metric %s", name)
	}
	v, ok := (*f)[labels]
	if !ok {
		t.Fatalf("no %s{%s}; have %v", name, labels, *f)
	}
	return v
}

// TestMetrics: what the hooks observe and what the node's counters say come out
// of a scrape under their names and labels, errors by where and kind.
func TestMetrics(t *testing.T) {
	m := New("s3:http://127.0.0.1:9000/bucket/")
	// Before the node is there: the observed metrics only, no node counters.
	fams := scrape(t, m.Handler())
	if _, ok := fams["slacker_cache_misses_total"]; ok {
		t.Fatal("node counters before SetSource")
	}
	if v := value(t, fams, "slacker_store_bytes_total", "backend=s3"); v != 0 {
		t.Fatalf("store bytes %v before any request", v)
	}
	m.ObserveStore("get", 3*time.Millisecond, 4096, nil)
	m.ObserveStore("get", time.Second, 0, fmt.Errorf("get: %w", errdefs.ErrUnavailable))
	m.ObserveStore("get-batch", 10*time.Millisecond, 1<<20, nil)
	m.ObserveFUSE("read", 50*time.Microsecond, nil)
	m.ObserveFUSE("read", 2*time.Millisecond, errors.New("disk on fire"))
	m.ObserveFUSE("fsync", time.Millisecond, nil)
	m.OnError(WhereAPI)(fmt.Errorf("volume x: %w", errdefs.ErrNotFound))
	m.SetSource(&fakeNode{
		st: node.Stats{
			Cache: cache.Stats{MemHits: 5, DiskHits: 6, PartialReads: 7, Misses: 8, Evictions: 9, Corrupt: 1,
				SumMismatches: 2, MemBytes: 100, DiskBytes: 200, MaxBytes: 1000},
			Fetch:       fetch.Stats{FetchedBytes: 12345, Retries: 3, Failures: 1},
			Prefetch:    prefetch.Stats{ReadaheadChunks: 4, ReplayedChunks: 11, FetchedBytes: 999, TracesReplayed: 1, TracesRecorded: 2},
			Mounted:     2,
			LocalImages: node.LocalImageStats{Count: 1, InUse: 1, Bytes: 4096},
		},
		vols: []node.VolumeInfo{
			{Record: node.Record{Labels: map[string]string{labels.Kind: labels.KindContainer}, Mode: node.RootShared}},
			{Record: node.Record{Labels: map[string]string{labels.Kind: labels.KindContainer}, Mode: node.RootShared}},
			{Record: node.Record{Labels: map[string]string{labels.Kind: labels.KindImageRoot}, Mode: node.RootBlock}},
			{Record: node.Record{}},
		},
	})
	fams = scrape(t, m.Handler())
	for _, c := range []struct {
		name, labels string
		want         float64
	}{
		{"slacker_store_request_duration_seconds", "backend=s3,op=get", 2},
		{"slacker_store_request_duration_seconds", "backend=s3,op=get-batch", 1},
		{"slacker_store_bytes_total", "backend=s3", 4096 + 1<<20},
		{"slacker_fuse_request_duration_seconds", "op=read", 2},
		{"slacker_fuse_request_duration_seconds", "op=fsync", 1},
		{"slacker_errors_total", "kind=unavailable,where=store", 1},
		{"slacker_errors_total", "kind=internal,where=fuse", 1},
		{"slacker_errors_total", "kind=not_found,where=api", 1},
		{"slacker_cache_hits_total", "tier=memory", 5},
		{"slacker_cache_hits_total", "tier=disk", 6},
		{"slacker_cache_hits_total", "tier=file", 7},
		{"slacker_cache_misses_total", "", 8},
		{"slacker_cache_evictions_total", "", 9},
		{"slacker_cache_corrupt_total", "what=file", 1},
		{"slacker_cache_corrupt_total", "what=block", 2},
		{"slacker_cache_bytes", "tier=disk", 200},
		{"slacker_node_store_bytes_total", "", 12345},
		{"slacker_store_retries_total", "", 3},
		{"slacker_store_failures_total", "", 1},
		{"slacker_prefetch_chunks_total", "kind=readahead", 4},
		{"slacker_prefetch_chunks_total", "kind=replay", 11},
		{"slacker_startup_traces_total", "event=recorded", 2},
		{"slacker_volumes", "kind=container,mode=shared", 2},
		{"slacker_volumes", "kind=image-root,mode=block", 1},
		{"slacker_volumes", "kind=other,mode=block", 1},
		{"slacker_volumes_mounted", "", 2},
		{"slacker_local_images", "state=in_use", 1},
		{"slacker_local_image_bytes", "", 4096},
	} {
		if got := value(t, fams, c.name, c.labels); got != c.want {
			t.Errorf("%s{%s} = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if _, ok := fams["go_goroutines"]; !ok {
		t.Error("no Go runtime metrics")
	}
}

// TestListen: a malformed address or one in use fails with a message naming the
// setting; a good one serves GET /metrics.
func TestListen(t *testing.T) {
	for _, bad := range []string{"9464", "localhost", "example.com:9464", "127.0.0.1:notaport", "[::1"} {
		l, err := Listen(bad)
		if err == nil {
			l.Close()
			t.Fatalf("%q: no error", bad)
		}
		if !strings.Contains(err.Error(), "metrics_address") {
			t.Errorf("%q: %v; want it to name metrics_address", bad, err)
		}
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	if l, err := Listen(busy.Addr().String()); err == nil || !strings.Contains(err.Error(), "metrics_address") ||
		!strings.Contains(err.Error(), "in use") {
		if l != nil {
			l.Close()
		}
		t.Fatalf("an address in use: %v", err)
	}
	l, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := New("local:/var/lib/slacker/store")
	s := m.Serve(l, nil)
	defer s.Shutdown(t.Context())
	resp, err := http.Get("http://" + l.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	fams := parse(t, resp.Body)
	resp.Body.Close()
	if value(t, fams, "slacker_store_bytes_total", "backend=local") != 0 {
		t.Fatal("store bytes of a new node")
	}
}
