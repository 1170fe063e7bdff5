#!/usr/bin/env bash
# Differential privacy that each region enforces itself: three regions
# train with DP-SGD (q 0.05, sigma 0.8, 5 steps a round); ap-south's budget
# (epsilon 3.75 at 1e-5) pays for two rounds (3.628), not a third (3.898).
#   - every region's statements are in the audit log: `fedagg audit privacy`
#     shows each region's cumulative epsilon over the rounds that took its
#     upload, every signature verified, and `fedagg audit verify` passes;
#   - ap-south, SIGTERMed after its first round and restarted, starts with
#     the epsilon it had spent (its sealed accountant, not reset: one round,
#     or two when it had trained the second before the signal) and spends
#     exactly two rounds in all;
#   - then it refuses ("privacy budget exhausted", with the numbers; metric
#     fedagg_worker_privacy_exhausted 1) and the federation goes on without
#     it (rounds of two);
#   - restarted once more with on_exhausted PRIVACY_STOP, it says so and
#     exits 0 at once, its accountant still at two rounds.
source "$FA_SRC/tests/integration/fedtest.sh"

ROUNDS=5
fed_test_config "$ROUNDS"
priv() { # priv REGION BUDGET [ON_EXHAUSTED]
    printf 'metrics_file: "worker-%s/metrics.prom"\nprivacy { target_epsilon: %s noise_multiplier: 0.8 clip: 1.0 sampling_rate: 0.05 on_exhausted: %s }' \
        "$1" "$2" "${3:-PRIVACY_SKIP}"
}
fed_write_worker "$D" eu-west "$PORT" "$ALL" "$(priv eu-west 50)"
fed_write_worker "$D" us-east "$PORT" "$ALL" "$(priv us-east 50)"
fed_write_worker "$D" ap-south "$PORT" "$ALL" "$(priv ap-south 3.75)"
AP="$D/logs/worker-ap-south.log"

fed_start_aggregator "$D"
for r in "${REGIONS[@]}"; do fed_start_worker "$D" "$r"; done
wait_log "$AP" 'msg="differential privacy on".*(new) epsilon_spent=0.0000' 30

# Its first round, then a SIGTERM, usually while it waits for the next; a
# fast machine may have trained and accounted the second by then.  The
# restart must start from whatever it had spent.
wait_log "$AP" 'msg="round done"' 90
kill -TERM "$(fed_worker_pid ap-south)"
wait "$(fed_worker_pid ap-south)" || fail "ap-south did not exit 0 on SIGTERM"
nspent=$(grep -c 'msg="privacy spent"' "$AP" || true)
epsk=$(grep 'msg="privacy spent"' "$AP" | tail -n 1 | sed -n 's/.* epsilon_total=\([0-9.]*\).*/\1/p')
[ -n "$epsk" ] || fail "no privacy spent line in ap-south's log"
fed_start_worker "$D" ap-south
wait_count "$AP" 'msg="differential privacy on"' 2 30
grep 'msg="differential privacy on"' "$AP" | tail -n 1 |
    grep -q "(restored) epsilon_spent=$epsk budget=3.75 delta=1e-05 rounds_accounted=$nspent" ||
    fail "restarted ap-south does not start from epsilon $epsk ($nspent rounds): $(grep 'differential privacy on' "$AP" | tail -n 1)"

# Its second round, then the refusal; the federation goes on.
wait_log "$AP" 'msg="privacy budget exhausted: this region does not train or upload this round"' 120
fed_wait_rounds "$D" "$ROUNDS" 120 || fail "the federation did not finish its $ROUNDS rounds"
for r in eu-west us-east; do
    wait_log "$D/logs/worker-$r.log" 'msg="the federation has finished"' 30
done
spent=$(grep -c 'msg="privacy spent"' "$AP" || true)
[ "$spent" = 2 ] || fail "ap-south spent $spent rounds, its budget pays for 2"
eps2=$(grep 'msg="privacy spent"' "$AP" | tail -n 1 | sed -n 's/.* epsilon_total=\([0-9.]*\).*/\1/p')
[ "$eps2" = 3.6278 ] || fail "ap-south's epsilon after two rounds is $eps2, want 3.6278"
grep 'privacy budget exhausted' "$AP" | head -n 1 |
    grep -q 'epsilon_spent=3.6278 budget=3.75 delta=1e-05 rounds_accounted=2 on_exhausted=PRIVACY_SKIP.*would cost epsilon 3.208 and take the total from 3.628 to 3.898' ||
    fail "exhaustion line: $(grep 'privacy budget exhausted' "$AP" | head -n 1)"
M="$D/worker-ap-south/metrics.prom"
grep -q '^fedagg_worker_privacy_exhausted{region="ap-south"} 1$' "$M" || fail "metrics: $(grep privacy "$M")"
grep -q '^fedagg_worker_privacy_budget{region="ap-south"} 3.75$' "$M" || fail "metrics budget"
grep -q '^fedagg_worker_privacy_epsilon{region="ap-south"} 3.627' "$M" || fail "metrics epsilon"
grep -q '^fedagg_worker_privacy_exhausted{region="eu-west"} 0$' "$D/worker-eu-west/metrics.prom" ||
    fail "eu-west is not exhausted"
# The rounds after ap-south's refusal went on with the two others.
last=$(round_line "$ROUNDS")
echo "$last" | grep -q 'participants=2' || fail "the last round: $last"
for n in $(seq 1 "$ROUNDS"); do
    round_line "$n" | grep -Eq 'participants=[23]' || fail "round $n: $(round_line "$n")"
done
! grep -h 'level=error' "$D"/logs/*.log || fail "errors in the logs"

# The ledger in the audit log.
"$FA_BIN/fedagg" audit privacy "$D/state/audit.log" --config "$D/aggregator.textproto" \
    >"$D/logs/audit-privacy.txt" 2>&1 || fail "audit privacy: $(cat "$D/logs/audit-privacy.txt")"
cat "$D/logs/audit-privacy.txt"
# The log holds a statement of each round that took ap-south's upload: both
# of its rounds, or only the first when the SIGTERM landed after it had
# accounted the second but before that round took its upload (the round
# closed with the two others; ap-south's own accountant keeps both, the
# conservative side).  Its "round done" lines say which.
ndone=$(grep -c 'msg="round done"' "$AP" || true)
case "$ndone" in
1) want_row='1 +3\.2078' ;;
2) want_row='2 +3\.6278' ;;
*) fail "ap-south finished $ndone rounds; its budget pays for 2" ;;
esac
grep -Eq "^ap-south +$want_row +1e-05 +3\.7500 +1e-05 +$ndone/$ndone +dp-sgd \(rdp-sgm/tight-conversion\)" \
    "$D/logs/audit-privacy.txt" || fail "ap-south's row (it finished $ndone rounds)"
for r in eu-west us-east; do
    row=$(grep "^$r " "$D/logs/audit-privacy.txt") || fail "no row for $r"
    n=$(echo "$row" | awk '{print $2}')
    echo "$row" | grep -q " $n/$n " || fail "$r: not every statement verified: $row"
    [ "$n" -ge "$((ROUNDS - 1))" ] || fail "$r has $n statements in $ROUNDS rounds"
done
"$FA_BIN/fedagg" audit privacy "$D/state/audit.log" --region ap-south --json \
    --config "$D/aggregator.textproto" | grep -q "\"region\":\"ap-south\",\"statements\":$ndone" ||
    fail "audit privacy --region --json"
check_audit_and_versions

# PRIVACY_STOP: said, exit 0, nothing spent or reset.
fed_write_worker "$D" ap-south "$PORT" "$ALL" "$(priv ap-south 3.75 PRIVACY_STOP)"
status=0
timeout 30 "$FA_BIN/fedagg-worker" --config "$D/worker-ap-south.textproto" >>"$AP" 2>&1 || status=$?
[ "$status" = 0 ] || fail "with PRIVACY_STOP the exhausted worker exited $status"
tail -n 3 "$AP" | grep -q 'msg="privacy budget exhausted: the worker stops (privacy.on_exhausted PRIVACY_STOP)"' ||
    fail "no stop line: $(tail -n 3 "$AP")"
grep 'msg="differential privacy on"' "$AP" | tail -n 1 | grep -q 'epsilon_spent=3.6278 budget=3.75 delta=1e-05 rounds_accounted=2' ||
    fail "the accountant after the stop: $(grep 'differential privacy on' "$AP" | tail -n 1)"
echo "PASS"
