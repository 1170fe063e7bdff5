#!/usr/bin/env bash
# A client waiting in a long-poll when its server dies (SIGKILL) and a new one
# takes the same port with the same static secret, at the default 60 s idle
# timeout: the client's keep-alive PINGs (40-byte packets) reach the new
# process, which answers with a stateless reset one byte shorter (RFC 9000
# 10.3); the client verifies it, reconnects at once and sends the request
# again, which the new server answers.  Before, nothing answered a packet
# that small, and the client learnt only at the idle timeout.
# Then the same with the PINGs turned off (FEDAGG_QUIC_KEEPALIVE_MS=0) and a
# 3 s idle timeout: the client learns at the idle timeout, which is what the
# PINGs save.
set -euo pipefail

: "${FA_BIN:?FA_BIN (build/bin) must be set}" "${FA_SRC:?FA_SRC must be set}"
H3="$FA_BIN/fedagg-h3"
BOUND_S=${BOUND_S:-10} # after the restart; the new server answers after 2 s
tmp=$(mktemp -d /tmp/fa_it_transport_longpoll.XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
    echo "FAIL: $*" >&2
    for l in "$tmp"/*.log "$tmp"/*.out; do [ -f "$l" ] && sed "s|^|  $(basename "$l"): |" "$l" >&2; done
    exit 1
}

bash "$FA_SRC/deploy/pki.sh" "$tmp/pki" --regions eu-west >/dev/null
pki="$tmp/pki"
common=(--cert "$pki/server.crt" --key "$pki/server.key" --ca "$pki/ca.crt" --secret-file "$tmp/quic.secret")
cargs=(--name localhost --ca "$pki/ca.crt" --cert "$pki/client-eu-west.crt" --key "$pki/client-eu-west.key")
wait_port() { for _ in $(seq 100); do [ -s "$1" ] && return 0; sleep 0.05; done; fail "no port file $1"; }
now() { echo "$EPOCHREALTIME"; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }

# run NAME IDLE_MS : a long-poll of 2 s on a server killed 1 s into it and
# replaced; prints the seconds from the restart to the response.
run() {
    local name=$1 idle=$2 a b cl t0
    "$H3" serve --listen 127.0.0.1:0 --port-file "$tmp/$name-a.port" --idle-ms "$idle" \
        "${common[@]}" 2>"$tmp/$name-a.log" &
    a=$!
    pids+=("$a")
    wait_port "$tmp/$name-a.port"
    local port
    port=$(cat "$tmp/$name-a.port")
    "$H3" get --server "127.0.0.1:$port" "${cargs[@]}" --idle-ms "$idle" --timeout-ms 90000 \
        --idempotent "/wait?ms=2000" >"$tmp/$name-client.out" 2>"$tmp/$name-client.log" &
    cl=$!
    pids+=("$cl")
    sleep 1
    kill -9 "$a"
    wait "$a" 2>/dev/null || true
    "$H3" serve --listen "127.0.0.1:$port" --port-file "$tmp/$name-b.port" --idle-ms "$idle" \
        "${common[@]}" 2>"$tmp/$name-b.log" &
    b=$!
    pids+=("$b")
    t0=$(now)
    wait_port "$tmp/$name-b.port"
    wait "$cl" || fail "$name: the client failed"
    since "$t0"
    grep -q '"status":200' "$tmp/$name-client.out" || fail "$name: no 200"
    grep -q '"connects":2' "$tmp/$name-client.out" || fail "$name: the client did not reconnect"
    kill -TERM "$b"
    wait "$b" || fail "$name: the new server's exit status $?"
}

took=$(run pings 60000)
echo "long-poll on a restarted server (60 s idle timeout, PINGs): answered ${took} s after the restart"
awk -v x="$took" -v b="$BOUND_S" 'BEGIN { exit !(x < b) }' ||
    fail "the client took ${took} s after the restart (bound ${BOUND_S} s)"
grep -q 'msg="server stopped".*resets=[1-9]' "$tmp/pings-b.log" ||
    fail "the new server sent no stateless reset"
grep -q 'request not processed by the server, sending again.*reason="stateless reset' \
    "$tmp/pings-client.log" || fail "the client did not say it saw a stateless reset"

took_off=$(FEDAGG_QUIC_KEEPALIVE_MS=0 run nopings 3000)
echo "the same without PINGs (3 s idle timeout): answered ${took_off} s after the restart"
awk -v x="$took_off" 'BEGIN { exit !(x >= 2.5) }' ||
    fail "without PINGs the client came back in ${took_off} s: before its idle timeout?"
grep -q 'request not processed by the server, sending again.*reason="idle timeout' \
    "$tmp/nopings-client.log" || fail "without PINGs: no idle timeout in the client's log"
echo "PASS"
