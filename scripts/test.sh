#!/usr/bin/env bash
# The test suite, as CI runs it: installs what is missing, then vets and runs every
# test with the race detector. Privileged tests (FUSE, loop, ext4, runc, containerd,
# registry) run for real; SLACKER_CI=1 makes a missing requirement a failure, never a
# skip. Slow inputs (a debootstrapped Debian image) are cached in SLACKER_TEST_CACHE.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh

export SLACKER_CI=1
export SLACKER_TEST_CACHE="${SLACKER_TEST_CACHE:-/var/cache/slacker-test}"

before_loops=$(losetup -a | wc -l)
go vet ./...
# MinIO (the S3 store's tests) is built from the Go module proxy once, a few
# minutes on a fresh machine, and cached in SLACKER_TEST_CACHE: build it here, alone,
# so that no test's timeout pays for it.
go test -count=1 -timeout 20m -run '^TestMinIOStartStop$' ./internal/testenv/services
go test -race -count=1 -timeout 40m ./...
# bench/stargz is a module of its own (stargz-snapshotter beside Slacker in HelloBench).
(cd bench/stargz && go vet ./... && go test -count=1 ./...)

# Nothing the tests started may outlive them.
left=$(findmnt -rn -o TARGET,FSTYPE | awk '$2 ~ /^fuse.slacker/ || $1 ~ /^\/tmp\/Test/ {print}')
if [ -n "$left" ] || [ "$(losetup -a | wc -l)" -gt "$before_loops" ]; then
	echo "test: the tests left mounts or loop devices behind:" >&2
	echo "$left" >&2
	losetup -a >&2
	exit 1
fi
echo "test: ok"
