#!/usr/bin/env bash
# One model for every region: an aggregator that serves one region another
# model, to isolate that region's update in the secure sum (the
# model-inconsistency attack of Pasquini, Francati, Ateniese, CCS 2022), is
# caught before any masked upload leaves, whatever the version.  The
# aggregator plays it through its test switch fed-serve-other-model
# (aggregator/federation.c): us-east gets the model with one bit changed,
# under that file's own digest, and its advertisement for it is taken.
#
#  1. Version 0 (a new log records no model yet): us-east trains from the
#     other model and signs its digest; every region refuses the PeerList
#     (ALARM: a peer signed another model), none sends shares or a masked
#     byte (failpoints that would end the worker), the attempts abort.
#  2. From version 1 on: round 1 completes with all three; then the log
#     records version 1 as another model than the one us-east is served:
#     us-east raises the ALARM, keeps the evidence, exports it
#     (fedagg_worker_model_alarm 1) and exits 1 without advertising; the
#     two others go on, and the audit log verifies.
FED_PHASE_MS=4000 # a refused attempt aborts at the shares deadline
source "$FA_SRC/tests/integration/fedtest.sh"
fed_need_test_hooks

fed_test_config 3
agg="$D/logs/aggregator.log"
victim=us-east

# ---- 1. version 0 -----------------------------------------------------------
FEDAGG_FAILPOINTS="fed-serve-other-model=$victim" fed_start_aggregator "$D"
for r in "${REGIONS[@]}"; do
    start_worker_fp "$r" "worker-before-shares=exit,worker-before-masked=exit"
done
wait_log "$agg" 'msg="TEST SWITCH: serving a region another model.*region=us-east version=0' 120
wait_log "$agg" 'msg="round attempt aborted" .*round=1 attempt=0 phase=shares' 120
for r in "${REGIONS[@]}"; do
    wait_log "$D/logs/worker-$r.log" 'level=error msg="ALARM: the PeerList does not check out' 60
done
# each honest region names us-east; us-east names the first of the others
for r in ap-south eu-west; do
    grep 'msg="ALARM: the PeerList' "$D/logs/worker-$r.log" | head -1 |
        grep -q "'us-east' signed its advertisement for model" ||
        fail "$r did not name us-east: $(grep 'ALARM' "$D/logs/worker-$r.log" | head -1)"
done
grep 'msg="ALARM: the PeerList' "$D/logs/worker-$victim.log" | head -1 |
    grep -q "'ap-south' signed its advertisement for model" ||
    fail "us-east did not name ap-south"
echo "ok: $(grep 'msg="ALARM: the PeerList' "$D/logs/worker-eu-west.log" | head -1 | cut -c1-260)"
# nothing left any region: no shares, no masked byte, no round
for r in "${REGIONS[@]}"; do
    ! grep -q 'failpoint reached' "$D/logs/worker-$r.log" ||
        fail "$r went past the PeerList: $(grep 'failpoint reached' "$D/logs/worker-$r.log")"
    kill -0 "$(fed_worker_pid "$r")" 2>/dev/null || fail "$r exited"
done
! grep -q 'msg="masked upload received"' "$agg" || fail "a masked upload reached the aggregator"
[ "$(fed_rounds_completed "$D")" = 0 ] || fail "a round completed"
echo "ok: version 0: every region refused the PeerList, no share and no masked byte left"
fed_stop_all

# ---- 2. from version 1 on ---------------------------------------------------
rm -rf "$D/state" "$D"/worker-*/ "$D/logs"/*.log
fed_write_worker "$D" "$victim" "$PORT" "$ALL" "metrics_file: \"$D/$victim.prom\""
FEDAGG_FAILPOINTS="fed-serve-other-model=$victim@1" fed_start_aggregator "$D"
for r in "${REGIONS[@]}"; do fed_start_worker "$D" "$r"; done
vpid=$(fed_worker_pid "$victim")
vlog="$D/logs/worker-$victim.log"
fed_wait_rounds "$D" 1 120 || fail "round 1 did not complete"
round_line 1 | grep -q 'participants=3 ' || fail "round 1 without all three: $(round_line 1)"
wait_log "$vlog" 'level=error msg="ALARM: the aggregator' 60
set +e
wait "$vpid"
vrc=$?
set -e
[ "$vrc" = 1 ] || fail "us-east exited $vrc after the alarm, not 1"
grep 'msg="ALARM: the aggregator' "$vlog" | grep -q 'the signed log records version 1 as model' ||
    fail "the alarm does not name the model: $(grep ALARM "$vlog")"
grep -q 'model inconsistency' "$vlog" || fail "the alarm does not say what it is"
grep -q 'level=error msg="worker stopped" .*error="ALARM' "$vlog" || fail "no stop line"
echo "ok: $(grep 'msg="ALARM: the aggregator' "$vlog" | cut -c1-300)"
grep -q "^fedagg_worker_model_alarm{region=\"$victim\"} 1$" "$D/$victim.prom" ||
    fail "the alarm is not in the metrics file: $(grep model_alarm "$D/$victim.prom")"
grep -q '^== GET /v1/audit/record' "$D/worker-$victim/audit-alarm.txt" ||
    fail "no evidence kept"
fed_wait_rounds "$D" 2 120 || fail "round 2 did not complete without us-east"
round_line 2 | grep -q 'participants=2 ' || fail "round 2: $(round_line 2)"
! grep -q "msg=\"masked upload received\" .*region=$victim round=2" "$agg" ||
    fail "us-east uploaded in round 2"
for r in ap-south eu-west; do
    ! grep -q 'ALARM' "$D/logs/worker-$r.log" || fail "$r raised an alarm"
done
echo "ok: from version 1: us-east stopped on the alarm (exit 1, metric 1, evidence kept); the others went on"
fed_stop_all
check_audit_and_versions
echo "PASS"
