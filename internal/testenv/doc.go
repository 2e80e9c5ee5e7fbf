// Package testenv builds the real environments that Slacker's integration tests run
// in: an in-process slackerd (node + API server on a temporary socket), the slacker and
// slackerd binaries built once per test process, a slackerd child process that tests
// may kill -9, and a real Debian minbase OCI image made with debootstrap and umoci,
// cached between runs (SLACKER_TEST_CACHE, default /var/cache/slacker-test). Its
// subpackage services starts the external programs (Debian's docker-registry,
// containerd, dockerd, MinIO) for the tests, the demo and the benchmarks.
//
// Everything it starts is stopped, unmounted and detached in t.Cleanup. Requirements
// go through package testutil, so in CI (SLACKER_CI=1) a missing tool fails the test.
package testenv
