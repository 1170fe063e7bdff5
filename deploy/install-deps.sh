#!/bin/sh
# Install the Debian 12 packages fedagg needs (docs/building.md).
# Idempotent: installs only what is missing, and nothing when all is present.
# Usage: deploy/install-deps.sh [--check]   (--check: only report, exit 1 if missing)
set -eu

PACKAGES="
build-essential cmake pkg-config git
libngtcp2-dev libngtcp2-crypto-gnutls-dev libnghttp3-dev
libgnutls28-dev gnutls-bin
libssl-dev openssl
libsodium-dev
librust-blake3-dev
libprotobuf-c-dev protobuf-c-compiler protobuf-compiler
libopenblas-dev libopenmpi-dev openmpi-bin
libmicrohttpd-dev
libjansson-dev zlib1g-dev
libcmocka-dev
ngtcp2-client ngtcp2-server
clang libclang-rt-14-dev
curl python3 iproute2
python3-yaml systemd
python3-torch python3-numpy
prometheus
chromium
dataset-fashion-mnist
"

missing=""
for p in $PACKAGES; do
    if ! dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
        missing="$missing $p"
    fi
done

if [ -z "$missing" ]; then
    echo "install-deps: all $(echo $PACKAGES | wc -w) packages present, nothing to do"
    exit 0
fi

echo "install-deps: missing:$missing"
if [ "${1:-}" = "--check" ]; then
    exit 1
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: need root to install packages (run: sudo $0)" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
echo "install-deps: apt-get update"
apt-get update -qq
echo "install-deps: apt-get install$missing"
# shellcheck disable=SC2086
apt-get install -y -qq -o Dpkg::Use-Pty=0 --no-install-recommends $missing
echo "install-deps: done"
