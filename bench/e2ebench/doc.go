// Package e2ebench holds the results formats of the Go benchmarks in internal/e2e
// that write JSON: BenchmarkDockerPullRun (docker pull + run, the slacker graph
// driver vs overlay2; docs/bench/docker-*.json), BenchmarkDeployStores
// (deployment with each chunk store; docs/bench/stores-*.json) and
// BenchmarkDeployAttached (deployment through CRI of an image's ordinary name, its
// descriptor attached, against its Slacker name; docs/bench/attached-*.json). The benchmarks
// write their results through these types and the docs renderer (bench/docsgen)
// reads them back, so the two cannot drift apart.
//
// It only describes and reads results, with the medians the docs quote; it never
// runs anything, and a format change here must keep reading every committed file.
package e2ebench
