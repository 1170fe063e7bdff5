#!/usr/bin/env bash
# bench-hostile-setup.sh - the federation `fedagg-bench hostile` attacks,
# made with deploy/fedlib.sh as the tests make theirs: 3 regions on
# loopback, the built-in trainer with 5 local steps, phase deadlines of 8 s,
# the default QUIC settings and request budget, a memory limit of 1 GiB, one
# listed operator; and the certificate of a region that is no member
# (retired-region: issued by the federation CA, not in `regions`).
#
#   bench-hostile-setup.sh DIR BIN_DIR UDP_PORT METRICS_PORT
#
# Idempotent for an existing DIR.  On failure the tools' output goes to
# stderr and the exit status is 1.
set -euo pipefail

[ $# -eq 4 ] || { echo "usage: $0 DIR BIN_DIR UDP_PORT METRICS_PORT" >&2; exit 2; }
dir=$1
export FA_BIN=$2
port=$3
mport=$4
export FA_SRC=${FA_SRC:-$(cd "$(dirname "$0")/.." && pwd)}
# shellcheck source=deploy/fedlib.sh
source "$FA_SRC/deploy/fedlib.sh"

regions=(eu-west us-east ap-south)
all=$(IFS=,; echo "${regions[*]}")
export FED_TRAINER="local_steps: 5 batch_size: 32 learning_rate: 0.05 momentum: 0.9"
export FED_QUANT="bits: 16 clip: CLIP_L2 clip_l2_norm: 10.0 clip_value: 0.05 max_examples: 160"
export FED_ROUND="min_regions: 2
  threshold: 2
  advertise_deadline_ms: 8000
  shares_deadline_ms: 8000
  masked_deadline_ms: 8000
  consistency_deadline_ms: 8000
  unmask_deadline_ms: 8000"
export FED_AGG_EXTRA='memory_limit_bytes: 1073741824
operators: ["ops"]'
FED_ALPHA=0.5 FED_SEED=3 fed_setup "$dir" "${regions[@]}" ||
    { cat "$dir"/logs/*.log >&2; exit 1; }
"$FA_SRC/deploy/pki.sh" "$dir/pki" --regions "$all,retired-region" --operators ops \
    >>"$dir/logs/pki.log" 2>&1 || { cat "$dir/logs/pki.log" >&2; exit 1; }
fed_write_aggregator "$dir" "$port" "$mport" 100000 "${regions[@]}"
for r in "${regions[@]}"; do
    fed_write_worker "$dir" "$r" "$port" "$all"
done
