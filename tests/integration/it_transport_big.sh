#!/usr/bin/env bash
# Bodies larger than 4 GiB, both ways, SHA-256 checked at the far end: no
# 32-bit length or offset anywhere on the path (content-length, flow-control
# credit, body queues), and the connection goes through QUIC key updates
# (the client forces one every 512 MiB).  About 9 GB cross loopback.
# FA_TEST_BIG_BYTES overrides the size (e.g. for a quick local run).
set -euo pipefail

: "${FA_BIN:?FA_BIN (build/bin) must be set}" "${FA_SRC:?FA_SRC must be set}"
H3="$FA_BIN/fedagg-h3"
n=${FA_TEST_BIG_BYTES:-4617089843} # 4.3 GiB, > 2^32
tmp=$(mktemp -d /tmp/fa_it_transport_big.XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; [ -f "$tmp/srv.log" ] && sed 's/^/  server: /' "$tmp/srv.log" >&2; exit 1; }
field() { sed -n "s/.*\"$1\":\"\\{0,1\\}\([^\",}]*\).*/\1/p" | head -1; }

bash "$FA_SRC/deploy/pki.sh" "$tmp/pki" --regions eu-west >/dev/null
pki="$tmp/pki"
"$H3" serve --listen 127.0.0.1:0 --cert "$pki/server.crt" --key "$pki/server.key" \
    --ca "$pki/ca.crt" --port-file "$tmp/port" 2>"$tmp/srv.log" &
pids+=("$!")
for _ in $(seq 100); do [ -s "$tmp/port" ] && break; sleep 0.05; done
[ -s "$tmp/port" ] || fail "server did not start"
cargs=(--server "127.0.0.1:$(cat "$tmp/port")" --name localhost --ca "$pki/ca.crt"
    --cert "$pki/client-eu-west.crt" --key "$pki/client-eu-west.key" --timeout-ms 600000 --key-update "${FA_TEST_KEY_UPDATE:-512M}")

want=$("$H3" gensha "$n")
out=$("$H3" get "${cargs[@]}" "/gen/$n") || fail "download: $out"
[ "$(echo "$out" | field bytes)" = "$n" ] || fail "download size: $out"
[ "$(echo "$out" | field sha256)" = "$want" ] || fail "download SHA-256 differs: $out"
echo "$out" | grep -q '"key_updates":[1-9]' || fail "no key update: $out"
echo "ok: downloaded $n bytes, SHA-256 matches: $out"

out=$("$H3" post "${cargs[@]}" --gen "$n" /upload) || fail "upload: $out"
sent=$(echo "$out" | field sha256)
got=$(echo "$out" | sed 's/.*"response"://' | field sha256)
[ "$sent" = "$want" ] && [ "$got" = "$want" ] || fail "upload SHA-256 differs: $out"
echo "$out" | sed 's/.*"response"://' | grep -q "\"bytes\":$n" || fail "server counted: $out"
echo "$out" | grep -q '"key_updates":[1-9]' || fail "no key update: $out"
echo "ok: uploaded $n bytes, the server's SHA-256 matches: $out"
echo "PASS"
