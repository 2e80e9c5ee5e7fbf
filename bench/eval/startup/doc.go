// Package startup runs a HelloBench workload twice on one node, as the paper's repeat
// runs do (Slacker §4.4 and §6.3): a first container on a cold node until it is
// ready by the workload's rule, then a second container of the same image on the
// same node. It gives each container's time until ready and, on Slacker, its
// volume's statistics (bytes read, fetched, written, and the blocks of the image it
// read). Used by the analysis (bytes read at start-up, Fig 14) and the
// micro-benchmarks (second-run time, Fig 22).
package startup
