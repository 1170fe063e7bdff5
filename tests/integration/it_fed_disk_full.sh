#!/usr/bin/env bash
# The aggregator's storage fills up mid-federation (a tmpfs of a few MiB,
# filled by another file): no partial model, no storm of attempts (the
# storage gate opens none until a check after a back-off finds room: one
# log line per back-off), /readyz says not ready and why, the metric shows
# it; when space returns the federation resumes by itself and the audit log
# verifies with contiguous versions.
source "$FA_SRC/tests/integration/fedtest.sh"

[ "$(id -u)" = 0 ] || { echo "SKIP: mounting a tmpfs needs root"; exit 77; }
fed_test_config 0
mkdir -p "$D/state"
if ! mount -t tmpfs -o size=200m tmpfs "$D/state" 2>"$D/logs/mount.log"; then
    echo "SKIP: cannot mount a tmpfs: $(cat "$D/logs/mount.log")"
    exit 77
fi
trap 'rc=$?; fed_stop_all; umount "$D/state" 2>/dev/null; (exit $rc); fed_test_cleanup' EXIT
agg="$D/logs/aggregator.log"
fed_start_aggregator "$D"
for r in "${REGIONS[@]}"; do fed_start_worker "$D" "$r"; done
fed_wait_rounds "$D" 2 240 || fail "two rounds did not complete"
curl -s "http://127.0.0.1:$MPORT/readyz" >"$D/readyz.txt" || true
grep -q '^ready' "$D/readyz.txt" || fail "not ready before the disk filled: $(cat "$D/readyz.txt")"

# Fill the disk: leave less than a round needs.
free_mib=$(($(stat -f -c '%a * %S' "$D/state") / 1048576))
dd if=/dev/zero of="$D/state/filler" bs=1M count=$((free_mib - 20)) status=none 2>/dev/null || true
sync
echo "disk filled: $(df -h "$D/state" | tail -1)"
wait_log "$agg" 'msg="storage cannot take a round' 120
v_full=$(grep -c 'msg="round completed"' "$agg")
opened_before=$(grep -c 'msg="round attempt opened"' "$agg")
sleep 12
opened_after=$(grep -c 'msg="round attempt opened"' "$agg")
blocked_lines=$(grep -c 'msg="storage cannot take a round' "$agg")
echo "while full for 12 s: $((opened_after - opened_before)) attempts opened, $blocked_lines warnings"
[ $((opened_after - opened_before)) -le 1 ] || fail "attempts kept opening on a full disk"
[ "$blocked_lines" -le 6 ] || fail "the full disk was logged $blocked_lines times in 12 s"
code=$(curl -s -o "$D/readyz.txt" -w '%{http_code}' "http://127.0.0.1:$MPORT/readyz")
[ "$code" = 503 ] || fail "/readyz answered $code on a full disk"
grep -q 'storage' "$D/readyz.txt" || fail "/readyz does not say why: $(cat "$D/readyz.txt")"
echo "readyz: $(cat "$D/readyz.txt")"
# (read whole, then searched: grep -q leaving a pipe early kills curl with
# SIGPIPE, which pipefail reports as a failure)
metrics=$(curl -sf "http://127.0.0.1:$MPORT/metrics") || fail "GET /metrics"
grep -q '^fedagg_storage_blocked 1' <<<"$metrics" ||
    fail "fedagg_storage_blocked is not 1"
! ls "$D/state" | grep -q '\.tmp\.' || fail "a partial file was left: $(ls "$D/state")"
kill -0 "$FED_AGG_PID" || fail "the aggregator died on a full disk"

# Space returns: rounds go on by themselves.
rm -f "$D/state/filler"
t0=$SECONDS
fed_wait_rounds "$D" $((v_full + 2)) 240 || fail "rounds did not resume after space returned"
echo "resumed: 2 more rounds $((SECONDS - t0)) s after the space returned"
grep -q 'msg="storage usable again; attempts resume"' "$agg" || fail "no resume line"
curl -s "http://127.0.0.1:$MPORT/readyz" >"$D/readyz.txt" || true
grep -q '^ready' "$D/readyz.txt" || fail "not ready after recovery: $(cat "$D/readyz.txt")"
metrics=$(curl -sf "http://127.0.0.1:$MPORT/metrics") || fail "GET /metrics"
grep -q '^fedagg_storage_blocked 0' <<<"$metrics" ||
    fail "fedagg_storage_blocked is not back to 0"

# A region's state directory fills up: it joins no attempt until it has
# room again (one warning per back-off), the others go on; then it rejoins.
fed_stop_all
victim=ap-south
vdir="$D/worker-$victim"
mkdir -p "$vdir"
mount -t tmpfs -o size=60m tmpfs "$vdir" || fail "cannot mount the region's tmpfs"
trap 'rc=$?; fed_stop_all; umount "$vdir" 2>/dev/null; umount "$D/state" 2>/dev/null; (exit $rc); fed_test_cleanup' EXIT
: >"$agg"
vlog="$D/logs/worker-$victim.log"
: >"$vlog"
fed_start_aggregator "$D"
for r in "${REGIONS[@]}"; do fed_start_worker "$D" "$r"; done
base=$(grep -c 'msg="round completed"' "$agg" || true)
fed_wait_rounds "$D" $((base + 1)) 240 || fail "no round with the region's disk free"
free_mib=$(($(stat -f -c '%a * %S' "$vdir") / 1048576))
dd if=/dev/zero of="$vdir/filler" bs=1M count=$((free_mib - 2)) status=none 2>/dev/null || true
wait_log "$vlog" 'msg="state directory full' 120
done_full=$(grep -c 'msg="round completed"' "$agg")
fed_wait_rounds "$D" $((done_full + 2)) 240 || fail "rounds stopped while one region's disk is full"
round_line $((done_full + 2)) | grep -q 'participants=2 ' ||
    fail "the full region took part: $(round_line $((done_full + 2)))"
warns=$(grep -c 'msg="state directory full' "$vlog")
[ "$warns" -le 7 ] || fail "the full state directory was logged $warns times"
kill -0 "$(fed_worker_pid "$victim")" || fail "the region's worker died on a full disk"
echo "region's disk full: rounds went on with 2, $warns warnings"
rm -f "$vdir/filler"
wait_log "$vlog" 'msg="state directory has room again' 120
back=$(grep -c 'msg="round completed"' "$agg")
fed_wait_rounds "$D" $((back + 2)) 240 || fail "no rounds after the region's disk freed"
round_line $((back + 2)) | grep -q 'participants=3 ' ||
    fail "the region did not rejoin: $(round_line $((back + 2)))"
echo "region rejoined after its disk freed"
fed_stop_all
check_audit_and_versions
echo "PASS"
