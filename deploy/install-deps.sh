#!/bin/sh
# Install the Debian 12 packages fedagg needs, by named set (docs/building.md).
# Idempotent: installs only what is missing, and nothing when all is present.
#
#   deploy/install-deps.sh [--check] [--list] [SET...]
#
# Sets (default: build runtime region test, all that `make build`, `make
# check` and `make demo` need):
#   build    compile the daemons and the CLI: compiler, CMake, the -dev
#            packages (deploy/Dockerfile's build stage installs only this)
#   runtime  the shared libraries of fedagg and fedagg-aggregator: what a
#            host that only runs the aggregator needs (no MPI)
#   region   a region's worker on top of runtime: the MPI library and mpirun
#   mpijob   ssh client and server, for ranks on several hosts (MPIJob pods)
#   test     the test suite and the demo: interop peers, clang for the
#            fuzzers, PyTorch, Prometheus, Chromium, the Fashion-MNIST data
#   deploy   `make check-deploy`: podman (runc, netavark), debootstrap,
#            kubectl (kustomize), npm (the manifests' schema validator)
#
# An entry PACKAGE=COMMAND is present when COMMAND is on PATH, whatever
# installed it, and is installed as PACKAGE otherwise.  kubectl counts only
# when it renders a kustomization with `labels:` (1.21 or later): Debian 12's
# own kubernetes-client 1.20 cannot render the overlays; the package
# `kubectl` comes from the Kubernetes project's apt repository.
#
# --check: only report, exit 1 if something is missing.
# --list:  print the packages of the sets, one a line, and exit.
set -eu

# The packages of one set.
set_packages() {
    case $1 in
    build)
        echo "build-essential cmake pkg-config
libngtcp2-dev libngtcp2-crypto-gnutls-dev libnghttp3-dev
libgnutls28-dev libssl-dev libsodium-dev
librust-blake3-dev
libprotobuf-c-dev protobuf-c-compiler protobuf-compiler
libopenblas-dev libopenmpi-dev
libmicrohttpd-dev libjansson-dev zlib1g-dev
libcmocka-dev"
        ;;
    runtime)
        echo "libngtcp2-9 libngtcp2-crypto-gnutls2 libnghttp3-3 libgnutls30
libssl3 libsodium23 libprotobuf-c1 libjansson4 libmicrohttpd12 zlib1g
libopenblas0-pthread"
        ;;
    region)
        echo "libopenmpi3 openmpi-bin"
        ;;
    mpijob)
        echo "openssh-client openssh-server"
        ;;
    test)
        echo "git gnutls-bin openssl
ngtcp2-client ngtcp2-server
clang libclang-rt-14-dev
curl python3 iproute2
python3-yaml systemd
python3-torch python3-numpy
prometheus
chromium
dataset-fashion-mnist"
        ;;
    deploy)
        echo "podman runc netavark aardvark-dns iptables
debootstrap
kubectl=kubectl
npm=npm"
        ;;
    esac
}

check_only=0
list_only=0
sets=""
for a in "$@"; do
    case $a in
    --check) check_only=1 ;;
    --list) list_only=1 ;;
    build | runtime | region | mpijob | test | deploy) sets="$sets $a" ;;
    *)
        echo "install-deps: unknown set or option '$a' (sets: build runtime region mpijob test deploy)" >&2
        exit 2
        ;;
    esac
done
sets=${sets# }
[ -n "$sets" ] || sets="build runtime region test"

entries=""
for s in $sets; do
    entries="$entries $(set_packages "$s")"
done

if [ "$list_only" = 1 ]; then
    for e in $entries; do echo "${e%%=*}"; done
    exit 0
fi

# kubectl renders deploy/k8s's overlays (tests/deploy/kubectl.sh does the same).
kubectl_renders() {
    command -v kubectl >/dev/null 2>&1 || return 1
    d=$(mktemp -d) || return 1
    printf 'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: probe\n' >"$d/cm.yaml"
    printf 'resources:\n- cm.yaml\nlabels:\n- pairs:\n    fedagg-probe: rendered\n' >"$d/kustomization.yaml"
    ok=1
    if kubectl kustomize "$d" 2>/dev/null | grep -q 'fedagg-probe: rendered'; then ok=0; fi
    rm -rf "$d"
    return $ok
}

present() { # ENTRY
    case $1 in
    kubectl=*) kubectl_renders ;;
    *=*) command -v "${1#*=}" >/dev/null 2>&1 ;;
    *) dpkg-query -W -f='${Status}\n' "$1" 2>/dev/null | grep -q '^install ok installed$' ;;
    esac
}

missing=""
n=0
for e in $entries; do
    n=$((n + 1))
    present "$e" || missing="$missing ${e%%=*}"
done

if [ -z "$missing" ]; then
    echo "install-deps: all $n packages of ($sets) present, nothing to do"
    exit 0
fi

echo "install-deps: missing ($sets):$missing"
case " $missing " in
*" kubectl "*)
    if command -v kubectl >/dev/null 2>&1; then
        echo "install-deps: $(command -v kubectl) cannot render kustomize's 'labels:' (kubectl 1.21 or later needed; Debian 12's kubernetes-client is 1.20)" >&2
    fi
    ;;
esac
if [ "$check_only" = 1 ]; then
    exit 1
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: need root to install packages (run: sudo $0 $*)" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
echo "install-deps: apt-get update"
apt-get update -qq
for p in $missing; do
    if ! apt-cache show "$p" >/dev/null 2>&1; then
        echo "install-deps: no package '$p' in the configured apt sources" >&2
        [ "$p" != kubectl ] ||
            echo "install-deps: kubectl >= 1.21 is needed (kustomize with 'labels'); add the Kubernetes project's apt repository" >&2
        exit 1
    fi
done
echo "install-deps: apt-get install$missing"
# shellcheck disable=SC2086
apt-get install -y -qq -o Dpkg::Use-Pty=0 --no-install-recommends $missing
echo "install-deps: done"
