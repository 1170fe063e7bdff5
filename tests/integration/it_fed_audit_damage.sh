#!/usr/bin/env bash
# The audit log damaged under a running aggregator, and the way back.
#  - The LOG file is cut short while the federation runs: the aggregator
#    logs an error, /readyz fails saying why, no round opens any more, and
#    a region that asks for a record gets a 500 that names no file of the
#    server (it was "read: Success");
#  - restarted, the aggregator refuses to start and names the way out;
#  - `fedagg audit repair --store` recovers the log to its last signed
#    checkpoint that the records left still match, keeps the damaged files
#    (LOG*.damaged-<time>, byte for byte) and takes the model store back to
#    the log's version (the newer versions moved aside, not deleted);
#  - the aggregator starts again; a region that had verified the lost
#    records would raise its ALARM, as it must (the log shrank): its
#    operator resets what it trusted (docs/operations.md), it joins, rounds
#    go on and the log verifies.
source "$FA_SRC/tests/integration/fedtest.sh"

fed_test_config 0
fed_start_aggregator "$D"
for r in "${REGIONS[@]}"; do fed_start_worker "$D" "$r"; done
fed_wait_rounds "$D" 2 120 || fail "the first rounds did not complete"
agg="$D/logs/aggregator.log"
LOG="$D/state/audit.log"

# 1. Damage: the last record loses its last bytes.
size=$(stat -c %s "$LOG")
truncate -s $((size - 7)) "$LOG"
cp "$LOG" "$D/damaged-copy"
wait_log "$agg" 'level=error msg="the audit log is damaged' 20
done_at_damage=$(fed_rounds_completed "$D")
# /readyz answers from the state the server loop refreshes every 50 ms:
# the first probe may land just before that refresh.
for _ in $(seq 1 50); do
    ready=$(curl -s -o "$D/readyz.txt" -w '%{http_code}' "http://127.0.0.1:$MPORT/readyz" || true)
    [ "$ready" = 503 ] && break
    sleep 0.1
done
[ "$ready" = 503 ] || fail "/readyz answered $ready 5 s after the audit log was found damaged"
grep -q 'audit log is damaged' "$D/readyz.txt" || fail "/readyz says: $(cat "$D/readyz.txt")"
echo "ok: /readyz 503: $(head -c 160 "$D/readyz.txt")"
# A region asks for the record of the current version (it is the one cut).
version=$(grep 'msg="round completed"' "$agg" | tail -n 1 | sed 's/.* version=\([0-9]*\) .*/\1/')
out=$("$FA_BIN/fedagg-h3" get --server "127.0.0.1:$PORT" --name localhost --ca "$D/pki/ca.crt" \
    --cert "$D/pki/client-eu-west.crt" --key "$D/pki/client-eu-west.key" \
    "/v1/audit/record?version=$version" --out "$D/record-body.bin" 2>>"$D/logs/h3.log")
echo "$out" | grep -q '"status":500' || fail "record of version $version: $out"
! grep -q -- "$D" "$D/record-body.bin" || fail "the 500 names a server path"
! grep -q 'read: Success' "$D/record-body.bin" || fail "the 500 says 'read: Success'"
echo "ok: the record request -> 500 without a server path"
sleep 3
[ "$(fed_rounds_completed "$D")" = "$done_at_damage" ] || fail "rounds went on with the log damaged"
grep -q 'msg="round completed"' <(tail -n +1 "$agg" | sed -n '/the audit log is damaged/,$p') &&
    fail "a round completed after the damage was found"
echo "ok: no round after the damage ($done_at_damage completed before)"

# 2. Restarted as it is: refused, with the way out.
fed_stop_all
set +e
"$FA_BIN/fedagg-aggregator" --config "$D/aggregator.textproto" >"$D/logs/restart.log" 2>&1
status=$?
set -e
[ "$status" != 0 ] || fail "the aggregator started on a damaged log"
grep -q 'fedagg audit repair' "$D/logs/restart.log" ||
    fail "the refusal does not say what to do: $(tail -n 3 "$D/logs/restart.log")"
echo "ok: a restart refuses, naming fedagg audit repair"

# 3. Repair: a dry run changes nothing, then the repair.
"$FA_BIN/fedagg" audit repair "$LOG" --pubkey "$D/keys/aggregator.pub" --store "$D/state" \
    --dry-run >"$D/logs/repair-dry.log" 2>&1 || fail "dry run: $(cat "$D/logs/repair-dry.log")"
cmp -s "$LOG" "$D/damaged-copy" || fail "the dry run changed the log"
"$FA_BIN/fedagg" audit repair "$LOG" --pubkey "$D/keys/aggregator.pub" --store "$D/state" \
    >"$D/logs/repair.log" 2>&1 || fail "repair: $(cat "$D/logs/repair.log")"
cat "$D/logs/repair.log"
kept=$(ls "$LOG".damaged-* 2>/dev/null | head -n 1)
[ -n "$kept" ] && cmp -s "$kept" "$D/damaged-copy" || fail "the damaged log was not kept as it was"
ls "$LOG".checkpoints.damaged-* >/dev/null || fail "the damaged checkpoints were not kept"
ls -d "$D"/state/damaged-*/ >/dev/null || fail "the store's newer versions were not kept"
echo "ok: repaired; the damaged files are kept"

# 4. Back: the aggregator starts; each region is reset by its operator
# (what it trusted moved aside) and joins; rounds go on.
fed_start_aggregator "$D"
wait_log "$agg" 'msg="aggregator serving"' 60
for r in "${REGIONS[@]}"; do
    for f in audit.checkpoint audit-alarm.txt; do
        [ -f "$D/worker-$r/$f" ] && mv "$D/worker-$r/$f" "$D/worker-$r/$f.before-repair"
    done
    fed_start_worker "$D" "$r"
done
before=$(fed_rounds_completed "$D")
fed_wait_rounds "$D" $((before + 1)) 120 || fail "no round after the repair"
fed_stop_all
check_audit_and_versions
echo "PASS"
