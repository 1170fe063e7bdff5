#!/bin/sh
# Runs every benchmark of fedagg-bench, printing JSON lines on stdout.
# Usage: benchmarks/run-all.sh [BUILD_DIR]
set -eu
build=${1:-build}
bench="$build/bin/fedagg-bench"
for name in $("$bench" --help | awk '/^  [a-z]/ {print $1}'); do
    echo "bench: $name" >&2
    "$bench" "$name" || echo "{\"bench\":\"$name\",\"error\":\"exit status $?\"}"
done
