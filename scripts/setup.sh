#!/usr/bin/env bash
# Installs what Slacker needs on a Debian bookworm machine, as root: the kernel-side
# tools (FUSE, e2fsprogs), runc and containerd, Debian's docker-registry, and the image
# tools the tests and benchmarks use, then builds bin/slacker, bin/slackerd,
# bin/slacker-bench and bin/slacker-stargz. Idempotent: installs only what is missing.
set -euo pipefail

if [ "$(id -u)" != 0 ]; then
	echo "setup: run as root (it installs packages and the tests mount filesystems)" >&2
	exit 1
fi

packages=(fuse3 e2fsprogs runc containerd containernetworking-plugins iptables docker-registry skopeo umoci debootstrap tar iproute2 util-linux ca-certificates gcc libc6-dev docker.io)
# strace: bench/rig's TestContainerdOutput slows ctr down with it, to reproduce ctr's lost output.
packages+=(strace)
# The evaluation (docs/EVALUATION.md): fio, filesystems to compare, server benchmarks.
packages+=(fio xfsprogs btrfs-progs postgresql-client redis-tools wrk)
missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "setup: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! command -v go >/dev/null; then
	echo "setup: the Go toolchain is required (go.mod names the version)" >&2
	exit 1
fi
[ -e /dev/fuse ] || modprobe fuse 2>/dev/null || { echo "setup: this kernel has no FUSE (/dev/fuse)" >&2; exit 1; }
[ -e /dev/loop-control ] || modprobe loop 2>/dev/null || { echo "setup: this kernel has no loop devices" >&2; exit 1; }

# nerdctl (not packaged in bookworm) for the containerd tests and docs/containerd.md:
# v1.7 is the last line that supports containerd 1.6. Built once from the Go module
# proxy (inside a throwaway module: `go install pkg@v` needs the proxy's version
# list, which it refuses for nerdctl) and cached; about 3 minutes the first time.
NERDCTL_VERSION=v1.7.7
cache="${SLACKER_TEST_CACHE:-/var/cache/slacker-test}/bin"
if ! command -v nerdctl >/dev/null; then
	if [ ! -x "$cache/nerdctl-$NERDCTL_VERSION" ]; then
		echo "setup: building nerdctl $NERDCTL_VERSION (once, cached in $cache)"
		mkdir -p "$cache"
		tmp=$(mktemp -d)
		trap 'rm -rf "$tmp"' EXIT
		printf 'module nerdctlbuild\n\ngo 1.21\n\nrequire github.com/containerd/nerdctl %s\n' "$NERDCTL_VERSION" >"$tmp/go.mod"
		printf '//go:build tools\n\npackage tools\n\nimport _ "github.com/containerd/nerdctl/cmd/nerdctl"\n' >"$tmp/tools.go"
		(cd "$tmp" && go mod tidy >/dev/null 2>&1 && CGO_ENABLED=0 go build -o "$cache/nerdctl-$NERDCTL_VERSION" github.com/containerd/nerdctl/cmd/nerdctl)
		rm -rf "$tmp"
		trap - EXIT
	fi
	install -m 0755 "$cache/nerdctl-$NERDCTL_VERSION" /usr/local/bin/nerdctl
fi

cd "$(dirname "$0")/.."
go mod download
mkdir -p bin
go build -o bin/ ./cmd/slacker ./cmd/slackerd ./bench/cmd/slacker-bench
# stargz-snapshotter beside Slacker in HelloBench: a module of its own (containerd 2),
# which slacker and slackerd do not depend on.
(cd bench/stargz && go build -o ../../bin/slacker-stargz .)
echo "setup: ok (binaries in $(pwd)/bin)"
