package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/labels"
	"github.com/slacker-dev/slacker/internal/node"
)

// Source is what the metrics read at each scrape (*node.Node has it).
type Source interface {
	Stats() node.Stats
	Volumes() []node.VolumeInfo
}

// Where an error was answered: the label "where" of slacker_errors_total.
const (
	WhereFUSE        = "fuse"        // a volume file's read, write, fsync or zero (EIO to a container)
	WhereStore       = "store"       // a store request (retried, or failed for good)
	WhereAPI         = "api"         // slackerd's HTTP API (slacker)
	WhereSnapshotter = "snapshotter" // containerd's snapshots API
	WhereGraphDriver = "graphdriver" // Docker's graph-driver plugin
)

// Metrics is slackerd's metrics registry. Its Observe and Error methods are safe
// for concurrent use and cheap (a histogram or counter update).
type Metrics struct {
	reg       *prometheus.Registry
	backend   string
	storeTime *prometheus.HistogramVec
	storeData *prometheus.CounterVec
	fuseTime  *prometheus.HistogramVec
	errs      *prometheus.CounterVec

	// fuseOps holds fuseTime's histogram of each operation fusefs reports, looked
	// up once: ObserveFUSE runs on every request on a volume file.
	fuseOps map[string]prometheus.Observer

	mu  sync.Mutex
	src Source
}

// New returns the metrics of a node whose store is described by store (as
// storeurl.Open describes it: "local:/var/lib/slacker/store", "s3:...",
// "registry://..."); its kind is the label backend.
func New(store string) *Metrics {
	backend, _, _ := strings.Cut(store, ":")
	m := &Metrics{reg: prometheus.NewRegistry(), backend: backend}
	m.storeTime = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "slacker_store_request_duration_seconds",
		Help:    "Time of each request to the chunk store, by backend and operation (get: one object; get-batch: several in one request).",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2.5, 12), // 0.5 ms to about 30 s
	}, []string{"backend", "op"})
	m.storeData = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "slacker_store_bytes_total",
		Help: "Bytes the chunk store delivered, by backend.",
	}, []string{"backend"})
	m.fuseTime = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "slacker_fuse_request_duration_seconds",
		Help:    "Time slackerd took to answer each FUSE request on a volume file (read, write, fsync, zero), store fetches included.",
		Buckets: prometheus.ExponentialBuckets(0.00001, 3, 14), // 10 µs to about 16 s
	}, []string{"op"})
	m.errs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "slacker_errors_total",
		Help: "Errors by where they were answered (fuse, store, api, snapshotter, graphdriver) and kind (not_found, unavailable, corrupt, ...).",
	}, []string{"where", "kind"})
	m.storeData.WithLabelValues(backend) // present from the start, at 0
	m.fuseOps = map[string]prometheus.Observer{}
	for _, op := range []string{"read", "write", "fsync", "zero"} {
		m.fuseOps[op] = m.fuseTime.WithLabelValues(op)
	}
	m.reg.MustRegister(m.storeTime, m.storeData, m.fuseTime, m.errs,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		nodeCollector{m})
	return m
}

// SetSource gives the metrics the node whose counters they report; until then
// those are left out of a scrape.
func (m *Metrics) SetSource(s Source) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.src = s
}

func (m *Metrics) source() Source {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.src
}

// ObserveStore is a fetch.Options.Observe: one store request.
func (m *Metrics) ObserveStore(op string, took time.Duration, bytes int64, err error) {
	m.storeTime.WithLabelValues(m.backend, op).Observe(took.Seconds())
	if bytes > 0 {
		m.storeData.WithLabelValues(m.backend).Add(float64(bytes))
	}
	if err != nil {
		m.Error(WhereStore, err)
	}
}

// ObserveFUSE is a fusefs.Options.Observe: one request on a volume file.
func (m *Metrics) ObserveFUSE(op string, took time.Duration, err error) {
	o, ok := m.fuseOps[op]
	if !ok {
		o = m.fuseTime.WithLabelValues(op)
	}
	o.Observe(took.Seconds())
	if err != nil {
		m.Error(WhereFUSE, err)
	}
}

// Error counts err, answered at where, by its kind.
func (m *Metrics) Error(where string, err error) {
	m.errs.WithLabelValues(where, errdefs.KindOf(err).String()).Inc()
}

// OnError returns Error for one place, as the servers' OnError hooks take it.
func (m *Metrics) OnError(where string) func(error) {
	return func(err error) { m.Error(where, err) }
}

// Handler serves the metrics in Prometheus's text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Listen opens the metrics address, host:port (":9464" for every interface). A
// malformed address or one in use fails with a message that names the setting.
func Listen(addr string) (net.Listener, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		return nil, fmt.Errorf("metrics_address %q: want host:port, such as 127.0.0.1:9464 or :9464: %w", addr, errdefs.ErrInvalid)
	}
	if host != "" && net.ParseIP(host) == nil && host != "localhost" {
		return nil, fmt.Errorf("metrics_address %q: %q is not an IP address: %w", addr, host, errdefs.ErrInvalid)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics_address %q: %w", addr, err)
	}
	return l, nil
}

// Server serves /metrics on a listener.
type Server struct {
	srv *http.Server
	log *slog.Logger
}

// Serve answers scrapes on l (GET /metrics) until Shutdown; it returns at once.
func (m *Metrics) Serve(l net.Listener, log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m.Handler())
	s := &Server{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}, log: log}
	log.Info("metrics-listening", "address", l.Addr().String(), "path", "/metrics")
	go func() {
		if err := s.srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics-stopped", "err", err)
		}
	}()
	return s
}

// Shutdown stops serving.
func (s *Server) Shutdown(ctx context.Context) error { return s.srv.Shutdown(ctx) }

// nodeCollector reports the node's counters, read from node.Stats at each scrape.
type nodeCollector struct{ m *Metrics }

var (
	descCacheHits = prometheus.NewDesc("slacker_cache_hits_total",
		"Chunk reads the node cache served without the store, by tier: memory, disk (its disk tier, loaded whole), file (4 KiB blocks of a local file, checked against block checksums).",
		[]string{"tier"}, nil)
	descCacheMisses = prometheus.NewDesc("slacker_cache_misses_total",
		"Chunks the node cache did not hold and took from the store (fetched, or read in place from a local store for the first time).", nil, nil)
	descCacheEvictions = prometheus.NewDesc("slacker_cache_evictions_total",
		"Chunks evicted from the node cache's disk tier.", nil, nil)
	descCacheCorrupt = prometheus.NewDesc("slacker_cache_corrupt_total",
		"Damage found in the node's local copies, never served: disk-tier files that failed their digest (what=file), 4 KiB blocks that failed their checksum (what=block).",
		[]string{"what"}, nil)
	descCacheBytes = prometheus.NewDesc("slacker_cache_bytes",
		"Bytes the node cache holds, by tier (memory, disk).", []string{"tier"}, nil)
	descCacheLimit = prometheus.NewDesc("slacker_cache_limit_bytes",
		"The disk tier's bound.", nil, nil)
	descMoved = prometheus.NewDesc("slacker_node_store_bytes_total",
		"Bytes the node moved from its store: chunks fetched, and chunks of a local store first read in place.", nil, nil)
	descRetries = prometheus.NewDesc("slacker_store_retries_total",
		"Store requests made again after a failure.", nil, nil)
	descFailures = prometheus.NewDesc("slacker_store_failures_total",
		"Chunk reads that failed for good after their retries (an EIO to the reader).", nil, nil)
	descPrefetch = prometheus.NewDesc("slacker_prefetch_chunks_total",
		"Chunks loaded ahead of their readers, by kind: readahead (sequential readers), replay (start-up traces), first-start (near the reads of a start with no trace).",
		[]string{"kind"}, nil)
	descPrefetchBytes = prometheus.NewDesc("slacker_prefetch_bytes_total",
		"Bytes loads ahead moved from the store.", nil, nil)
	descPrefetchBusy = prometheus.NewDesc("slacker_prefetch_skipped_total",
		"Loads ahead not started because every slot was busy.", nil, nil)
	descTraces = prometheus.NewDesc("slacker_startup_traces_total",
		"Start-up traces replayed and recorded.", []string{"event"}, nil)
	descVolumes = prometheus.NewDesc("slacker_volumes",
		"Volumes on the node, by kind (container, containerd, docker, image-root, convert, ...) and root mode (shared, block).",
		[]string{"kind", "mode"}, nil)
	descMounted = prometheus.NewDesc("slacker_volumes_mounted",
		"Volumes mounted.", nil, nil)
	descLocalImages = prometheus.NewDesc("slacker_local_images",
		"Images copied whole onto the node (local images), and those an image root reads.", []string{"state"}, nil)
	descLocalImageBytes = prometheus.NewDesc("slacker_local_image_bytes",
		"Disk the local images take.", nil, nil)
)

func (c nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descCacheHits, descCacheMisses, descCacheEvictions, descCacheCorrupt,
		descCacheBytes, descCacheLimit, descMoved, descRetries, descFailures, descPrefetch, descPrefetchBytes,
		descPrefetchBusy, descTraces, descVolumes, descMounted, descLocalImages, descLocalImageBytes} {
		ch <- d
	}
}

func (c nodeCollector) Collect(ch chan<- prometheus.Metric) {
	src := c.m.source()
	if src == nil {
		return
	}
	st := src.Stats()
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
	}
	counter(descCacheHits, st.Cache.MemHits, "memory")
	counter(descCacheHits, st.Cache.DiskHits, "disk")
	counter(descCacheHits, st.Cache.PartialReads, "file")
	counter(descCacheMisses, st.Cache.Misses)
	counter(descCacheEvictions, st.Cache.Evictions)
	counter(descCacheCorrupt, st.Cache.Corrupt, "file")
	counter(descCacheCorrupt, st.Cache.SumMismatches, "block")
	gauge(descCacheBytes, st.Cache.MemBytes, "memory")
	gauge(descCacheBytes, st.Cache.DiskBytes, "disk")
	gauge(descCacheLimit, st.Cache.MaxBytes)
	counter(descMoved, st.Fetch.FetchedBytes)
	counter(descRetries, st.Fetch.Retries)
	counter(descFailures, st.Fetch.Failures)
	counter(descPrefetch, st.Prefetch.ReadaheadChunks, "readahead")
	counter(descPrefetch, st.Prefetch.ReplayedChunks, "replay")
	counter(descPrefetch, st.Prefetch.FirstStartChunks, "first-start")
	counter(descPrefetchBytes, st.Prefetch.FetchedBytes)
	counter(descPrefetchBusy, st.Prefetch.Busy)
	counter(descTraces, st.Prefetch.TracesReplayed, "replayed")
	counter(descTraces, st.Prefetch.TracesRecorded, "recorded")
	gauge(descMounted, int64(st.Mounted))
	gauge(descLocalImages, int64(st.LocalImages.Count), "written")
	gauge(descLocalImages, int64(st.LocalImages.InUse), "in_use")
	gauge(descLocalImageBytes, st.LocalImages.Bytes)
	type key struct{ kind, mode string }
	counts := map[key]int64{}
	for _, v := range src.Volumes() {
		kind := v.Labels[labels.Kind]
		if kind == "" {
			kind = "other"
		}
		mode := string(v.Mode)
		if mode == "" {
			mode = string(node.RootBlock)
		}
		counts[key{kind, mode}]++
	}
	for k, n := range counts {
		gauge(descVolumes, n, k.kind, k.mode)
	}
}
