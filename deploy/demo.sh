#!/usr/bin/env bash
# The fedagg demo: a federation of three regions on loopback.
#
#   deploy/demo.sh [BUILD_DIR]        (`make demo` builds first, then runs this)
#
# Makes a development PKI (federation CA, aggregator and region certificates)
# and Ed25519 identity keys, splits Fashion-MNIST into 3 non-IID regional
# shards (Dirichlet alpha = 0.5), writes the configs, starts the aggregator and
# three workers (us-east with 2 MPI ranks and PowerSGD-compressed gradients),
# runs DEMO_ROUNDS (default 20) rounds of secure aggregation with FedAdam,
# prints a row per round, then a summary: final accuracy, the audit log
# verified, where the files are.  Ctrl-C stops every process.
#
# Environment: DEMO_OUT (default demo-out), DEMO_ROUNDS (20),
# DEMO_STEPS (local steps per round, 100), DEMO_TIMEOUT (seconds, 600).
set -euo pipefail

src=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$src/build}" && pwd)
export FA_BIN="$build/bin"
export FA_SRC="$src"
out=${DEMO_OUT:-$src/demo-out}
rounds=${DEMO_ROUNDS:-20}
steps=${DEMO_STEPS:-100}
timeout=${DEMO_TIMEOUT:-600}
regions=(eu-west us-east ap-south)
all=$(IFS=,; echo "${regions[*]}")

# shellcheck source=deploy/fedlib.sh
source "$src/deploy/fedlib.sh"

for b in fedagg fedagg-aggregator fedagg-worker; do
    [ -x "$FA_BIN/$b" ] || fed_die "$FA_BIN/$b is missing: run 'make demo' (or 'make build') first"
done

cleanup() {
    fed_stop_all
}
trap cleanup EXIT
trap 'echo; echo "demo: interrupted; stopping every process"; exit 130' INT TERM

start=$SECONDS
rm -rf "$out"
mkdir -p "$out"
echo "demo: setting up the federation in $out"
echo "  - PKI: federation CA, aggregator and region certificates (openssl)"
echo "  - Ed25519 identity keys of the regions and the audit signing key"
echo "  - Fashion-MNIST split into ${#regions[@]} non-IID shards (Dirichlet alpha 0.5)"
FED_ALPHA=0.5 FED_SEED=7 fed_setup "$out" "${regions[@]}"
python3 - "$out/data/manifest.json" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))
for r in m["shards"]:
    print(f"      {r['region']:<9} {r['count']:>6} examples, labels 0-9: {r['histogram']}")
EOF
port=$(fed_free_port udp)
mport=$(fed_free_port tcp)
FED_ROUND="min_regions: 2
  threshold: 2
  advertise_deadline_ms: 60000
  shares_deadline_ms: 20000
  masked_deadline_ms: 60000
  consistency_deadline_ms: 20000
  unmask_deadline_ms: 20000" \
FED_OPTIMIZER="kind: FEDADAM learning_rate: 0.01 beta1: 0.9 beta2: 0.99 tau: 0.001" \
    fed_write_aggregator "$out" "$port" "$mport" "$rounds" "${regions[@]}"
export FED_TRAINER="local_steps: $steps batch_size: 64 learning_rate: 0.05 momentum: 0.9"
fed_write_worker "$out" eu-west "$port" "$all"
fed_write_worker "$out" us-east "$port" "$all" \
    "compression { kind: POWERSGD powersgd_rank: 4 powersgd_start_step: 10 }"
fed_write_worker "$out" ap-south "$port" "$all"
for f in "$out"/*.textproto; do
    "$FA_BIN/fedagg" config check "$f" >/dev/null || fed_die "config $f does not check"
done

echo "demo: starting the aggregator (HTTP/3 on 127.0.0.1:$port, metrics on 127.0.0.1:$mport)"
# Four processes share this machine's cores: one BLAS thread each.
export OPENBLAS_NUM_THREADS=1
fed_start_aggregator "$out"
sleep 0.5
echo "demo: starting the workers: eu-west, us-east (2 MPI ranks, PowerSGD r=4), ap-south"
fed_start_worker "$out" eu-west
fed_start_worker "$out" us-east 2
fed_start_worker "$out" ap-south
echo
python3 "$src/deploy/demo_monitor.py" "$out/logs/aggregator.log" "$out/accuracy.csv" \
    "$out/accuracy.svg" "$rounds" "$timeout" "$FED_AGG_PID" || {
    echo "demo: FAILED; the logs are in $out/logs/" >&2
    tail -5 "$out"/logs/*.log >&2
    exit 1
}

# Let the workers see the end, then stop everything.
sleep 1
fed_stop_all
echo
echo "demo: verifying the audit log (fedagg audit verify)"
if "$FA_BIN/fedagg" audit verify "$out/state/audit.log" --pubkey "$out/keys/aggregator.pub" \
    --config "$out/aggregator.textproto" >"$out/logs/audit-verify.log" 2>&1; then
    verified="verified ($(tail -1 "$out/logs/audit-verify.log"))"
else
    verified="FAILED: see $out/logs/audit-verify.log"
fi
final=$(tail -1 "$out/accuracy.csv" | cut -d, -f5)
errors=$(cat "$out"/logs/aggregator.log "$out"/logs/worker-*.log | grep -c 'level=error' || true)
cat <<EOF

demo: summary
  rounds completed     $(($(wc -l <"$out/accuracy.csv") - 1)) of $rounds (secure aggregation, FedAdam, 3 non-IID regions)
  final test accuracy  $final (Fashion-MNIST test set, 10000 images)
  audit log            $verified
  errors in the logs   $errors
  wall time            $((SECONDS - start)) s
  files
    $out/accuracy.csv            accuracy per round
    $out/accuracy.svg            the same as a chart
    $out/state/                  global models (safetensors), optimizer state, audit log
    $out/logs/                   one logfmt log per process
    $out/*.textproto             the configurations
    $out/pki/ $out/keys/        certificates and identity keys (development only)
EOF
case "$verified" in
verified*) exit 0 ;;
*) exit 1 ;;
esac
