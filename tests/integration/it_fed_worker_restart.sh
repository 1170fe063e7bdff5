#!/usr/bin/env bash
# A worker that restarts while the advertise phase is still open (it
# advertised, then died before the phase closed) lost the keys it
# advertised.  Restarted, it advertises new ones, which replace the first
# (nobody has seen them yet), and the round completes with all three
# regions.  Before this, the aggregator answered 409 "already sent a
# different advertise message" and the worker retried in a tight loop until
# the round went on without it.
FED_ADVERTISE_MS=60000 # the phase stays open while we restart the worker
source "$FA_SRC/tests/integration/fedtest.sh"
fed_need_test_hooks

fed_test_config 2
# at debug level, the aggregator logs each message it accepts
"$FA_BIN/fedagg-aggregator" --config "$D/aggregator.textproto" --log-level debug \
    >>"$D/logs/aggregator.log" 2>&1 &
FED_AGG_PID=$!
FED_PIDS+=("$FED_AGG_PID")
agg="$D/logs/aggregator.log"
victim=ap-south
vlog="$D/logs/worker-$victim.log"
# us-east holds back (paused before advertising): the phase stays open.
start_worker_fp us-east worker-before-advertise
fed_start_worker "$D" eu-west
fed_start_worker "$D" "$victim"
wait_count "$agg" 'msg="message accepted" .*region=ap-south round=1 attempt=0 phase=advertise' 1 120
wait_count "$D/logs/worker-us-east.log" 'failpoint=worker-before-advertise' 1 120
# ap-south waits in its long-poll for the phase to close; it dies there
kill_worker "$victim"
echo "killed $victim after it advertised"
fed_start_worker "$D" "$victim"
wait_count "$agg" 'msg="advertisement replaced" .*region=ap-south' 1 120
echo "ok: $(grep 'msg="advertisement replaced"' "$agg" | head -1 | cut -c1-200)"
kill_worker us-east
fed_start_worker "$D" us-east
fed_wait_rounds "$D" 1 120 || fail "the round did not complete"
line=$(round_line 1)
echo "  $line"
echo "$line" | grep -q 'participants=3 ' || fail "the restarted worker did not take part"
# no spinning on refusals: the worker heard no 409 at all
! grep -q 'already sent a different advertise' "$vlog" || fail "the worker was refused"
fed_wait_rounds "$D" 2 120 || fail "the second round did not complete"
fed_stop_all
check_audit_and_versions
echo "PASS"
