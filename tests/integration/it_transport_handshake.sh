#!/usr/bin/env bash
# Handshake policy, process against process: every refusal leaves one clear
# log line on the side that refused; identities reach the handler; Retry.
set -euo pipefail

: "${FA_BIN:?FA_BIN (build/bin) must be set}" "${FA_SRC:?FA_SRC must be set}"
H3="$FA_BIN/fedagg-h3"
tmp=$(mktemp -d /tmp/fa_it_transport_handshake.XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; for l in "$tmp"/*.log; do [ -f "$l" ] && sed "s|^|  $(basename "$l"): |" "$l" >&2; done; exit 1; }

bash "$FA_SRC/deploy/pki.sh" "$tmp/pki" --regions eu-west,us-east --test-extras >/dev/null
pki="$tmp/pki"

start_server() { # name extra-args...
    local name=$1
    shift
    rm -f "$tmp/$name.port"
    "$H3" serve --listen 127.0.0.1:0 --ca "$pki/ca.crt" --port-file "$tmp/$name.port" "$@" \
        2>"$tmp/$name.log" &
    pids+=("$!")
    for _ in $(seq 100); do [ -s "$tmp/$name.port" ] && return 0; sleep 0.05; done
    fail "server $name did not start"
}

# client NAME(cert base or "none") SERVERPORT [args...]: runs GET /whoami
client() {
    local who=$1 port=$2
    shift 2
    local certargs=()
    if [ "$who" != none ]; then certargs=(--cert "$pki/$who.crt" --key "$pki/$who.key"); fi
    "$H3" get --server "127.0.0.1:$port" --name localhost --ca "$pki/ca.crt" "${certargs[@]}" \
        --timeout-ms 10000 --attempts 1 "$@" /whoami
}

start_server main --cert "$pki/server.crt" --key "$pki/server.key"
port=$(cat "$tmp/main.port")

# identities from the certificate
out=$(client client-eu-west "$port") || fail "eu-west: $out"
echo "$out" | grep -q '"status":200' || fail "eu-west: $out"
out=$(client test/client-cn-only "$port") || fail "cn-only: $out"
echo "ok: region certificates accepted"

expect_refused() { # label cert log-pattern
    local label=$1 who=$2 pattern=$3 n
    n=$(grep -c 'msg="handshake refused"' "$tmp/main.log" || true)
    if client "$who" "$port" >"$tmp/c.out" 2>"$tmp/c.err"; then
        fail "$label: the handshake succeeded"
    fi
    for _ in $(seq 50); do
        [ "$(grep -c 'msg="handshake refused"' "$tmp/main.log" || true)" -gt "$n" ] && break
        sleep 0.1
    done
    line=$(grep 'msg="handshake refused"' "$tmp/main.log" | tail -1)
    echo "$line" | grep -q "$pattern" || fail "$label: log line '$line' does not say '$pattern'"
    echo "ok: $label refused; server: $(echo "$line" | grep -o 'reason=.*')"
    echo "    client: $(head -1 "$tmp/c.err")"
}
expect_refused "no client certificate" none "client presented no certificate"
expect_refused "certificate from another CA" test/client-other-ca "issuer is unknown"
expect_refused "expired certificate" test/client-expired "expired"

# the client refuses a server whose certificate names another host
start_server wrong --cert "$pki/test/server-wrong-name.crt" --key "$pki/test/server-wrong-name.key"
wport=$(cat "$tmp/wrong.port")
if client client-eu-west "$wport" >"$tmp/c.out" 2>"$tmp/c.err"; then
    fail "server name mismatch: accepted"
fi
grep -q "does not match the name 'localhost'" "$tmp/c.err" || fail "unclear: $(cat "$tmp/c.err")"
echo "ok: server name mismatch refused; client: $(head -1 "$tmp/c.err")"
# ... and the server logs that the client refused it
for _ in $(seq 50); do grep -q 'handshake refused by the client' "$tmp/wrong.log" && break; sleep 0.1; done
grep -q 'handshake refused by the client.*bad_certificate' "$tmp/wrong.log" ||
    fail "server did not log the client's refusal"

# Retry: address validation costs one round trip, then a NEW_TOKEN skips it
start_server retry --cert "$pki/server.crt" --key "$pki/server.key" --retry always
rport=$(cat "$tmp/retry.port")
out=$(client client-us-east "$rport" --count 2) || fail "retry: $out"
[ "$(echo "$out" | grep -c '"status":200')" = 2 ] || fail "retry: $out"
echo "$out" | head -1 | grep -q '"retry_seen":1' || fail "no Retry seen: $out"
echo "ok: Retry (address validation) before the handshake"

for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
wait 2>/dev/null || true
pids=()
grep -q 'msg="server stopped".*handshakes_failed=3 retries=0' "$tmp/main.log" || fail "main server stats"
grep -q 'msg="server stopped".*retries=1' "$tmp/retry.log" || fail "retry server stats"
echo "PASS"
