#!/bin/sh
# Runs every benchmark of fedagg-bench, printing JSON lines on stdout, and
# rewrites benchmarks/RESULTS.md with them, stamped with the machine (CPU
# model, cores, memory, GPUs), the date and the commit measured.
# Usage: benchmarks/run-all.sh [BUILD_DIR]
#   RESULTS=FILE writes the stamped results there instead; RESULTS= (empty)
#   writes none.  A benchmark that fails gets an "error" JSON line.
set -eu
build=${1:-build}
bench="$build/bin/fedagg-bench"
src=$(cd "$(dirname "$0")/.." && pwd)
results=${RESULTS-$src/benchmarks/RESULTS.md}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT INT TERM

names=$("$bench" --help | awk '/^  [a-z]/ {print $1}')
for name in $names; do
    echo "bench: $name" >&2
    if "$bench" "$name" >"$work/$name.jsonl"; then
        :
    else
        echo "{\"bench\":\"$name\",\"error\":\"exit status $?\"}" >>"$work/$name.jsonl"
    fi
    cat "$work/$name.jsonl"
done

[ -n "$results" ] || exit 0

cpu=$(sed -n 's/^model name[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo 2>/dev/null | head -n 1)
[ -n "$cpu" ] || cpu=$(uname -m)
cores=$(getconf _NPROCESSORS_ONLN 2>/dev/null || nproc)
mem=$(awk '/^MemTotal:/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo 2>/dev/null || true)
gpus=$(nvidia-smi -L 2>/dev/null | sed 's/ (UUID.*//' | paste -sd ';' - || true)
if commit=$(git -C "$src" rev-parse HEAD 2>/dev/null); then
    git -C "$src" diff --quiet HEAD -- 2>/dev/null || commit="$commit, with uncommitted changes"
else
    commit="unknown (not a git checkout)"
fi
{
    echo "# Benchmark results"
    echo
    echo "Written by \`make bench\` (benchmarks/run-all.sh); each line measures"
    echo "our code next to an anchor in the same run and reports the ratio"
    echo "(docs/history.md names the targets).  Figures drift from run to run"
    echo "on a shared machine: compare ratios, and rerun before concluding."
    echo
    echo "| | |"
    echo "| --- | --- |"
    echo "| date | $(date -u +%Y-%m-%dT%H:%M:%SZ) |"
    echo "| commit | $commit |"
    echo "| CPU | $cpu |"
    echo "| cores | $cores |"
    [ -z "$mem" ] || echo "| memory | $mem |"
    echo "| GPUs | ${gpus:-none} |"
    echo "| kernel | $(uname -sr) |"
    for name in $names; do
        echo
        echo "## $name"
        echo
        echo '```json'
        cat "$work/$name.jsonl"
        echo '```'
    done
} >"$results.tmp"
mv "$results.tmp" "$results"
echo "bench: results in $results" >&2
