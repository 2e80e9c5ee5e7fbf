// Package e2e holds Slacker's end-to-end tests: the real slacker and slackerd
// binaries, a real Debian image made with debootstrap, Debian's docker-registry and
// runc, and crashes by SIGKILL. It has no code of its own.
package e2e
