#!/usr/bin/env bash
# The gate and its rollbacks across crashes (docs/governance.md):
#   - an operator's rollback (`fedagg models rollback`) killed between the
#     store's commit of the restored version and its audit record: the
#     restarted aggregator records it, with the operator's name and reason
#     (the rollback's intent file), and the federation goes on from it;
#   - the gate's rejection killed right after its decision record, before
#     the rollback: the restarted aggregator rolls back at the next phase
#     close, as the decision said;
# and every decision recomputes (`fedagg audit verify`), the store and the
# log agree, a promoted version is kept beyond the store's window.
source "$FA_SRC/tests/integration/fedtest.sh"
fed_need_test_hooks

F="$FA_BIN/fedagg"
# loss, lower is better, a wide tolerance: every candidate is promoted
export FED_AGG_EXTRA='operators: ["alice"]
promotion { enabled: true metric: "loss" tolerance: 100 min_regions: 2 }'
fed_test_config 100000
TEST_SET='test_images: "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz" test_labels: "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz"'
for r in "${REGIONS[@]}"; do
    sed -i "s|^data {|data {\n  $TEST_SET|" "$D/worker-$r.textproto"
done
sed -i 's/keep_versions: 5/keep_versions: 2/' "$D/aggregator.textproto"
"$FA_SRC/deploy/pki.sh" "$D/pki" --operators alice >"$D/logs/pki-ops.log" 2>&1 ||
    fail "pki.sh --operators: $(cat "$D/logs/pki-ops.log")"
cat >"$D/operator.textproto" <<EOF
aggregator: "127.0.0.1:$PORT"
tls { cert_file: "pki/operator-alice.crt" key_file: "pki/operator-alice.key" ca_file: "pki/ca.crt" server_name: "localhost" }
EOF
OPC=(--config "$D/operator.textproto")
AGG="$D/logs/aggregator.log"
VK=(--pubkey "$D/keys/aggregator.pub" --config "$D/aggregator.textproto")

start_aggregator_fp() { # FAILPOINTS (may be empty)
    FEDAGG_FAILPOINTS="$1" fed_start_aggregator "$D"
}
version_of() { # the current version from the store's MANIFEST
    tail -n 1 "$D/state/MANIFEST" | awk '{print $2}'
}

# --- an operator's rollback, killed between its commit and its record -------------------
start_aggregator_fp aggregator-after-rollback-commit=exit
for r in "${REGIONS[@]}"; do fed_start_worker "$D" "$r"; done
fed_wait_rounds "$D" 3 120 || fail "3 rounds did not complete"
"$F" pause "${OPC[@]}" >/dev/null || fail "pause"
wait_log "$AGG" 'federation paused' 60
before=$(version_of)
rc=0
"$F" models rollback "${OPC[@]}" >"$D/out" 2>&1 || rc=$?
[ "$rc" != 0 ] || fail "the rollback answered although the aggregator died: $(cat "$D/out")"
wait "$FED_AGG_PID" 2>/dev/null || true
kill -0 "$FED_AGG_PID" 2>/dev/null && fail "the aggregator did not stop at the failpoint"
[ "$(version_of)" = $((before + 1)) ] || fail "the store did not commit the restored version"
[ -f "$D/state/rollback.intent" ] || fail "no rollback intent left"
grep -q "fedagg-rollback v1" "$D/state/rollback.intent" && grep -q " alice$" "$D/state/rollback.intent" ||
    fail "intent: $(cat "$D/state/rollback.intent")"

start_aggregator_fp ""
wait_log "$AGG" 'msg="repairing the audit log: a rollback was committed but not recorded".*by="alice"' 30
wait_log "$AGG" 'msg="resuming the round in flight"\|msg="round state older than the model store' 30
[ ! -e "$D/state/rollback.intent" ] || fail "the intent outlived its record"
"$F" audit verify "$D/state/audit.log" "${VK[@]}" >"$D/out" 2>&1 || fail "verify after repair: $(cat "$D/out")"
"$F" audit lineage "$((before + 1))" --log "$D/state/audit.log" "${VK[@]}" --json >"$D/card.json" 2>"$D/out" ||
    fail "lineage: $(cat "$D/out")"
python3 - "$D/card.json" "$before" <<'PY' || fail "the repaired rollback's card"
import json, sys
c, before = json.load(open(sys.argv[1])), int(sys.argv[2])
m = c["made"]
assert m["by"] == "rollback" and m["parent"] == before and m["by_operator"] == "alice", m
assert "operator alice rolled back" in m["reason"], m
PY
"$F" resume "${OPC[@]}" >/dev/null || fail "resume"
n=$(fed_rounds_completed "$D")
fed_wait_rounds "$D" $((n + 2)) 120 || fail "no rounds after the repaired rollback"
fed_stop_all

# --- the gate's rollback, killed right after the decision ----------------------------------
# loss, but higher taken as better, no tolerance: the next candidate, whose
# loss is lower, is rejected
sed -i 's/promotion { .* }/promotion { enabled: true metric: "loss" direction: HIGHER_IS_BETTER tolerance: 0 min_regions: 2 }/' \
    "$D/aggregator.textproto"
grep -q 'direction: HIGHER_IS_BETTER' "$D/aggregator.textproto" || fail "config not changed"
: >"$AGG.2"
mv "$AGG" "$AGG.1"
start_aggregator_fp aggregator-after-rejection=exit
for r in "${REGIONS[@]}"; do fed_start_worker "$D" "$r"; done
start=$SECONDS
while kill -0 "$FED_AGG_PID" 2>/dev/null; do
    [ $((SECONDS - start)) -lt 120 ] || fail "no decision killed the aggregator within 120 s"
    sleep 0.2
done
grep -q 'msg="candidate decided".*outcome=rejected action=rollback' "$AGG" ||
    fail "the aggregator stopped, but not after a rejection: $(grep 'candidate decided' "$AGG" | tail -2)"
grep -q 'rolled back to the last promoted version' "$AGG" && fail "rolled back before the crash point"
start_aggregator_fp ""
wait_log "$AGG" 'msg="rolled back to the last promoted version".*by="the promotion gate"' 60
fed_stop_all
"$F" audit verify "$D/state/audit.log" "${VK[@]}" >"$D/out" 2>&1 || fail "verify: $(cat "$D/out")"
grep -q "promotion decisions recomputed" "$D/out" || fail "verify: $(cat "$D/out")"
echo "PASS"
