#!/usr/bin/env bash
# Differential privacy with an external trainer: ap-south's trainer
# (tests/worker/fake_trainer.py) reports what each round spent, DP-SGD with
# q 0.05, sigma 0.8, 5 steps, and its own growing epsilon (1.9 a round);
# ap-south's budget is epsilon 3.75 at 1e-5.
#   - round 1: the worker composes the report into its own accountant
#     (3.2078), logs it next to the trainer's 1.9, signs the statement, and
#     the audit log has it (`fedagg audit privacy`, `fedagg audit verify`);
#   - from round 2 the trainer's own accounting says 3.8 and more, beyond
#     the budget: the update is not uploaded ("privacy budget exhausted",
#     metric 1) and the rounds go on with the two other regions (no privacy).
source "$FA_SRC/tests/integration/fedtest.sh"

PY=$(python3 -c "import sys; print(sys.executable)")
ROUNDS=3
fed_test_config "$ROUNDS"
FED_WORKER_TRAINER="external { command: [\"$PY\", \"$FA_SRC/tests/worker/fake_trainer.py\", \"ok\"] timeout_s: 60 }" \
    fed_write_worker "$D" ap-south "$PORT" "$ALL" 'metrics_file: "worker-ap-south/metrics.prom"
privacy { target_epsilon: 3.75 }'
AP="$D/logs/worker-ap-south.log"
fed_start_aggregator "$D"
fed_start_worker "$D" eu-west
fed_start_worker "$D" us-east
FAKE_PRIVACY='{"mechanism": "dp-sgd", "noise_multiplier": 0.8, "sampling_rate": 0.05, "steps": 5, "clip": 1.0, "epsilon_per_round": 1.9, "delta": 1e-5, "accountant": "fake-rdp"}' \
    fed_start_worker "$D" ap-south
fed_wait_rounds "$D" "$ROUNDS" 80 || fail "the federation did not finish its $ROUNDS rounds"

grep -q 'msg="differential privacy on".*(new) epsilon_spent=0.0000 budget=3.75 .*mechanism=reported-by-trainer' "$AP" ||
    fail "start line: $(grep 'differential privacy on' "$AP")"
grep 'msg="privacy spent"' "$AP" | grep -q 'round=1 .*steps=5 noise_multiplier=0.8 clip=1 sampling_rate=0.05 epsilon_round=3.2078 epsilon_total=3.2078 budget=3.75 delta=1e-05 rounds_accounted=1 trainer_epsilon=1.9000' ||
    fail "round 1: $(grep 'privacy spent' "$AP")"
[ "$(grep -c 'msg="privacy spent"' "$AP")" = 1 ] || fail "ap-south spent more than one round"
grep 'msg="privacy budget exhausted: the trained update is not uploaded"' "$AP" | head -n 1 |
    grep -q "round=2 .*the external trainer's own accounting (fake-rdp) says epsilon 3.8, beyond the budget of 3.75" ||
    fail "round 2: $(grep 'privacy budget exhausted' "$AP" | head -n 1)"
grep -q '^fedagg_worker_privacy_exhausted{region="ap-south"} 1$' "$D/worker-ap-south/metrics.prom" ||
    fail "metrics: $(grep privacy "$D/worker-ap-south/metrics.prom")"
round_line 1 | grep -q 'participants=3' || fail "round 1: $(round_line 1)"
for n in $(seq 2 "$ROUNDS"); do
    round_line "$n" | grep -q 'participants=2' || fail "round $n: $(round_line "$n")"
done
! grep -h 'level=error' "$D"/logs/*.log || fail "errors in the logs"

"$FA_BIN/fedagg" audit privacy "$D/state/audit.log" --config "$D/aggregator.textproto" \
    >"$D/logs/audit-privacy.txt" 2>&1 || fail "audit privacy: $(cat "$D/logs/audit-privacy.txt")"
cat "$D/logs/audit-privacy.txt"
grep -Eq '^ap-south +1 +3\.2078 +1e-05 +3\.7500 +1e-05 +1/1 +dp-sgd \(rdp-sgm/tight-conversion\)' \
    "$D/logs/audit-privacy.txt" || fail "ap-south's row"
[ "$(grep -c -E '^(eu-west|us-east) ' "$D/logs/audit-privacy.txt")" = 0 ] ||
    fail "regions without privacy have statements"
check_audit_and_versions
echo "PASS"
