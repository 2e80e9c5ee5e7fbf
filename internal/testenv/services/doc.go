// Package services starts and stops the real external programs that Slacker's tests,
// demo and benchmarks drive: Debian's docker-registry (distribution 2.8),
// containerd, dockerd (docker.io 20.10) and MinIO (an S3 server, built once from the
// Go module proxy and cached). Each runs with its own configuration
// under a caller-chosen directory (never system paths; dockerd's one exception,
// /run/docker/plugins, is removed again if it made it), in its own process group, is
// waited for until it answers, and is stopped by PID. PushRandomImage puts a small
// ordinary image in a registry. It is test and benchmark infrastructure: slacker
// and slackerd never link it (cmd/deps_test.go).
package services
