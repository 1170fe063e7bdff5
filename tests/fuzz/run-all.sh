#!/bin/sh
# Runs each libFuzzer target for SECONDS (default 60) from its seed corpus.
# Usage: tests/fuzz/run-all.sh FUZZ_BIN_DIR [SECONDS]
set -eu
dir=$1
secs=${2:-60}
src=$(cd "$(dirname "$0")" && pwd)
for t in "$dir"/fuzz_*; do
    name=$(basename "$t")
    corpus="$src/corpus/${name#fuzz_}"
    work=$(mktemp -d)
    echo "fuzz: $name for ${secs}s"
    "$t" -max_total_time="$secs" -print_final_stats=1 "$work" "$corpus"
    rm -rf "$work"
done
