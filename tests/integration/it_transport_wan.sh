#!/usr/bin/env bash
# HTTP/3 through the UDP impairment relay (tests/tools/relay), the WAN
# profiles of tests/tools/relay/README.md; every transfer must arrive intact
# (SHA-256):
#   wan80     80 ms RTT, 1 % random loss
#   wan220    220 ms RTT, 2 % bursty loss, reordering
#   corrupt3  3 % of datagrams with a flipped bit
#   blackhole 2 s of total loss in the middle of a 100 MB transfer
# BBR2 carries the larger transfers on the lossy paths (CUBIC backs off to
# ~0.3 MB/s at 1 % random loss and 80 ms, as loss-based control must), CUBIC
# a smaller one on each, so both controllers are exercised.
# Both ends pin Internet-sized datagrams (--udp-payload 1452: discovery up to
# 1452 bytes, announced to the peer): the relay listens on loopback, whose
# 65536-byte MTU would otherwise give 64 KB datagrams, and the profiles' loss
# rates are per datagram (2 % of 64 KB datagrams is not the emulated path).
set -euo pipefail

: "${FA_BIN:?FA_BIN (build/bin) must be set}" "${FA_SRC:?FA_SRC must be set}"
H3="$FA_BIN/fedagg-h3"
RELAY="$FA_BIN/fedagg-relay"
[ -x "$RELAY" ] || { echo "FAIL: $RELAY not built" >&2; exit 1; }
tmp=$(mktemp -d /tmp/fa_it_transport_wan.XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; for l in "$tmp"/*.log; do [ -f "$l" ] && tail -5 "$l" | sed "s|^|  $(basename "$l"): |" >&2; done; exit 1; }

bash "$FA_SRC/deploy/pki.sh" "$tmp/pki" --regions eu-west >/dev/null
pki="$tmp/pki"
cargs=(--name localhost --ca "$pki/ca.crt" --cert "$pki/client-eu-west.crt" --key "$pki/client-eu-west.key" --timeout-ms 120000 --udp-payload 1452)

wait_file() { for _ in $(seq 200); do [ -s "$1" ] && return 0; sleep 0.05; done; fail "no $1"; }

start_server() { # name cc
    "$H3" serve --listen 127.0.0.1:0 --cert "$pki/server.crt" --key "$pki/server.key" \
        --ca "$pki/ca.crt" --cc "$2" --udp-payload 1452 --port-file "$tmp/$1.port" 2>"$tmp/$1.log" &
    pids+=("$!")
    wait_file "$tmp/$1.port"
}
start_server cubic cubic
start_server bbr2 bbr2

field() { sed -n "s/.*\"$1\":\"\\{0,1\\}\([^\",}]*\).*/\1/p" | head -1; }

# reference SHA-256 of /gen/N, fetched straight from the server
declare -A ref
reference() {
    local out
    out=$("$H3" get --server "127.0.0.1:$(cat "$tmp/cubic.port")" "${cargs[@]}" "/gen/$1") ||
        fail "reference /gen/$1: $out"
    ref[$1]=$(echo "$out" | field sha256)
}

# through SERVER (cubic|bbr2) and a relay with ARGS: "down N" or "up N"
through() { # label server direction size relay-args...
    local label=$1 server=$2 dir=$3 size=$4
    shift 4
    rm -f "$tmp/relay.port"
    "$RELAY" --listen 127.0.0.1:0 --upstream "127.0.0.1:$(cat "$tmp/$server.port")" --seed 7 \
        --port-file "$tmp/relay.port" "$@" 2>"$tmp/relay.log" &
    local relay=$!
    pids+=("$relay")
    wait_file "$tmp/relay.port"
    local rport out
    rport=$(cat "$tmp/relay.port")
    if [ "$dir" = down ]; then
        out=$("$H3" get --server "127.0.0.1:$rport" "${cargs[@]}" "/gen/$size") ||
            fail "$label: $out"
        [ "$(echo "$out" | field sha256)" = "${ref[$size]}" ] || fail "$label: SHA-256 differs: $out"
    else
        out=$("$H3" post --server "127.0.0.1:$rport" "${cargs[@]}" --cc "$server" --gen "$size" /upload) ||
            fail "$label: $out"
        local sent got
        sent=$(echo "$out" | field sha256)
        got=$(echo "$out" | sed 's/.*"response"://' | field sha256)
        [ -n "$sent" ] && [ "$sent" = "$got" ] || fail "$label: server's SHA-256 differs: $out"
    fi
    echo "$out" | grep -q '"status":200' || fail "$label: $out"
    kill -TERM "$relay"
    wait "$relay" || true
    stats=$(grep 'relay stopped' "$tmp/relay.log" | tail -1)
    echo "ok: $label ($dir $size, $server): $(echo "$out" | grep -o '"seconds":[0-9.]*'), relay: $(echo "$stats" | grep -o 's2c_dropped=[0-9]*\|c2s_dropped=[0-9]*\|s2c_corrupted=[0-9]*\|c2s_corrupted=[0-9]*\|s2c_reordered=[0-9]*\|s2c_dropped_blackhole=[0-9]*' | tr '\n' ' ')"
    last_stats=$stats
}
stat_of() { echo "$last_stats" | grep -o " $1=[0-9]*" | cut -d= -f2; }

for s in 1048576 5242880 10485760 52428800 104857600; do reference "$s"; done

through wan80 bbr2 down 10485760 --profile wan80
[ "$(stat_of s2c_dropped)" -gt 0 ] || fail "wan80: the relay dropped nothing"
through wan80 bbr2 up 10485760 --profile wan80
through wan80 cubic down 1048576 --profile wan80

through wan220 bbr2 down 5242880 --profile wan220
[ "$(stat_of s2c_reordered)" -gt 0 ] || fail "wan220: nothing was reordered"
through wan220 bbr2 up 5242880 --profile wan220
through wan220 cubic down 1048576 --profile wan220

through corrupt3 cubic down 52428800 --profile corrupt3
[ "$(stat_of s2c_corrupted)" -gt 0 ] || fail "corrupt3: nothing was corrupted"
through corrupt3 cubic up 10485760 --profile corrupt3

# 100 MB at 40 MB/s takes 2.5 s; the path goes dark from 1.0 s to 3.0 s
through blackhole cubic down 104857600 --rate 40M --blackhole 1.0:2.0 --t0 first-packet
[ "$(stat_of s2c_dropped_blackhole)" -gt 0 ] || fail "blackhole: nothing fell into it"
# and no connection went beyond Internet-sized datagrams
n=$(cat "$tmp/cubic.log" "$tmp/bbr2.log" | grep -c 'msg="connection established"') || true
[ "$n" -ge 14 ] || fail "only $n connections in the servers' logs"
if cat "$tmp/cubic.log" "$tmp/bbr2.log" | grep 'msg="connection established"' |
    grep -Eqv 'udp_payload=(1[23][0-9][0-9]|14[0-4][0-9]|145[0-2])( |$)'; then
    fail "datagrams above 1452 bytes: $(grep -h 'connection established' "$tmp"/*.log | head -3)"
fi
echo "PASS"
