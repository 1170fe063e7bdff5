#!/usr/bin/env bash
# A worker SIGKILLed in each phase of a round.  Three regions, threshold 2:
#  - killed before advertising, before sharing keys, before or in the middle
#    of its masked upload: the round completes with the other two (its
#    partial upload is removed from the sum exactly);
#  - killed after its upload (before the consistency check or unmasking):
#    the round completes and its update is in the sum (3 participants);
#  - two workers killed before uploading: the attempt falls below the
#    threshold and is aborted; once they are back the next attempt succeeds.
# The audit log verifies afterwards and model versions are contiguous.
source "$FA_SRC/tests/integration/fedtest.sh"
fed_need_test_hooks

fed_test_config 20
fed_start_aggregator "$D"
fed_start_worker "$D" eu-west
fed_start_worker "$D" us-east
victim=ap-south
vlog="$D/logs/worker-$victim.log"
agg="$D/logs/aggregator.log"

n=0
for fp in worker-before-advertise:2 worker-before-shares:2 worker-before-masked:2 \
    worker-mid-masked:2 worker-before-consistency:3 worker-before-unmask:3; do
    name=${fp%:*}
    want=${fp#*:}
    n=$((n + 1))
    done_before=$(fed_rounds_completed "$D")
    start_worker_fp "$victim" "$name"
    wait_count "$vlog" "failpoint=$name" 1 120
    kill_worker "$victim"
    echo "killed $victim at $name"
    fed_wait_rounds "$D" $((done_before + 1)) 120 || fail "no round completed after $name"
    # The round the victim died in is the last completed one.
    line=$(round_line $((done_before + 1)))
    echo "  $line"
    echo "$line" | grep -q "participants=$want " || fail "after $name: expected $want participants"
done
grep -q 'msg="partial masked upload removed from the sum" .*region=ap-south' "$agg" ||
    fail "the partial upload was not removed"

# Below threshold: two of three regions die before uploading.
done_before=$(fed_rounds_completed "$D")
aborted_before=$(grep -c 'msg="round attempt aborted"' "$agg" || true)
kill_worker us-east
start_worker_fp us-east worker-before-masked
start_worker_fp "$victim" worker-before-masked
wait_count "$D/logs/worker-us-east.log" 'failpoint=worker-before-masked' 1 120
wait_count "$vlog" 'failpoint=worker-before-masked' 2 120
kill_worker us-east
kill_worker "$victim"
wait_count "$agg" 'msg="round attempt aborted"' $((aborted_before + 1)) 120
echo "  $(grep 'msg="round attempt aborted"' "$agg" | tail -1)"
[ "$(fed_rounds_completed "$D")" = "$done_before" ] || fail "a round completed below threshold"
fed_start_worker "$D" us-east
fed_start_worker "$D" "$victim"
fed_wait_rounds "$D" $((done_before + 1)) 120 || fail "the next attempt did not succeed"
line=$(round_line $((done_before + 1)))
echo "  $line"
echo "$line" | grep -q 'attempt=[1-9]' || fail "the round should have completed in a later attempt"

# SIGTERM stops a worker promptly, even in a long-poll, with exit status 0.
pid=$(fed_worker_pid eu-west)
kill -TERM "$pid"
for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
! kill -0 "$pid" 2>/dev/null || fail "the worker ignored SIGTERM for 5 s"
status=0
wait "$pid" || status=$?
[ "$status" = 0 ] || fail "the worker exited with status $status after SIGTERM"
fed_stop_all
check_audit_and_versions
echo "PASS"
