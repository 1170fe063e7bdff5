#!/usr/bin/env bash
# One federation's disk fills up (a tmpfs of its own under the service's
# directory, filled by another file) while the default federation of the
# same service runs: only the full one stops opening rounds, its state
# says stopped and why (the other's does not), the service stays ready
# (/readyz), the metrics say which one; when space returns it resumes by
# itself, and both audit logs verify with contiguous versions.
source "$FA_SRC/tests/integration/servicetest.sh"

[ "$(id -u)" = 0 ] || { echo "SKIP: mounting a tmpfs needs root"; exit 77; }
svc_config 0
vol="$D/svc/federations/beta"
mkdir -p "$vol"
if ! mount -t tmpfs -o size=200m tmpfs "$vol" 2>"$D/logs/mount.log"; then
    echo "SKIP: cannot mount a tmpfs: $(cat "$D/logs/mount.log")"
    exit 77
fi
trap 'rc=$?; fed_stop_all; umount "$vol" 2>/dev/null; (exit $rc); fed_test_cleanup' EXIT
agg="$D/logs/aggregator.log"
fed_start_aggregator "$D"
for r in "${REGIONS[@]}"; do fed_start_worker "$D" "$r"; done
svc_fed_file beta vision 0
svc_wait_rounds demo 1 120
svc_op alice federation create "$D/beta.textproto" >"$D/create.out" 2>&1 ||
    fail "create on its own volume: $(cat "$D/create.out")"
svc_start_workers beta
svc_wait_rounds beta 2 180

free_mib=$(($(stat -f -c '%a * %S' "$vol") / 1048576))
dd if=/dev/zero of="$vol/filler" bs=1M count=$((free_mib - 1)) status=none 2>/dev/null || true
sync
echo "beta's disk filled: $(df -h "$vol" | tail -1)"
wait_log "$agg" 'msg="storage cannot take a round.* federation=beta\|msg="storage cannot take a round" proc=aggregator federation=beta' 120
b_full=$(svc_rounds beta)
d_full=$(svc_rounds demo)
svc_wait_rounds demo $((d_full + 3)) 120
[ "$(svc_rounds beta)" -le $((b_full + 1)) ] || fail "beta ran rounds on a full disk"
! grep -q 'msg="storage cannot take a round" proc=aggregator federation=demo' "$agg" ||
    fail "the default federation was stopped by the other's disk"
svc_op alice federation show beta >"$D/show-beta.out" || fail "show beta"
grep -q '^state *stopped: storage: ' "$D/show-beta.out" || fail "beta: $(cat "$D/show-beta.out")"
svc_op alice federation show demo >"$D/show-demo.out" || fail "show demo"
grep -q '^state *running' "$D/show-demo.out" || fail "demo: $(cat "$D/show-demo.out")"
code=$(curl -s -o "$D/readyz.txt" -w '%{http_code}' "http://127.0.0.1:$MPORT/readyz")
[ "$code" = 200 ] || fail "/readyz answered $code: one federation's disk is not the service's"
curl -sf "http://127.0.0.1:$MPORT/metrics" >"$D/metrics.txt"
grep -qF 'fedagg_storage_blocked{federation="beta"} 1' "$D/metrics.txt" &&
    grep -qF 'fedagg_storage_blocked{federation="demo"} 0' "$D/metrics.txt" &&
    grep -qF 'fedagg_federation_state{federation="beta",state="stopped"} 1' "$D/metrics.txt" ||
    fail "metrics: $(grep -E 'storage_blocked|federation_state' "$D/metrics.txt")"
kill -0 "$FED_AGG_PID" || fail "the aggregator died"

rm -f "$vol/filler"
t0=$SECONDS
svc_wait_rounds beta $((b_full + 2)) 240
echo "beta resumed: 2 rounds $((SECONDS - t0)) s after its space returned"
svc_op alice federation show beta >"$D/show-beta.out"
grep -q '^state *running' "$D/show-beta.out" || fail "beta: $(cat "$D/show-beta.out")"
fed_stop_all
svc_verify_log "$D/state/audit.log" --config "$D/aggregator.textproto"
svc_verify_log "$vol/audit.log"
svc_check_versions "$D/state/audit.log"
svc_check_versions "$vol/audit.log"
echo "PASS"
