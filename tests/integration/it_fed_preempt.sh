#!/usr/bin/env bash
# A preemptible region (spot instance).  Three regions, one round; ap-south
# trains 40 local steps with PowerSGD (compressing from step 5 on) and gets
# SIGTERM after step 17 (FEDAGG_TEST_SIGTERM_AT_STEP: the worker signals
# itself there):
#  - it saves its local round and exits 0 within the grace;
#  - restarted, it resumes the round at step 17 and the round completes
#    with all three regions;
#  - its trained update (FEDAGG_DEBUG_DUMP_DIR) equals, bit for bit, the one
#    an uninterrupted run of the same federation with the same seeds trains;
#    so do the other regions' (the two runs are comparable);
#  - a damaged saved round is refused with the reason, and the round
#    trained afresh, to the same update;
#  - the same with the region on 2 ranks under mpirun: both ranks stop at
#    step 17, save their parts, and resume them.
# The quantised inputs themselves differ between two runs (stochastic
# rounding draws a fresh seed per attempt), so the float updates are compared.
source "$FA_SRC/tests/integration/fedtest.sh"
fed_need_test_hooks

export FED_TRAINER="local_steps: 40 batch_size: 32 learning_rate: 0.05 momentum: 0.9"
# the victim is waited for: all three must advertise for the phase to close early
export FED_ADVERTISE_MS=30000
# and the other phases tolerate a restart under mpirun on a loaded machine
export FED_PHASE_MS=20000
fed_test_config 1
victim=ap-south
fed_write_worker "$D" "$victim" "$PORT" "$ALL" \
    'compression { kind: POWERSGD powersgd_start_step: 5 }'
vlog="$D/logs/worker-$victim.log"

# run NAME [SIGTERM_STEP] : one federation of one round, dumps in $D/dump-NAME.
run() {
    local name=$1 step=${2:-} ranks=${VICTIM_RANKS:-1}
    rm -rf "$D/state" "$D"/worker-*/
    mkdir -p "$D/state" "$D/dump-$name"
    for r in "${REGIONS[@]}"; do mkdir -p "$D/worker-$r"; done
    : >"$D/logs/aggregator.log"
    for r in "${REGIONS[@]}"; do : >"$D/logs/worker-$r.log"; done
    export FEDAGG_DEBUG_DUMP_DIR="$D/dump-$name"
    fed_start_aggregator "$D"
    fed_start_worker "$D" eu-west
    fed_start_worker "$D" us-east
    if [ -n "$step" ]; then
        export FEDAGG_TEST_SIGTERM_AT_STEP=$step
        fed_start_worker "$D" "$victim" "$ranks"
        unset FEDAGG_TEST_SIGTERM_AT_STEP
        local pid status=0
        pid=$(fed_worker_pid "$victim")
        wait "$pid" || status=$?
        [ "$status" = 0 ] || fail "$name: the preempted worker exited with status $status"
        for ((r = 0; r < ranks; r++)); do
            grep -q "msg=\"local round saved to stop\".* rank=$r step=$step steps=40 " "$vlog" ||
                fail "$name: rank $r did not save at step $step"
        done
        grep -q 'msg="local round stopped by signal"' "$vlog" || fail "$name: no stop logged"
        ! grep -q 'msg="local round trained"' "$vlog" || fail "$name: it trained to the end"
        echo "$name: SIGTERM after step $step: saved, exited 0"
        ${PREEMPT_BETWEEN:-true}
        fed_start_worker "$D" "$victim" "$ranks"
    else
        fed_start_worker "$D" "$victim" "$ranks"
    fi
    fed_wait_rounds "$D" 1 90 || fail "$name: the round did not complete"
    round_line 1 | grep -q 'participants=3 ' || fail "$name: $(round_line 1)"
    for r in "${REGIONS[@]}"; do
        wait_log "$D/logs/worker-$r.log" 'msg="local round trained"' 30
    done
    fed_stop_all
}

run whole
grep -q 'resumed_at_step=-' "$vlog" || fail "whole: the uninterrupted worker resumed something"

run preempted 17
grep -q 'msg="saved local round resumed".* round=1 version=0 step=17 steps=40 ' "$vlog" ||
    fail "preempted: the restarted worker did not resume at step 17"
grep -q 'msg="local round trained".* steps=40 .*resumed_at_step=17' "$vlog" ||
    fail "preempted: $(grep 'local round trained' "$vlog")"

# A damaged saved round: one byte of the weights flipped between the stop
# and the restart.
flip() {
    python3 - "$D/worker-$victim/local-round.0" <<'PY'
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
b[len(b) // 2] ^= 0x40
open(p, "wb").write(bytes(b))
PY
}
PREEMPT_BETWEEN=flip run damaged 30
grep -q 'msg="saved local round refused; it is removed and the round is trained afresh".*digest does not match' "$vlog" ||
    fail "damaged: the flipped file was not refused as damaged"
grep -q 'msg="local round trained".*resumed_at_step=-' "$vlog" ||
    fail "damaged: the round was not trained afresh"

# Two ranks under mpirun (the victim's region trains data-parallel): both
# stop at the same step, each saves its own part, both resume it.
if command -v mpirun >/dev/null 2>&1; then
    export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_tcp_if_include=lo \
        OMPI_MCA_oob_tcp_if_include=lo
    VICTIM_RANKS=2 run whole-mpi
    VICTIM_RANKS=2 run preempted-mpi 17
    for r in 0 1; do
        grep -q "msg=\"saved local round resumed\".* rank=$r round=1 version=0 step=17 " "$vlog" ||
            fail "preempted-mpi: rank $r did not resume at step 17"
    done
    cmp -s "$D/dump-whole-mpi/delta-$victim-v0.f32" "$D/dump-preempted-mpi/delta-$victim-v0.f32" ||
        fail "2 ranks: the preempted run's update differs from the uninterrupted one"
    echo "2 ranks under mpirun: the resumed update equals the uninterrupted one bit for bit"
else
    echo "mpirun not found: the 2-rank case is left out"
fi

for r in "${REGIONS[@]}"; do
    for run in preempted damaged; do
        a="$D/dump-whole/delta-$r-v0.f32" b="$D/dump-$run/delta-$r-v0.f32"
        [ -s "$a" ] && [ -s "$b" ] || fail "no delta dumped for $r ($run)"
        cmp -s "$a" "$b" || fail "$r: the $run run's update differs from the uninterrupted one"
    done
done
echo "the resumed and the re-trained updates equal the uninterrupted ones bit for bit" \
    "($(($(stat -c %s "$D/dump-whole/delta-$victim-v0.f32") / 4)) coordinates)"
echo "PASS"
