#!/usr/bin/env bash
# The aggregation service SIGKILLed while both of its federations (the
# default one and one created at run time) have a round in flight, then
# started again: the service log brings the created federation back, every
# federation resumes its own round in flight, the rounds go on, every sum
# still equals the plain sum of its inputs bit for bit, and each audit log
# verifies with contiguous versions: nothing lost, nothing applied twice.
source "$FA_SRC/tests/integration/servicetest.sh"
fed_need_test_hooks # the sums and inputs dumped (FEDAGG_DEBUG_DUMP_DIR)

quic="quic { idle_timeout_ms: 6000 }"
SVC_AGG_EXTRA="$quic" svc_config 0
for r in "${REGIONS[@]}"; do
    fed_write_worker "$D" "$r" "$PORT" "$ALL" "$quic"
done
agg="$D/logs/aggregator.log"
mkdir -p "$D/dump/demo"
start_agg() {
    FEDAGG_DEBUG_DUMP_DIR="$D/dump/{federation}" fed_start_aggregator "$D"
}
start_agg
for r in "${REGIONS[@]}"; do
    FEDAGG_DEBUG_DUMP_DIR="$D/dump/demo" fed_start_worker "$D" "$r"
done
svc_fed_file beta vision 0
svc_wait_rounds demo 1 120
svc_op alice federation create "$D/beta.textproto" >/dev/null || fail "create beta"
svc_start_workers beta
svc_wait_rounds beta 2 180

# in flight: an attempt opened, or a phase before the unmask closed, since
# the last round completed, for each federation (an unmask close goes on to
# the commit: that round is as good as completed)
in_flight() {
    local f last
    for f in demo beta; do
        last=$(grep -E "msg=\"(round completed|round attempt opened|phase closed)\" proc=aggregator federation=$f " "$agg" | tail -1)
        case "$last" in *'msg="round completed"'* | *phase=unmask* | '') return 1 ;; esac
    done
}
killed=0
for _ in $(seq 1 200); do
    kill -STOP "$FED_AGG_PID"
    if in_flight; then
        kill -KILL "$FED_AGG_PID"
        wait "$FED_AGG_PID" 2>/dev/null || true
        killed=1
        break
    fi
    kill -CONT "$FED_AGG_PID"
    sleep 0.05
done
[ "$killed" = 1 ] || fail "never caught both federations with a round in flight"
declare -A at
for f in demo beta; do
    at[$f]=$(grep -E "msg=\"(round attempt opened|phase closed)\" proc=aggregator federation=$f " "$agg" |
        tail -1 | sed -E 's/.* round=([0-9]+) .*/\1/')
    echo "killed with $f in round ${at[$f]} ($(svc_rounds "$f") rounds completed)"
done
demo0=$(svc_rounds demo)
beta0=$(svc_rounds beta)
lines=$(wc -l <"$agg")
start_agg
svc_wait_rounds demo $((demo0 + 2)) 240
svc_wait_rounds beta $((beta0 + 2)) 240
# each round in flight went on where it was, and completed: not skipped,
# not applied twice
for f in demo beta; do
    after=$(tail -n +$((lines + 1)) "$agg")
    grep -qE "msg=\"(resuming the round in flight|round attempt opened)\" proc=aggregator federation=$f round=${at[$f]} " <<<"$after" ||
        fail "$f: round ${at[$f]} did not resume"
    [ "$(grep -c "msg=\"round completed\" proc=aggregator federation=$f round=${at[$f]} " "$agg")" = 1 ] ||
        fail "$f: round ${at[$f]} did not complete exactly once"
    grep "federation=$f round=${at[$f]} " <<<"$after" | grep -m1 -E 'resuming|attempt opened'
done
[ "$(grep -c 'msg="service open"' "$agg")" = 2 ] || fail "the service did not start twice"
fed_stop_all
svc_check_sums "$D/dump/demo"
svc_check_sums "$D/dump/beta"
svc_verify_log "$D/state/audit.log" --config "$D/aggregator.textproto"
svc_verify_log "$D/svc/federations/beta/audit.log"
svc_verify_log "$D/svc/service.log"
svc_check_versions "$D/state/audit.log"
svc_check_versions "$D/svc/federations/beta/audit.log"
echo "PASS"
