#!/usr/bin/env bash
# The aggregator SIGKILLed at every point of a round that matters, then
# restarted: after each phase close (its round state saved), in the middle of
# a masked upload, after the unmasked sum was saved, and between the model
# commit and its audit record.  The workers keep running and retry; every
# round resumes or completes, model versions stay contiguous, and the audit
# log verifies with no gap or duplicate.  Last, SIGTERM while stopped
# regions hold long-polls: the drain answers them at once and the
# aggregator exits 0, without waiting for its timeout.
source "$FA_SRC/tests/integration/fedtest.sh"
fed_need_test_hooks

# Short QUIC idle timeouts: a worker's connection to the killed aggregator is
# found dead within seconds (a keep-alive PING reaches the new process, which
# answers with a stateless reset derived from the same static secret).
quic="quic { idle_timeout_ms: 6000 }"
FED_AGG_EXTRA="$quic" fed_test_config 30
for r in "${REGIONS[@]}"; do
    fed_write_worker "$D" "$r" "$PORT" "$ALL" "$quic"
done
agg="$D/logs/aggregator.log"

start_agg_fp() {
    FEDAGG_FAILPOINTS="$1" fed_start_aggregator "$D"
}
kill_agg() {
    kill -KILL "$FED_AGG_PID" 2>/dev/null || true
    wait "$FED_AGG_PID" 2>/dev/null || true
}

start_agg_fp ""
for r in "${REGIONS[@]}"; do fed_start_worker "$D" "$r"; done
fed_wait_rounds "$D" 1 120 || fail "the first round did not complete"

i=0
for fp in aggregator-after-advertise aggregator-after-shares aggregator-mid-masked \
    aggregator-after-masked aggregator-after-consistency aggregator-after-unmask \
    aggregator-after-commit; do
    i=$((i + 1))
    kill_agg
    start_agg_fp "$fp"
    wait_count "$agg" "failpoint=$fp" 1 180
    kill_agg
    echo "killed the aggregator at $fp (after $(fed_rounds_completed "$D") rounds)"
done
done_before=$(fed_rounds_completed "$D")
start_agg_fp ""
fed_wait_rounds "$D" $((done_before + 2)) 240 || fail "the federation did not go on"
grep -q 'msg="repairing the audit log' "$agg" || fail "the commit/append crash was not repaired"
grep -q 'msg="completing the round whose result was saved' "$agg" ||
    fail "the saved result was not completed"
grep -q 'msg="resuming the round in flight"' "$agg" || fail "no round was resumed"

# For the drain, connections that outlive it: the 6 s idle timeout (for
# the crashes) would end a stopped region's connection before 30 s.  The
# aggregator runs OpenBLAS threads, started before main blocks the drain
# signals: the SIGTERM below may land in one of them and must still drain.
for r in "${REGIONS[@]}"; do kill -TERM "$(fed_worker_pid "$r")"; done
for r in "${REGIONS[@]}"; do wait "$(fed_worker_pid "$r")" || true; done
kill_agg
sed -i 's/idle_timeout_ms: 6000/idle_timeout_ms: 120000/' "$D/aggregator.textproto" "$D"/worker-*.textproto
OPENBLAS_NUM_THREADS=2 start_agg_fp ""
for r in "${REGIONS[@]}"; do fed_start_worker "$D" "$r"; done
done_before=$(fed_rounds_completed "$D")
fed_wait_rounds "$D" $((done_before + 1)) 240 || fail "no round after the restart"

# SIGTERM while regions wait on a phase: ap-south stopped, the other two
# hold long-polls on it (each phase's deadline is 20 s or more), then they
# are stopped too, as when a platform stops the regions before the
# aggregator: no client will acknowledge an answer.  The drain answers the
# long-polls at once and exits 0, rather than waiting 30 s for them to time
# out.
kill -STOP "$(fed_worker_pid ap-south)"
sleep 3
kill -STOP "$(fed_worker_pid eu-west)" "$(fed_worker_pid us-east)"
kill -TERM "$FED_AGG_PID"
st=0
wait "$FED_AGG_PID" || st=$?
for r in "${REGIONS[@]}"; do kill -CONT "$(fed_worker_pid "$r")"; done
[ "$st" = 0 ] || fail "the aggregator exited $st on SIGTERM"
grep -q 'msg="draining: held long-polls answered"' "$agg" ||
    fail "the drain did not answer the held long-polls: $(grep -i drain "$agg" | tail -3)"
! grep -q 'msg="drain timeout' "$agg" || fail "the drain waited for its timeout"
fed_stop_all
check_audit_and_versions
echo "PASS: $(fed_rounds_completed "$D") rounds across 7 aggregator crashes"
