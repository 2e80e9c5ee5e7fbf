#!/usr/bin/env bash
# The main job, end to end on the embedded default (local store, no external
# services): build a Debian minbase image with debootstrap, convert it to Slacker
# snapshots, push it to a local registry, then from a clean node pull and run
# `echo hello` lazily, next to containerd + overlayfs pulling the same image from the
# same registry. Prints pull time, run time and bytes moved, side by side.
#
# Everything it starts (registry, slackerd, containerd) it stops. Work files live
# under SLACKER_BENCH_DIR (default /var/lib/slacker-bench); the built image is cached
# there between runs. Extra arguments go to `slacker-bench core` (e.g. --micro,
# --images minbase,big, --runs 5).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh

dir="${SLACKER_BENCH_DIR:-/var/lib/slacker-bench}"
mkdir -p "$dir"
exec ./bin/slacker-bench core --dir "$dir/core" --corpus "$dir/corpus" --runs 3 "$@"
