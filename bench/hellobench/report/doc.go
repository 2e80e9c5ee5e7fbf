// Package report turns HelloBench results (package harness's Results, one per
// network profile) into numbers and figures: per-workload medians, speedups of each
// system over the baseline (containerd + overlayfs) in the deployment and
// development cycles, their CDFs with median and 90th percentile, per-category
// bars, and bytes fetched against image size and bytes read, as an HTML page with
// SVG figures drawn here (no JavaScript, no network), plus text and Markdown
// summaries.
//
// It only reads results; it never runs anything. The statistics are pure functions
// with tests.
package report
