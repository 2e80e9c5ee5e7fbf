// Package docsgen renders the figures of the Markdown docs (README.md and every
// .md under docs/) from the results JSON committed under docs/bench,
// docs/hellobench, docs/eval and docs/eval/breakdown, and checks that the docs say
// what the data says. It is `slacker-bench docs`, and its test fails in CI when a
// marked figure differs from what the committed results render.
//
// A figure is marked in place in the Markdown source:
//
//	<!-- fig SOURCE FUNC ARG... FORMAT -->15.7x<!-- /fig -->
//
// SOURCE names a committed results file by its base name without .json
// (core-2026-11-22b, results-1gbit, micro, hpmapper-64-cpu); the directory the file
// is in says what kind of results it holds, and FUNC is one of that kind's figures
// (core.go: the core benchmark; hello.go: HelloBench; docker.go, stores.go and
// attached.go: the Go benchmarks of internal/e2e; eval.go: the evaluation's
// items), with its arguments. FORMAT, the last argument of a number, says how it
// is written (format.go). Several sources (comma-separated), or a figure that
// gives several values, render as their range ("0.6–0.7x"). The text between
// the two comments is what the figure renders to; a figure of several lines (a
// table) sits between a marker on its own line and the closing comment. Markers in
// code (fenced blocks, `spans`) are text.
//
// It only reads results and rewrites the text between markers: it never runs a
// benchmark, never writes a results file, and never changes a doc outside its
// markers. A figure with no committed data behind it is not its business: the doc
// says in words that it is a one-off observation.
package docsgen
