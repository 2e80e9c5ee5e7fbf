// Package metrics serves slackerd's Prometheus metrics (docs/operating.md,
// "Metrics"): the latency of every store request and of every FUSE request on a
// volume file, observed as they happen through the hooks of packages fetch and
// fusefs; errors by where they were answered (FUSE, store, API, snapshotter,
// graph driver) and by kind (errdefs.KindOf); and the node's counters (cache hits,
// misses and evictions per tier, prefetch, start-up traces, volumes, local
// images), read from node.Stats at each scrape, so that nothing is counted twice
// and the API's /v1/stats and /metrics never disagree.
//
// It owns the HTTP listener of metrics_address and nothing else: it never changes
// what it measures, and the packages it observes do not know it exists (they see
// only a func).
package metrics
