// Package workload owns the HelloBench workload definitions: parsing and validating
// the TOML format of workloads/hellobench.toml, the typed readiness rules
// (exit status, log line, TCP port, HTTP path), and the pure helpers that decide
// whether a rule is satisfied (a line matcher fed output, an exit-code check, an
// HTTP status check).
//
// It never runs anything, opens a network connection or touches a container: the
// corpus builder (bench/corpus) turns a Workload into an image, and the HelloBench
// harness and the evaluation run it and feed what they observe to the rule's
// helpers here. Every benchmark uses it: the core benchmark's images and the
// evaluation's compilers are workloads too. Every validation
// error names the workload (or its position in the file) and the field.
package workload
