#!/usr/bin/env bash
# soak.sh - a federation under faults for a bounded time (docs/history.md,
# "Recovery").
#
#   tests/soak/soak.sh [BUILD_DIR]      (make soak; FA_BIN may be set instead)
#
# An aggregator and 3 workers (the built-in trainer, short rounds), every
# worker behind its own UDP impairment relay (tests/tools/relay: delay,
# jitter, loss, reordering; a different mix per region).  For SOAK_SECONDS
# (default 180) a fault every 1-6 s, drawn from a seeded stream:
#   - the aggregator SIGKILLed, restarted at once or after up to 2 s
#     (same address, same static secret);
#   - a worker SIGKILLed, restarted after up to 2 s;
#   - a relay's path blackholed for 3 s (SIGUSR2), everything dropped.
# Then no more faults, and it passes when:
#   - rounds go on: SOAK_AFTER_ROUNDS (3) rounds complete after the last
#     fault, within SOAK_TAIL_S (180) s;
#   - no process died on its own: every one not killed by the soak is alive
#     throughout, and each exits 0 on SIGTERM at the end (SOAK_QUICK_STOP=1:
#     the aggregator is SIGKILLed instead; its drain can wait up to 30 s
#     for requests of workers killed in the last minute);
#   - no log holds a fatal line: level=error, or a sanitizer report (run it
#     on an ASan build: make soak BUILD=build-asan).  A kill explains none:
#     what a restart costs the others is logged as a warning;
#   - the audit log verifies and model versions are contiguous.
# SOAK_SEED (default: from the clock, printed) replays the same fault
# sequence; KEEP=1 keeps the directory.  Prints one summary line:
#   soak: PASS seconds=... faults=... (agg=... worker=... blackhole=...) rounds=...
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export FA_SRC=${FA_SRC:-$(cd "$here/../.." && pwd)}
if [ -z "${FA_BIN:-}" ]; then
    FA_BIN=$(cd "${1:-$FA_SRC/build}" && pwd)/bin
fi
export FA_BIN
if [ ! -x "$FA_BIN/fedagg-aggregator" ] || [ ! -x "$FA_BIN/fedagg-relay" ]; then
    echo "soak: no fedagg binaries in $FA_BIN (build first)" >&2
    exit 2
fi

SOAK_SECONDS=${SOAK_SECONDS:-180}
SOAK_SEED=${SOAK_SEED:-$(date +%s)}
SOAK_AFTER_ROUNDS=${SOAK_AFTER_ROUNDS:-3}
SOAK_TAIL_S=${SOAK_TAIL_S:-180}
# shellcheck source=tests/integration/fedtest.sh
source "$FA_SRC/tests/integration/fedtest.sh"
RANDOM=$SOAK_SEED
echo "soak: ${SOAK_SECONDS} s of faults, seed $SOAK_SEED, in $D (KEEP=1 keeps it)"

# Internet-sized datagrams through the relays (as it_fed_wan.sh).
quic="quic { max_udp_payload_size: 1452 }"
FED_AGG_EXTRA="$quic" fed_test_config 100000
declare -A relay_args=(
    [eu-west]="--delay 5ms --jitter 2ms --loss 0.5%"
    [us-east]="--delay 20ms --jitter 5ms --jitter-reorder --loss 1%"
    [ap-south]="--delay 40ms --burst-loss 2%:3 --reorder 1%:15ms --duplicate 0.5%"
)
declare -A relay_pid=()
i=0
for r in "${REGIONS[@]}"; do
    i=$((i + 1))
    # shellcheck disable=SC2086 # the impairment flags are words
    "$FA_BIN/fedagg-relay" --listen 127.0.0.1:0 --upstream "127.0.0.1:$PORT" \
        ${relay_args[$r]} --signal-blackhole 3s --seed "$((SOAK_SEED % 100000 * 3 + i))" \
        --port-file "$D/relay-$r.port" >"$D/logs/relay-$r.log" 2>&1 &
    relay_pid[$r]=$!
    FED_PIDS+=("$!")
done
for r in "${REGIONS[@]}"; do
    for _ in $(seq 1 100); do [ -s "$D/relay-$r.port" ] && break; sleep 0.05; done
    [ -s "$D/relay-$r.port" ] || fail "the relay of $r did not start"
    fed_write_worker "$D" "$r" "$(cat "$D/relay-$r.port")" "$ALL" "$quic"
done

fed_start_aggregator "$D"
for r in "${REGIONS[@]}"; do fed_start_worker "$D" "$r"; done
fed_wait_rounds "$D" 1 180 || fail "the first round did not complete"

# --- liveness: only the soak kills ------------------------------------------
# alive NAME PID : fails when PID exited although nobody killed it.
alive() {
    if ! kill -0 "$2" 2>/dev/null; then
        local st=0
        wait "$2" 2>/dev/null || st=$?
        fail "$1 (pid $2) died on its own (exit status $st); see its log"
    fi
}
check_alive() {
    alive aggregator "$FED_AGG_PID"
    for r in "${REGIONS[@]}"; do
        alive "worker $r" "$(fed_worker_pid "$r")"
        alive "relay $r" "${relay_pid[$r]}"
    done
}
kill_agg() {
    kill -KILL "$FED_AGG_PID" 2>/dev/null || true
    wait "$FED_AGG_PID" 2>/dev/null || true
}
# a random pause of 0..MAX_MS ms
pause_ms() { sleep "$(awk -v m="$((RANDOM % ($1 + 1)))" 'BEGIN { printf "%.3f", m / 1000 }')"; }

# --- faults -------------------------------------------------------------------
n_agg=0 n_worker=0 n_hole=0
start=$SECONDS
while [ $((SECONDS - start)) -lt "$SOAK_SECONDS" ]; do
    pause_ms 5000
    sleep 1
    check_alive
    roll=$((RANDOM % 10))
    if [ "$roll" -lt 4 ]; then
        kill_agg
        n_agg=$((n_agg + 1))
        [ $((RANDOM % 2)) = 0 ] || pause_ms 2000
        fed_start_aggregator "$D"
        echo "soak: $((SECONDS - start)) s: aggregator killed and restarted ($(fed_rounds_completed "$D") rounds so far)"
    elif [ "$roll" -lt 8 ]; then
        r=${REGIONS[$((RANDOM % ${#REGIONS[@]}))]}
        kill_worker "$r"
        n_worker=$((n_worker + 1))
        pause_ms 2000
        fed_start_worker "$D" "$r"
        echo "soak: $((SECONDS - start)) s: worker $r killed and restarted"
    else
        r=${REGIONS[$((RANDOM % ${#REGIONS[@]}))]}
        kill -USR2 "${relay_pid[$r]}"
        n_hole=$((n_hole + 1))
        echo "soak: $((SECONDS - start)) s: the path of $r blackholed for 3 s"
    fi
done
faults=$((n_agg + n_worker + n_hole))
rounds_at_last=$(fed_rounds_completed "$D")
echo "soak: faults over: $faults ($n_agg aggregator, $n_worker worker, $n_hole blackholes)," \
    "$rounds_at_last rounds; waiting for $SOAK_AFTER_ROUNDS more"

# --- rounds go on -------------------------------------------------------------
t_last=$SECONDS
fed_wait_rounds "$D" $((rounds_at_last + SOAK_AFTER_ROUNDS)) "$SOAK_TAIL_S" ||
    fail "rounds did not go on after the faults: $(fed_rounds_completed "$D") of $((rounds_at_last + SOAK_AFTER_ROUNDS))"
tail_s=$((SECONDS - t_last))
check_alive

# --- a clean stop: every process exits 0 on SIGTERM -------------------------
# The aggregator first: its drain answers the long-polls it holds (503:
# retry) and lets the uploads in flight finish while the workers still read
# them; workers stopped first would leave their requests open on the
# aggregator until its drain timeout (30 s).
stop_clean() {
    local name=$1 pid=$2 st=0
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || st=$?
    [ "$st" = 0 ] || fail "$name (pid $pid) exited with status $st on SIGTERM"
}
t_stop=$SECONDS
if [ "${SOAK_QUICK_STOP:-0}" = 1 ]; then
    kill_agg # the short version: no drain of requests whose worker was killed
else
    stop_clean aggregator "$FED_AGG_PID"
fi
for r in "${REGIONS[@]}"; do stop_clean "worker $r" "$(fed_worker_pid "$r")"; done
for r in "${REGIONS[@]}"; do stop_clean "relay $r" "${relay_pid[$r]}"; done
FED_PIDS=()
echo "soak: the processes exited 0 on SIGTERM (in $((SECONDS - t_stop)) s)"

# --- no fatal line ------------------------------------------------------------
bad=$(grep -H -E 'level=(error|fatal)|AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|ThreadSanitizer|runtime error:' \
    "$D"/logs/aggregator.log "$D"/logs/worker-*.log "$D"/logs/relay-*.log || true)
[ -z "$bad" ] || fail "fatal lines in the logs:
$(echo "$bad" | head -20)"

check_audit_and_versions
rounds=$(fed_rounds_completed "$D")
echo "soak: PASS seconds=$SOAK_SECONDS seed=$SOAK_SEED faults=$faults (agg=$n_agg worker=$n_worker" \
    "blackhole=$n_hole) rounds=$rounds after_last_fault=$((rounds - rounds_at_last)) in ${tail_s} s"
