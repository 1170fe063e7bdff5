#!/usr/bin/env bash
# A federation under attack goes on (tests/tools/hostile, fedagg-hostile):
# while eu-west and us-east run rounds, ap-south's certificate opens 48
# round-message streams of 1 MiB (the most a message may have) that never
# end, 300 handshakes that answer Retry and fall silent come from 31
# addresses, 1,000 idle connections sit on the metrics port, and a
# CONNECTION_CLOSE without any certificate carries a forged log line.  Two more rounds complete; the
# aggregator's memory grows by at most its per-region budget of buffered
# requests (16 MiB here; before it, by 48 x 16 MiB); ap-south gets 429
# with a log line once its streams hold that; /healthz answers every probe;
# the forged line stays inside its own.
source "$FA_SRC/tests/integration/fedtest.sh"

H="$FA_BIN/fedagg-hostile"
FED_AGG_EXTRA="quic { max_buffered_request_bytes_per_identity: 16777216 }" fed_test_config 100000
fed_start_aggregator "$D"
for r in eu-west us-east; do fed_start_worker "$D" "$r"; done
fed_wait_rounds "$D" 1 240 || fail "the first round did not complete"

rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$FED_AGG_PID/status"; }
base=$(rss_kib)
rounds0=$(fed_rounds_completed "$D")

attackers=()
"$H" streams "127.0.0.1:$PORT" --ca "$D/pki/ca.crt" --cert "$D/pki/client-ap-south.crt" \
    --key "$D/pki/client-ap-south.key" --path /v1/rounds/1/0/advertise --count 48 \
    --bytes 1048575 --seconds 25 >"$D/streams.json" 2>"$D/logs/streams.err" &
attackers+=($!)
binds=127.0.0.2
for i in $(seq 1 30); do binds+=",127.0.1.$i"; done
"$H" halfopen "127.0.0.1:$PORT" --ca "$D/pki/ca.crt" --bind "$binds" --count 300 \
    --seconds 25 >"$D/halfopen.json" 2>"$D/logs/halfopen.err" &
attackers+=($!)
"$H" idle "127.0.0.1:$MPORT" --bind 127.0.0.3 --count 1000 \
    --partial $'GET /metrics HTTP/1.1\r\n' --seconds 25 >"$D/idle.json" 2>"$D/logs/idle.err" &
attackers+=($!)
"$H" close "127.0.0.1:$PORT" --ca "$D/pki/ca.crt" \
    --reason 'bye\nts=2030-01-01T00:00:00.000Z level=error msg="aggregator compromised"' \
    >"$D/close.json" 2>"$D/logs/close.err" || fail "close: $(cat "$D/logs/close.err")"

peak=$base
probes=0
start=$SECONDS
while [ "$(fed_rounds_completed "$D")" -lt $((rounds0 + 2)) ]; do
    [ $((SECONDS - start)) -lt 120 ] || fail "no two rounds under attack in 120 s"
    kill -0 "$FED_AGG_PID" 2>/dev/null || fail "the aggregator died"
    r=$(rss_kib)
    [ "$r" -gt "$peak" ] && peak=$r
    code=$(curl -s -o /dev/null --max-time 3 -w '%{http_code}' "http://127.0.0.1:$MPORT/healthz" || true)
    [ "$code" = 200 ] || fail "/healthz under attack: '$code'"
    probes=$((probes + 1))
    sleep 0.5
done
for p in "${attackers[@]}"; do wait "$p" || fail "an attacker failed: $(cat "$D"/logs/*.err)"; done
r=$(rss_kib)
[ "$r" -gt "$peak" ] && peak=$r

echo "rss base ${base} KiB, peak ${peak} KiB, probes $probes; $(cat "$D/streams.json")"
# 16 MiB is ap-south's share of buffered requests; the rest is slack for the
# transport's own buffers and the round itself.  Without the budget and the
# cap on a message the streams alone held 768 MiB.
[ $((peak - base)) -lt $((160 * 1024)) ] || fail "memory grew by $(((peak - base) / 1024)) MiB"
python3 - "$D/streams.json" "$D/halfopen.json" "$D/idle.json" <<'PY' || fail "the attacks did not run"
import json, sys
s, h, i = (json.load(open(p)) for p in sys.argv[1:])
assert s["opened"] >= 48 and s["status_429"] > 0 and s["status_2xx"] == 0, s
assert h["retries"] > 0 and h["answered"] > 0, h
assert i["opened"] > 16, i
PY
grep -q 'msg="request refused: buffered request bytes over budget" proc=aggregator region=ap-south path=/v1/rounds/1/0/advertise status=429' \
    "$D/logs/aggregator.log" || fail "no log line for the refused streams"
grep -q 'reason="peer closed the connection: transport error 0x0: bye\\nts=2030-01-01T00:00:00.000Z level=error msg=\\"aggregator compromised\\""' \
    "$D/logs/aggregator.log" || fail "the forged CONNECTION_CLOSE reason is not logged escaped"
if grep -q '^ts=2030-01-01' "$D/logs/aggregator.log"; then
    fail "a forged line reached the log"
fi
check_audit_and_versions
echo "OK: $((rounds0 + 2)) rounds, memory +$(((peak - base) / 1024)) MiB under attack"
