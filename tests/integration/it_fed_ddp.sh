#!/usr/bin/env bash
# Distributed DP on the secure sum: three regions add their shares of
# discrete Gaussian noise in the ring before masking (distributed_dp: clip
# 2, noise multiplier 0.001, noise of 3 regions charged), so the sum the
# aggregator unmasks is already noisy.
#   - ap-south is SIGKILLed after its masked upload in round 1 and restarted:
#     it resumes the attempt with the identical ring vector (its restored
#     secure-aggregation client refuses any other input) and round 1
#     completes with all three;
#   - ap-south's own budget (privacy.mechanism "ddg", region level) pays for
#     two rounds, not a third: it refuses ("privacy budget exhausted") and
#     the federation goes on with two regions, whose sums carry less noise
#     than charged: the aggregator warns and records noisy_contributions 2;
#   - every audit record carries the round's DDG parameters, its noisy
#     contributions (= its participants) and the epsilons; audit verify
#     passes; the global model's accuracy rises.
# The noise multiplier is small so that the model learns in a few rounds of
# three regions: the epsilons are large (region-level DP needs many regions,
# docs/privacy.md); the test checks the mechanism and its accounting.
source "$FA_SRC/tests/integration/fedtest.sh"
fed_need_test_hooks

ROUNDS=4
export FED_OPTIMIZER="kind: FEDAVG learning_rate: 1.0"
export FED_AGG_EXTRA='distributed_dp { enabled: true clip: 2.0 noise_multiplier: 0.001 min_regions: 3 }'
fed_test_config "$ROUNDS"
# Region-level epsilon of one round at 3 regions' noise, tight conversion at
# 1e-5: 6.25e5 (order 1.25); two rounds 1.25e6, three 1.875e6.
fed_write_worker "$D" ap-south "$PORT" "$ALL" \
    'metrics_file: "worker-ap-south/metrics.prom"
privacy { target_epsilon: 1.6e6 mechanism: "ddg" unit: "region" }'
AP="$D/logs/worker-ap-south.log"
AGG="$D/logs/aggregator.log"

fed_start_aggregator "$D"
fed_start_worker "$D" eu-west
fed_start_worker "$D" us-east
start_worker_fp ap-south worker-before-consistency
wait_log "$AGG" 'msg="distributed DP on the secure sum"' 30
grep 'msg="distributed DP on the secure sum"' "$AGG" | grep -q 'padded_dim=262144 ring_bits=' ||
    fail "the aggregator's DDG line: $(grep 'distributed DP on' "$AGG")"
wait_count "$AP" "failpoint=worker-before-consistency" 1 120
kill_worker ap-south
echo "killed ap-south after its masked upload"
fed_start_worker "$D" ap-south
wait_log "$AP" 'msg="resuming the attempt from saved state"' 60
fed_wait_rounds "$D" 1 120 || fail "round 1 did not complete"
round_line 1 | grep -q 'participants=3 ' || fail "round 1: $(round_line 1)"
[ "$(grep -c 'msg="update encoded with distributed DP noise".* round=1 ' "$AP")" = 2 ] ||
    fail "ap-south did not encode round 1 twice (first run and resume)"

fed_wait_rounds "$D" "$ROUNDS" 180 || fail "the federation did not finish its $ROUNDS rounds"
for r in eu-west us-east; do
    wait_log "$D/logs/worker-$r.log" 'msg="the federation has finished"' 30
done
grep 'msg="privacy spent"' "$AP" | sed 's/^/  /'
[ "$(grep -c 'msg="privacy spent"' "$AP")" = 2 ] || fail "ap-south did not spend exactly 2 rounds"
grep 'msg="privacy spent"' "$AP" | head -n 1 | grep -q 'mechanism=ddg steps=1 noise_multiplier=0.001 clip=2' ||
    fail "ap-south's spend line"
grep 'privacy budget exhausted: this region does not train or upload this round' "$AP" |
    head -n 1 | grep -q 'distributed discrete Gaussian' || fail "no DDG refusal in ap-south's log"
for n in 3 4; do
    round_line "$n" | grep -q 'participants=2 ' || fail "round $n: $(round_line "$n")"
done
grep 'fewer regions.* noise in the sum than the regions charged for' "$AGG" | grep -q 'noisy_contributions=2 min_regions=3' ||
    fail "no dropout warning in the aggregator's log"
grep 'msg="distributed DP accounted"\|fewer regions' "$AGG" | sed 's/^/  /'
! grep -h 'level=error' "$D"/logs/*.log || fail "errors in the logs"

curl -sf "http://127.0.0.1:$MPORT/metrics" >"$D/metrics.txt" || fail "GET /metrics"
grep -q '^fedagg_ddp_noisy_contributions 2$' "$D/metrics.txt" ||
    fail "metrics: $(grep ddp "$D/metrics.txt")"
# The status document (a region's GET /v1/status as JSON) carries the same
# account, and `fedagg status` renders it.
"$FA_BIN/fedagg-h3" get --server "127.0.0.1:$PORT" --name localhost --ca "$D/pki/ca.crt" \
    --cert "$D/pki/client-us-east.crt" --key "$D/pki/client-us-east.key" \
    --header "accept: application/json" /v1/status --out "$D/status.json" >/dev/null 2>&1 ||
    fail "GET /v1/status as JSON"
python3 - "$D/status.json" "$D/metrics.txt" <<'PY' || fail "status distributed_dp: $(cat "$D/status.json")"
import json, sys
d = json.load(open(sys.argv[1]))["distributed_dp"]
assert d["min_regions"] == 3 and d["noise_multiplier"] == 0.001 and d["clip"] == 2.0, d
assert d["rounds_accounted"] == 4 and d["noisy_contributions_last"] == 2, d
m = [l.split() for l in open(sys.argv[2]) if l.startswith("fedagg_ddp_epsilon ")]
assert m and abs(float(m[0][1]) - d["epsilon_total"]) <= 1e-9 * d["epsilon_total"], (m, d)
print("status: distributed_dp", json.dumps(d))
PY
"$FA_BIN/fedagg" status --from "$D/status.json" >"$D/status.out" 2>&1 ||
    fail "fedagg status --from: $(cat "$D/status.out")"
grep -q "distributed DP: noise multiplier 0.001, clip 2, 3 regions' noise charged; epsilon .* after 4 rounds (the last with 2 regions' noise)" "$D/status.out" ||
    fail "status text: $(cat "$D/status.out")"
# and the web dashboard shows it as a card (its page is a snapshot of the
# federation's state, refreshed every second: wait for the fourth round)
start=$SECONDS
until curl -sf "http://127.0.0.1:$MPORT/dashboard" >"$D/dashboard.html" &&
    grep -q 'id="distributed-dp">ε [0-9.e+]*</div><div class="sub">at δ 1e-05 after 4 rounds (the last with 2 regions&#39; noise)' "$D/dashboard.html"; do
    [ $((SECONDS - start)) -lt 15 ] ||
        fail "dashboard: $(grep -o '.\{0,80\}distributed-dp.\{0,200\}' "$D/dashboard.html")"
    sleep 0.5
done

# The audit log: each record's DDG block.
check_audit_and_versions
# audit verify notes the rounds with less noise than charged
[ "$(grep -c 'fewer than the 3 its regions charged for' "$D/logs/audit-verify.log")" = 2 ] ||
    fail "audit verify's notes: $(cat "$D/logs/audit-verify.log")"
python3 - "$D/logs/audit-show.jsonl" "$D/metrics.txt" <<'PY' || fail "the records' distributed_dp blocks"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
recs = [r for r in recs if "admin" not in r]
assert len(recs) == 4, len(recs)
prev = 0.0
for k, r in enumerate(recs, 1):
    d = r["distributed_dp"]
    assert d["noisy_contributions"] == len(r["participants"]), (k, d, r["participants"])
    assert d["min_regions"] == 3 and d["padded_dim"] == 262144 and d["rounds_accounted"] == k
    assert d["epsilon_total"] > prev and d["epsilon_round"] > 0, (k, d)
    prev = d["epsilon_total"]
    print(f"round {r['round']}: noisy_contributions {d['noisy_contributions']} "
          f"epsilon_round {d['epsilon_round']:.6g} epsilon_total {d['epsilon_total']:.6g} "
          f"at delta {d['delta']:g} (sigma2 {d['sigma2']:.6g}, gamma {d['granularity']:.6g}, "
          f"ring_bits {d['ring_bits']})")
# fewer regions' noise: a larger epsilon for the same round
assert recs[2]["distributed_dp"]["epsilon_round"] > recs[0]["distributed_dp"]["epsilon_round"]
# the aggregator's gauge is the log's total
m = [l.split() for l in open(sys.argv[2]) if l.startswith("fedagg_ddp_epsilon ")]
assert m and abs(float(m[0][1]) - prev) <= 1e-6 * prev, (m, prev)
PY
"$FA_BIN/fedagg" audit privacy "$D/state/audit.log" --config "$D/aggregator.textproto" \
    >"$D/logs/audit-privacy.txt" 2>&1 || fail "audit privacy: $(cat "$D/logs/audit-privacy.txt")"
cat "$D/logs/audit-privacy.txt"
grep -Eq '^ap-south +2 .* 2/2 +ddg \(rdp-ddg/tight-conversion\)' "$D/logs/audit-privacy.txt" ||
    fail "ap-south's row in audit privacy"

# The model learned through the noise.
acc0=$(grep 'msg="global model evaluated"' "$AGG" | grep ' version=0 ' | head -n 1 |
    sed -n 's/.* accuracy=\([0-9.]*\).*/\1/p')
accN=$(grep 'msg="global model evaluated"' "$AGG" | grep " version=$ROUNDS " | tail -n 1 |
    sed -n 's/.* accuracy=\([0-9.]*\).*/\1/p')
echo "accuracy: version 0 $acc0, version $ROUNDS $accN"
python3 -c "import sys; sys.exit(0 if float('$accN') > float('$acc0') + 0.2 else 1)" ||
    fail "accuracy did not move: $acc0 -> $accN"
# One budget, one mechanism: the DDG accountant refuses a DP-SGD config.
fed_write_worker "$D" ap-south "$PORT" "$ALL" 'privacy { target_epsilon: 1.6e6 }'
status=0
timeout 30 "$FA_BIN/fedagg-worker" --config "$D/worker-ap-south.textproto" >>"$AP" 2>&1 || status=$?
[ "$status" != 0 ] || fail "a DP-SGD config started on ap-south's DDG accountant"
grep -q 'accounts mechanism \\"ddg\\", this config says privacy.mechanism \\"dp-sgd\\"' "$AP" ||
    fail "no mechanism refusal: $(tail -n 2 "$AP")"
echo "PASS"
