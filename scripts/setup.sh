#!/usr/bin/env bash
# Installs what Slacker needs on a Debian bookworm machine, as root: the kernel-side
# tools (FUSE, e2fsprogs), runc and containerd, Debian's docker-registry, and the image
# tools the tests and benchmarks use. Idempotent: installs only what is missing.
set -euo pipefail

if [ "$(id -u)" != 0 ]; then
	echo "setup: run as root (it installs packages and the tests mount filesystems)" >&2
	exit 1
fi

packages=(fuse3 e2fsprogs runc containerd docker-registry skopeo umoci debootstrap tar iproute2 util-linux ca-certificates gcc libc6-dev docker.io)
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

cd "$(dirname "$0")/.."
go mod download
mkdir -p bin
go build -o bin/ ./cmd/slacker ./cmd/slackerd
echo "setup: ok (binaries in $(pwd)/bin)"
