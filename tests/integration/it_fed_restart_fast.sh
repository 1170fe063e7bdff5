#!/usr/bin/env bash
# Recovery in seconds (docs/history.md, "Recovery"), with the default 60 s
# QUIC idle timeout:
#  1. the aggregator SIGKILLed while every worker waits in a long-poll and
#     restarted at once on the same address (same static secret): the next
#     round completes within seconds of the restart, and every worker is
#     back in the protocol (a new round done) within seconds too.
#     The workers PING during long-polls; the new process answers each PING
#     with a stateless reset derived from the static secret; the workers
#     reconnect at once and send their request again.  Before, they noticed
#     only at the idle timeout (about a minute: 65 s measured).
#  2. a worker SIGKILLed mid-round and restarted: its region takes part in
#     the next attempt (or resumes the one in flight), within seconds.
# The measured figures are printed; the bounds leave a wide margin for a
# loaded 2-core machine (RESTART_BOUND_S, default 20 s; WORKER_BOUND_S, 45 s).
source "$FA_SRC/tests/integration/fedtest.sh"

RESTART_BOUND_S=${RESTART_BOUND_S:-20}
WORKER_BOUND_S=${WORKER_BOUND_S:-45}
fed_test_config 1000
# ap-south trains 200 times longer (about 2 s a round): meanwhile the other
# two wait in their advertise long-poll, silent, as fast regions wait for
# slow ones in a real federation; that is where a restart hurt most.
FED_TRAINER="local_steps: 1000 batch_size: 32 learning_rate: 0.05 momentum: 0.9" \
    fed_write_worker "$D" ap-south "$PORT" "$ALL"
agg="$D/logs/aggregator.log"

grep -q idle_timeout "$D/aggregator.textproto" "$D"/worker-*.textproto &&
    fail "this test needs the default idle timeout"

now() { echo "$EPOCHREALTIME"; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
# under BOUND: 'awk' compares seconds with a fraction
under() { awk -v x="$1" -v b="$2" 'BEGIN { exit !(x < b) }'; }
kill_agg() {
    kill -KILL "$FED_AGG_PID" 2>/dev/null || true
    wait "$FED_AGG_PID" 2>/dev/null || true
}

fed_start_aggregator "$D"
for r in "${REGIONS[@]}"; do fed_start_worker "$D" "$r"; done
fed_wait_rounds "$D" 1 120 || fail "the first round did not complete"

# --- 1. aggregator restarts ---------------------------------------------------
# Killed at three points of the advertise phase (0.5-1.1 s after a round
# completed: eu-west and us-east in their long-poll, ap-south training);
# each time, measured from the restart: the next completed round, and every
# worker back in the protocol (a new "round done" in its log).
count_done() { grep -c 'msg="round done"' "$D/logs/worker-$1.log" || true; }
for offset in 0.5 0.8 1.1; do
    n=$(fed_rounds_completed "$D")
    fed_wait_rounds "$D" $((n + 1)) 120 || fail "no round to start from"
    sleep "$offset"
    kill_agg
    declare -A before=()
    for r in "${REGIONS[@]}"; do before[$r]=$(count_done "$r"); done
    done_before=$(fed_rounds_completed "$D")
    fed_start_aggregator "$D"
    t0=$(now)
    fed_wait_rounds "$D" $((done_before + 1)) 120 ||
        fail "no round completed within 120 s of the restart"
    t_round=$(since "$t0")
    for r in "${REGIONS[@]}"; do
        wait_count "$D/logs/worker-$r.log" 'msg="round done"' $((${before[$r]} + 1)) 120
    done
    t_back=$(since "$t0")
    echo "aggregator killed ${offset} s after a round: next round ${t_round} s after the" \
        "restart, every worker back ${t_back} s after it"
    under "$t_round" "$RESTART_BOUND_S" ||
        fail "the next round took ${t_round} s after the restart (bound ${RESTART_BOUND_S} s)"
    under "$t_back" "$RESTART_BOUND_S" ||
        fail "the workers took ${t_back} s to come back (bound ${RESTART_BOUND_S} s)"
done
echo "  $(round_line "$(fed_rounds_completed "$D")")"
for r in "${REGIONS[@]}"; do
    grep -q 'reason="stateless reset' "$D/logs/worker-$r.log" ||
        fail "$r saw no stateless reset: how did it learn of the restart?"
done

# --- 2. a worker restarts -----------------------------------------------------
# The other two go on without it (min_regions 2); the restarted worker must
# take part in the attempt in flight (resumed from its saved state) or, at
# the latest, in the first attempt that opens after it started.
victim=us-east
vlog="$D/logs/worker-$victim.log"
closed=$(grep -c 'msg="phase closed" .*phase=shares' "$agg" || true)
wait_count "$agg" 'msg="phase closed" .*phase=shares' $((closed + 1)) 120
done_before=$(grep -c 'msg="round done"' "$vlog" || true)
kill_worker "$victim"
fed_start_worker "$D" "$victim"
t0=$(now)
wait_count "$vlog" 'msg="round done"' $((done_before + 1)) 120
took=$(since "$t0")
joined=$(grep 'msg="round done"' "$vlog" | sed -n "$((done_before + 1))p" |
    sed -n 's/.* round=\([0-9]*\) .*/\1/p')
started=$(grep 'msg="worker started"' "$vlog" | tail -1 | cut -d' ' -f1)
next_open=$(awk -v t="$started" '$1 > t && /msg="round attempt opened"/' "$agg" | head -1 |
    sed -n 's/.* round=\([0-9]*\) .*/\1/p')
echo "worker $victim restarted: took part in round $joined ${took} s later" \
    "(first attempt opened after its start: round ${next_open:-none yet})"
[ -n "$joined" ] || fail "no round number in $victim's log"
[ -z "$next_open" ] || [ "$joined" -le "$next_open" ] ||
    fail "$victim skipped round $next_open, the first attempt after its restart"
grep "msg=\"round completed\" .* round=$joined " "$agg" | tail -1 | grep -q 'participants=3 ' ||
    fail "round $joined completed without $victim"
under "$took" "$WORKER_BOUND_S" ||
    fail "$victim took ${took} s to take part again (bound ${WORKER_BOUND_S} s)"

fed_stop_all
check_audit_and_versions
echo "PASS"
