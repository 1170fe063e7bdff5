# fedtest.sh - common setup of the multi-process federation tests (sourced).
# Gives: $D (a fresh directory), fedlib's functions, $PORT, $MPORT,
# fed_test_config [ROUNDS] (3 regions, short deadlines), a cleanup trap, and
# helpers to assert on logs.
set -euo pipefail
: "${FA_BIN:?FA_BIN must point at the bin directory of the build}"
: "${FA_SRC:?FA_SRC must point at the source tree}"
# shellcheck source=deploy/fedlib.sh
source "$FA_SRC/deploy/fedlib.sh"

D=$(mktemp -d /tmp/fedagg-it.XXXXXX)
REGIONS=(eu-west us-east ap-south)
ALL=eu-west,us-east,ap-south
export OPENBLAS_NUM_THREADS=1
# Small, fast rounds: a few local steps, deadlines that still tolerate a
# loaded 2-core machine.
export FED_TRAINER="local_steps: 5 batch_size: 32 learning_rate: 0.05 momentum: 0.9"
# 5 steps of 32 examples: a region's weight is 1 (not 160/60000), so its
# quantised update is not mostly zeros.
export FED_QUANT="bits: 16 clip: CLIP_L2 clip_l2_norm: 10.0 clip_value: 0.05 max_examples: 160"

fed_test_cleanup() {
    local rc=$?
    fed_stop_all
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ]; then
        echo "---- test failed (exit $rc); last log lines ----" >&2
        for f in "$D"/logs/*.log; do
            echo "== $f" >&2
            tail -n 15 "$f" >&2
        done
    fi
    [ "${KEEP:-0}" = 1 ] || rm -rf "$D"
    exit "$rc"
}
trap fed_test_cleanup EXIT

# fed_test_config ROUNDS : PKI, keys, shards, configs for the 3 regions.
# The round policy is $FED_ROUND when the test set it, else the short
# deadlines above, with $FED_ADVERTISE_MS and $FED_PHASE_MS (8000 each)
# read here, so that a test may set them after sourcing this file.
fed_test_config() {
    export FED_ROUND="${FED_ROUND:-min_regions: 2
  threshold: 2
  advertise_deadline_ms: ${FED_ADVERTISE_MS:-8000}
  shares_deadline_ms: ${FED_PHASE_MS:-8000}
  masked_deadline_ms: ${FED_PHASE_MS:-8000}
  consistency_deadline_ms: ${FED_PHASE_MS:-8000}
  unmask_deadline_ms: ${FED_PHASE_MS:-8000}}"
    FED_ALPHA=0.5 FED_SEED=3 fed_setup "$D" "${REGIONS[@]}"
    PORT=$(fed_free_port udp)
    MPORT=$(fed_free_port tcp)
    fed_write_aggregator "$D" "$PORT" "$MPORT" "$1" "${REGIONS[@]}"
    for r in "${REGIONS[@]}"; do
        fed_write_worker "$D" "$r" "$PORT" "$ALL"
    done
}

fail() {
    echo "FAIL: $*" >&2
    exit 1
}

# wait_log FILE PATTERN TIMEOUT_S : waits until FILE has a line matching PATTERN.
wait_log() {
    local f=$1 pat=$2 t=$3 start=$SECONDS
    until grep -q -- "$pat" "$f" 2>/dev/null; do
        [ $((SECONDS - start)) -lt "$t" ] || fail "no '$pat' in $f after ${t}s"
        sleep 0.2
    done
}

# The line of the Nth "round completed" of the aggregator.
round_line() {
    grep 'msg="round completed"' "$D/logs/aggregator.log" | sed -n "${1}p"
}

# Checks the audit log with the CLI, and that model versions are contiguous.
check_audit_and_versions() {
    "$FA_BIN/fedagg" audit verify "$D/state/audit.log" --pubkey "$D/keys/aggregator.pub" \
        --config "$D/aggregator.textproto" >"$D/logs/audit-verify.log" 2>&1 ||
        fail "audit verify: $(cat "$D/logs/audit-verify.log")"
    # Versions from the audit log itself: 0 -> 1 -> 2 ..., no gap, no
    # duplicate, each record's previous model the one before it.
    "$FA_BIN/fedagg" audit show "$D/state/audit.log" --json >"$D/logs/audit-show.jsonl" ||
        fail "audit show failed"
    python3 - "$D/logs/audit-show.jsonl" <<'PY' || fail "model versions not contiguous"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
recs = [r for r in recs if not ({"admin", "decision", "lifecycle"} & r.keys())]  # actions change no version
prev = 0
for r in recs:
    pv, nv = r["prev_version"], r["new_version"]
    assert pv == prev and nv == prev + 1, f"record {r['index']}: {pv} -> {nv} after {prev}"
    prev = nv
print(f"{len(recs)} records, versions 1..{prev} contiguous")
PY
}

# wait_count FILE PATTERN N TIMEOUT_S : waits until PATTERN matches N lines.
wait_count() {
    local f=$1 pat=$2 n=$3 t=$4 start=$SECONDS
    until [ "$(fed_count_lines "$f" "$pat")" -ge "$n" ]; do
        [ $((SECONDS - start)) -lt "$t" ] || fail "fewer than $n '$pat' in $f after ${t}s"
        sleep 0.2
    done
}

# fed_need_test_hooks : skips the test (exit 77) when the build has no test
# switches (cmake -DFEDAGG_TEST_HOOKS=ON; common/fa_failpoint.h).
fed_need_test_hooks() {
    if ! "$FA_BIN/fedagg-aggregator" --version | grep -q 'test hooks compiled in'; then
        echo "SKIP: this build has no test hooks (cmake -DFEDAGG_TEST_HOOKS=ON; make check has them)"
        exit 77
    fi
}

# Starts REGION's worker with failpoints (FEDAGG_FAILPOINTS value).
start_worker_fp() {
    local r=$1 fp=$2
    FEDAGG_FAILPOINTS="$fp" fed_start_worker "$D" "$r"
}

# SIGKILLs REGION's worker.
kill_worker() {
    local pid
    pid=$(fed_worker_pid "$1")
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}
