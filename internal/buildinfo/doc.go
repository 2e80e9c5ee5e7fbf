// Package buildinfo says which source a running binary was built from, for the
// records of benchmarks and evaluations. It never changes anything.
package buildinfo
