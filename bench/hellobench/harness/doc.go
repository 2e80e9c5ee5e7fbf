// Package harness is HelloBench's harness: for each workload of a workloads file and
// each system under test (containerd + overlayfs, Slacker in its default mode or in
// block mode, or another containerd snapshotter already running), it measures
// push, pull and run until ready by the workload's rule, from a cold node every
// time (fresh node state, page cache dropped), in shuffled order, N repetitions,
// over loopback or an emulated link, in the paper's two cycles: deployment (pull +
// run) and development (push of a change to the top layer + pull + run). It
// records every sample, failures included, in a Results value that package report
// renders.
//
// It drives the systems through package rig (their real CLIs) and builds the
// images with package corpus. It never judges the numbers: a run is failed only when
// its workload did not become ready (exit status, log line, port, HTTP answer) within
// its timeout, or a step failed.
package harness
