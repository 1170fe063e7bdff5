#!/usr/bin/env bash
# Server restarts and shutdowns, process against process:
#  1. the server dies (SIGKILL) under an open connection and comes back on the
#     same port with the same static secret: the client's next packet gets a
#     stateless reset the client can verify, so it reconnects at once and its
#     request succeeds (no idle-timeout wait);
#  2. SIGTERM drains: a long-poll in flight completes, then the server exits 0.
set -euo pipefail

: "${FA_BIN:?FA_BIN (build/bin) must be set}" "${FA_SRC:?FA_SRC must be set}"
H3="$FA_BIN/fedagg-h3"
tmp=$(mktemp -d /tmp/fa_it_transport_restart.XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; for l in "$tmp"/*.log; do [ -f "$l" ] && sed "s|^|  $(basename "$l"): |" "$l" >&2; done; exit 1; }

bash "$FA_SRC/deploy/pki.sh" "$tmp/pki" --regions eu-west >/dev/null
pki="$tmp/pki"
common=(--cert "$pki/server.crt" --key "$pki/server.key" --ca "$pki/ca.crt" --secret-file "$tmp/quic.secret")
cargs=(--name localhost --ca "$pki/ca.crt" --cert "$pki/client-eu-west.crt" --key "$pki/client-eu-west.key")

wait_port() { for _ in $(seq 100); do [ -s "$1" ] && return 0; sleep 0.05; done; fail "no port file $1"; }

# --- 1. crash and restart: stateless reset ---------------------------------
"$H3" serve --listen 127.0.0.1:0 --port-file "$tmp/a.port" "${common[@]}" 2>"$tmp/a.log" &
a=$!
pids+=("$a")
wait_port "$tmp/a.port"
port=$(cat "$tmp/a.port")
[ "$(stat -c %a "$tmp/quic.secret")" = 600 ] || fail "static secret file is not 0600"

# two requests on one client, 3 s apart; the server is replaced in between
"$H3" get --server "127.0.0.1:$port" "${cargs[@]}" --count 2 --pause-ms 3000 \
    --ready-file "$tmp/first.done" --idle-ms 30000 --timeout-ms 20000 /whoami >"$tmp/client.out" 2>"$tmp/client.log" &
cl=$!
pids+=("$cl")
for _ in $(seq 100); do [ -e "$tmp/first.done" ] && break; sleep 0.05; done
[ -e "$tmp/first.done" ] || fail "first request did not complete"
kill -9 "$a"
wait "$a" 2>/dev/null || true
"$H3" serve --listen "127.0.0.1:$port" --port-file "$tmp/b.port" "${common[@]}" 2>"$tmp/b.log" &
b=$!
pids+=("$b")
wait_port "$tmp/b.port"
wait "$cl" || fail "client failed: $(cat "$tmp/client.out")"
[ "$(grep -c '"status":200' "$tmp/client.out")" = 2 ] || fail "client: $(cat "$tmp/client.out")"
tail -1 "$tmp/client.out" | grep -q '"connects":2' || fail "client did not reconnect: $(cat "$tmp/client.out")"
kill -TERM "$b"
wait "$b" || fail "restarted server exit status $?"
grep -q 'msg="server stopped".*resets=[1-9]' "$tmp/b.log" || fail "the restarted server sent no stateless reset"
grep -q 'stateless reset\|request not processed by the server, sending again' "$tmp/client.log" ||
    fail "client did not say why it reconnected: $(cat "$tmp/client.log")"
echo "ok: after a crash and restart (same secret) the client verified a stateless reset and reconnected"

# --- 2. SIGTERM drains --------------------------------------------------------
"$H3" serve --listen 127.0.0.1:0 --port-file "$tmp/c.port" "${common[@]}" 2>"$tmp/c.log" &
c=$!
pids+=("$c")
wait_port "$tmp/c.port"
cport=$(cat "$tmp/c.port")
"$H3" get --server "127.0.0.1:$cport" "${cargs[@]}" --timeout-ms 20000 "/wait?ms=1500" >"$tmp/poll.out" 2>&1 &
poll=$!
pids+=("$poll")
sleep 0.5
kill -TERM "$c"
wait "$poll" || fail "long-poll failed during drain: $(cat "$tmp/poll.out")"
grep -q '"status":200' "$tmp/poll.out" || fail "long-poll: $(cat "$tmp/poll.out")"
wait "$c" || fail "drained server exit status $?"
grep -q 'msg="signal received, draining"' "$tmp/c.log" || fail "no drain log line"
echo "ok: SIGTERM drained: the long-poll in flight completed, then the server exited 0"
echo "PASS"
