#!/usr/bin/env bash
# Interop with HTTP/3 peers we did not write (Debian's ngtcp2 examples):
#   gtlsclient downloads from our server and uploads to it, presenting a
#   region certificate (--cert/--key); without one it is refused, and the
#   server says why in one log line;
#   our client downloads from gtlsserver (and verifies its certificate).
# SHA-256 is checked at the far end every time.
set -euo pipefail

: "${FA_BIN:?FA_BIN (build/bin) must be set}" "${FA_SRC:?FA_SRC must be set}"
H3="$FA_BIN/fedagg-h3"
for tool in gtlsclient gtlsserver; do
    command -v "$tool" >/dev/null || { echo "SKIP: $tool not installed (apt-get install ngtcp2-client ngtcp2-server)"; exit 77; }
done

tmp=$(mktemp -d /tmp/fa_it_transport_interop.XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; [ -f "$tmp/srv.log" ] && sed 's/^/  server: /' "$tmp/srv.log" >&2; exit 1; }
sha() { sha256sum "$1" | cut -d' ' -f1; }
free_port() {
    python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

bash "$FA_SRC/deploy/pki.sh" "$tmp/pki" --regions eu-west --test-extras >/dev/null
pki="$tmp/pki"
mkdir -p "$tmp/root" "$tmp/dl"
head -c 20000000 /dev/urandom >"$tmp/root/blob"
want=$(sha "$tmp/root/blob")

# --- our server, their client -------------------------------------------
"$H3" serve --listen 127.0.0.1:0 --cert "$pki/server.crt" --key "$pki/server.key" \
    --ca "$pki/ca.crt" --root "$tmp/root" --port-file "$tmp/port" 2>"$tmp/srv.log" &
srv=$!
pids+=("$srv")
for _ in $(seq 100); do [ -s "$tmp/port" ] && break; sleep 0.05; done
[ -s "$tmp/port" ] || fail "server did not start"
port=$(cat "$tmp/port")

gtls() {
    timeout 60 gtlsclient -q --exit-on-all-streams-close --download "$tmp/dl" "$@" 2>"$tmp/gtls.err" ||
        fail "gtlsclient $*: $(tail -3 "$tmp/gtls.err")"
}

# download
gtls --cert "$pki/client-eu-west.crt" --key "$pki/client-eu-west.key" \
    127.0.0.1 "$port" "https://localhost:$port/files/blob"
[ "$(sha "$tmp/dl/blob")" = "$want" ] || fail "gtlsclient download: SHA-256 differs"
echo "ok: gtlsclient downloaded 20 MB from our server, SHA-256 matches"

# upload: the server answers with the SHA-256 of what it received
gtls -m POST -d "$tmp/root/blob" --cert "$pki/client-eu-west.crt" --key "$pki/client-eu-west.key" \
    127.0.0.1 "$port" "https://localhost:$port/upload"
grep -q "\"sha256\":\"$want\"" "$tmp/dl/upload" || fail "gtlsclient upload: server saw $(cat "$tmp/dl/upload")"
grep -q '"peer":"eu-west"' "$tmp/dl/upload" || fail "upload: identity not eu-west: $(cat "$tmp/dl/upload")"
echo "ok: gtlsclient uploaded 20 MB with a region certificate, server's SHA-256 matches"

# no client certificate: refused at the handshake, with a clear log line
rm -f "$tmp/dl/blob"
timeout 30 gtlsclient -q --exit-on-all-streams-close --download "$tmp/dl" \
    127.0.0.1 "$port" "https://localhost:$port/files/blob" >/dev/null 2>&1 || true
[ ! -s "$tmp/dl/blob" ] || fail "a client without certificate got the file"
for _ in $(seq 50); do grep -q 'handshake refused' "$tmp/srv.log" && break; sleep 0.1; done
grep -q 'msg="handshake refused".*client presented no certificate' "$tmp/srv.log" ||
    fail "no clear log line for the refused handshake"
echo "ok: gtlsclient without a certificate refused: $(grep -o 'reason="[^"]*"' "$tmp/srv.log" | head -1)"

kill -TERM "$srv"
wait "$srv" || fail "server exit status $?"
grep -q 'msg="server stopped".*handshakes_failed=1' "$tmp/srv.log" || fail "server stats"

# streams per connection: at most 2 at once; 8 requests on one connection
# all complete because each finished stream gives its credit back
head -c 300000 /dev/urandom >"$tmp/root/small"
rm -f "$tmp/port"
"$H3" serve --listen 127.0.0.1:0 --cert "$pki/server.crt" --key "$pki/server.key" \
    --ca "$pki/ca.crt" --root "$tmp/root" --port-file "$tmp/port" --max-streams 2 2>"$tmp/srv.log" &
srv=$!
pids+=("$srv")
for _ in $(seq 100); do [ -s "$tmp/port" ] && break; sleep 0.05; done
port=$(cat "$tmp/port")
gtls -n 8 --cert "$pki/client-eu-west.crt" --key "$pki/client-eu-west.key" \
    127.0.0.1 "$port" "https://localhost:$port/files/small"
kill -TERM "$srv"
wait "$srv" || fail "server exit status $?"
grep -q 'msg="server stopped" accepted=1 .*requests=8' "$tmp/srv.log" || fail "8 requests on one connection: $(tail -1 "$tmp/srv.log")"
echo "ok: 8 requests through a 2-stream limit on one connection"

# --- their server, our client -------------------------------------------
mkdir -p "$tmp/htdocs"
cp "$tmp/root/blob" "$tmp/htdocs/blob"
for attempt in 1 2 3; do
    gport=$(free_port)
    gtlsserver -q -d "$tmp/htdocs" 127.0.0.1 "$gport" "$pki/server.key" "$pki/server.crt" \
        >/dev/null 2>"$tmp/gsrv.err" &
    gsrv=$!
    sleep 0.3
    kill -0 "$gsrv" 2>/dev/null && break
done
pids+=("$gsrv")
out=$("$H3" get --server "127.0.0.1:$gport" --name localhost --ca "$pki/ca.crt" \
    --cert "$pki/client-eu-west.crt" --key "$pki/client-eu-west.key" --timeout-ms 60000 \
    --out "$tmp/ours.bin" /blob) || fail "our client against gtlsserver: $out"
[ "$(sha "$tmp/ours.bin")" = "$want" ] || fail "our download from gtlsserver: SHA-256 differs"
echo "$out" | grep -q "\"sha256\":\"$want\"" || fail "client-side SHA-256: $out"
echo "ok: our client downloaded 20 MB from gtlsserver, SHA-256 matches"

# our client verifies gtlsserver's certificate: another CA is refused
if "$H3" get --server "127.0.0.1:$gport" --name localhost --ca "$pki/test/other-ca.crt" \
    --cert "$pki/client-eu-west.crt" --key "$pki/client-eu-west.key" --timeout-ms 10000 \
    /blob >"$tmp/bad.json" 2>"$tmp/bad.err"; then
    fail "our client accepted a server certificate from an unknown CA"
fi
grep -q "issuer is unknown" "$tmp/bad.err" || fail "unclear refusal: $(cat "$tmp/bad.err")"
echo "ok: our client refuses gtlsserver under the wrong CA: $(head -1 "$tmp/bad.err")"
echo "PASS"
