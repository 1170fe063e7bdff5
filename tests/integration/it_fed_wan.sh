#!/usr/bin/env bash
# Rounds across a bad WAN: every worker reaches the aggregator through the
# UDP impairment relay with the wan220 profile (220 ms RTT, 2 % bursty loss,
# reordering).  Two rounds complete with all three regions, proofs verify,
# and the audit log verifies.
# Phase deadlines long enough for the slowest region behind the relay
# (set before fedtest.sh, which writes them into the round policy).
export FED_ADVERTISE_MS=30000 FED_PHASE_MS=30000
source "$FA_SRC/tests/integration/fedtest.sh"
# Internet-sized datagrams: the relay listens on loopback, whose 65536-byte
# MTU would otherwise give both ends 64 KB datagrams, and its loss model
# drops whole datagrams (2 % of 64 KB ones is not the profile's path).
# 1452 = path MTU discovery up to 1452 bytes, announced to the peer too.
quic="quic { max_udp_payload_size: 1452 }"
FED_AGG_EXTRA="$quic" fed_test_config 2
"$FA_BIN/fedagg-relay" --listen 127.0.0.1:0 --upstream "127.0.0.1:$PORT" --profile wan220 \
    --seed 11 --port-file "$D/relay.port" >"$D/logs/relay.log" 2>&1 &
relay=$!
FED_PIDS+=("$relay")
for _ in $(seq 1 100); do [ -s "$D/relay.port" ] && break; sleep 0.05; done
[ -s "$D/relay.port" ] || fail "the relay did not start"
rport=$(cat "$D/relay.port")
for r in "${REGIONS[@]}"; do
    fed_write_worker "$D" "$r" "$rport" "$ALL" "$quic"
done
fed_start_aggregator "$D"
for r in "${REGIONS[@]}"; do fed_start_worker "$D" "$r"; done
fed_wait_rounds "$D" 2 400 || fail "rounds did not complete through the relay"
for n in 1 2; do
    round_line "$n" | grep -q 'participants=3 ' || fail "round $n: $(round_line "$n")"
done
for r in "${REGIONS[@]}"; do
    wait_count "$D/logs/worker-$r.log" 'msg="round done".*proof=verified' 2 60
done
kill -TERM "$relay"
wait "$relay" 2>/dev/null || true
grep 'relay stopped' "$D/logs/relay.log" | head -1
grep -q 's2c_dropped=[1-9]' "$D/logs/relay.log" || fail "the relay dropped nothing"
# every connection through the relay used Internet-sized datagrams
grep 'msg="connection established"' "$D/logs/aggregator.log" | grep -q . ||
    fail "no connection in the aggregator's log"
if grep 'msg="connection established"' "$D/logs/aggregator.log" |
    grep -Eqv 'udp_payload=(1[23][0-9][0-9]|14[0-4][0-9]|145[0-2])( |$)'; then
    fail "datagrams above 1452 bytes through the relay: $(grep 'connection established' "$D/logs/aggregator.log" | head -3)"
fi
fed_stop_all
check_audit_and_versions
echo "PASS"
