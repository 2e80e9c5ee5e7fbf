// Package longrun is the evaluation's long-running experiment (`slacker-bench eval
// longrun`, Slacker Fig 21): four servers (PostgreSQL, Redis, nginx, and a node
// server) each pulled on a cold node, started and loaded by its benchmark client
// (pgbench, redis-benchmark, wrk) until a fixed time after the pull began, on
// containerd + overlayfs and on Slacker, in its default mode ("slacker": shared
// roots) and, unless left out, in block mode ("slacker-block"). It reports the throughput over the whole
// window, start-up included (the paper's ratio), the throughput once loaded, and the
// time from the start of the pull to the first request served.
//
// The clients run on the host inside the server container's network namespace. It
// asserts nothing about the numbers.
package longrun
