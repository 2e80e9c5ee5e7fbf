// Package testutil holds helpers shared by tests: requirement checks that skip on a
// developer's machine but fail in CI, and builders of the project's binaries.
//
// CI sets SLACKER_CI=1 (see scripts/test). Under it, a test whose requirement (root,
// a tool, a kernel feature) is missing fails instead of skipping, so privileged tests
// can never silently disappear from CI.
package testutil
