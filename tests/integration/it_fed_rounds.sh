#!/usr/bin/env bash
# Three regions, three rounds of secure aggregation on loopback: every round
# completes with all three, every worker proves its round's audit record
# against the signed checkpoint, the unmasked sum equals the plain sum of the
# regions' quantised updates bit for bit, and the audit log verifies.  One
# region masks on OpenSSL's AES (FEDAGG_MASK_PRG=openssl), the others and
# the aggregator on what this CPU runs best (VAES where it has it): the
# masks must cancel across the two, bit for bit.
source "$FA_SRC/tests/integration/fedtest.sh"
fed_need_test_hooks

fed_test_config 3
export FEDAGG_DEBUG_DUMP_DIR="$D/dump"
mkdir -p "$FEDAGG_DEBUG_DUMP_DIR"
fed_start_aggregator "$D"
for r in "${REGIONS[@]}"; do
    if [ "$r" = ap-south ]; then
        FEDAGG_MASK_PRG=openssl fed_start_worker "$D" "$r"
    else
        fed_start_worker "$D" "$r"
    fi
done
fed_wait_rounds "$D" 3 240 || fail "three rounds did not complete"
grep -q 'msg="worker started".*mask_prg=openssl' "$D/logs/worker-ap-south.log" ||
    fail "ap-south does not say it masks on OpenSSL"
grep -q 'msg="aggregator serving".*mask_prg=\(openssl\|vaes256\|vaes512\)' "$D/logs/aggregator.log" ||
    fail "the aggregator does not name its mask generator"

for n in 1 2 3; do
    round_line "$n" | grep -q 'participants=3 dropped=0' || fail "round $n: $(round_line "$n")"
done
for r in "${REGIONS[@]}"; do
    wait_log "$D/logs/worker-$r.log" 'msg="the federation has finished"' 30
    c=$(grep -c 'msg="round done".*proof=verified' "$D/logs/worker-$r.log" || true)
    [ "$c" = 3 ] || fail "$r proved $c of 3 rounds"
done
! grep -h 'level=error' "$D"/logs/*.log || fail "errors in the logs"

# Metrics and probes over HTTP/1.1, status over HTTP/3.
curl -sf "http://127.0.0.1:$MPORT/metrics" >"$D/metrics.txt" || fail "GET /metrics"
for want in 'fedagg_rounds_total{outcome="completed"} 3' 'fedagg_model_version 3' \
    'fedagg_region_rounds_total{region="eu-west"} 3' 'fedagg_audit_tree_size 3' \
    'fedagg_round_duration_seconds_count 3' 'fedagg_phase_duration_seconds_count{phase="masked"} 3'; do
    grep -qF "$want" "$D/metrics.txt" || fail "metrics lack '$want'"
done
grep -q '^fedagg_eval_accuracy 0\.[0-9]' "$D/metrics.txt" || fail "no evaluation accuracy metric"
grep -q '^fedagg_region_bytes_received_total{region="ap-south"} [1-9]' "$D/metrics.txt" ||
    fail "no bytes counted for ap-south"
curl -sf "http://127.0.0.1:$MPORT/healthz" | grep -q ok || fail "GET /healthz"
curl -sf "http://127.0.0.1:$MPORT/readyz" | grep -q ready || fail "GET /readyz"
"$FA_BIN/fedagg-h3" get --server "127.0.0.1:$PORT" --name localhost --ca "$D/pki/ca.crt" \
    --cert "$D/pki/client-us-east.crt" --key "$D/pki/client-us-east.key" /v1/status \
    --out "$D/status.bin" >/dev/null 2>&1 || fail "GET /v1/status"
protoc --decode=fedagg.Status -I "$FA_SRC/proto" "$FA_SRC/proto/fedagg.proto" <"$D/status.bin" \
    >"$D/status.txt"
grep -q '^model_version: 3' "$D/status.txt" && grep -q '^rounds_completed: 3' "$D/status.txt" &&
    grep -q '^phase: PHASE_DONE' "$D/status.txt" || fail "status: $(cat "$D/status.txt")"
# The same as JSON, and the model with its digest header.
h3() {
    "$FA_BIN/fedagg-h3" get --server "127.0.0.1:$PORT" --name localhost --ca "$D/pki/ca.crt" \
        --cert "$D/pki/client-us-east.crt" --key "$D/pki/client-us-east.key" "$@"
}
h3 /v1/status --header "accept: application/json" --out "$D/status.json" >/dev/null 2>&1 ||
    fail "GET /v1/status as JSON"
python3 - "$D/status.json" <<'PY' || fail "status JSON: $(cat "$D/status.json")"
import json, sys
s = json.load(open(sys.argv[1]))
assert s["model_version"] == 3 and s["rounds_completed"] == 3, s
assert s["num_tensors"] == 6 and s["storage"]["ok"] is True, s
assert [r["id"] for r in s["regions"]] == ["ap-south", "eu-west", "us-east"], s
PY
h3 /v1/models/latest --show-headers --out "$D/latest.safetensors" >"$D/latest.json" 2>&1 ||
    fail "GET /v1/models/latest"
want=$(sha256sum "$D/latest.safetensors" | cut -d' ' -f1)
grep -q "\"fedagg-model-sha256\":\"$want\"" "$D/latest.json" ||
    fail "the model's digest header is not its SHA-256: $(cat "$D/latest.json")"

# The federation is finished: the aggregator drains and exits 0 on its own.
status=0
wait "$FED_AGG_PID" || status=$?
[ "$status" = 0 ] || fail "the aggregator exited with status $status"
grep -q 'msg="aggregator stopped"' "$D/logs/aggregator.log" || fail "no clean stop"

# A mask generator that is not one is refused by name, before anything starts.
status=0
FEDAGG_MASK_PRG=aes-ni "$FA_BIN/fedagg-worker" --config "$D/worker-eu-west.textproto" \
    >"$D/logs/bad-prg.log" 2>&1 || status=$?
[ "$status" != 0 ] || fail "a worker started with FEDAGG_MASK_PRG=aes-ni"
grep -q 'FEDAGG_MASK_PRG=aes-ni: not a mask generator' "$D/logs/bad-prg.log" ||
    fail "FEDAGG_MASK_PRG=aes-ni: $(cat "$D/logs/bad-prg.log")"

# Bit for bit: the aggregator's unmasked ring sum against the sum of the
# quantised inputs the regions masked (written by the debug dump hook).
python3 - "$FEDAGG_DEBUG_DUMP_DIR" <<'PY'
import glob, os, struct, sys
d = sys.argv[1]
sums = sorted(glob.glob(os.path.join(d, "sum-r*-a*.u32")))
assert len(sums) == 3, f"expected 3 sums, found {sums}"
for path in sums:
    tag = os.path.basename(path)[4:-4]           # r<round>-a<attempt>
    k = int(open(path + ".bits").read())
    mask = (1 << k) - 1
    total = None
    inputs = sorted(glob.glob(os.path.join(d, f"input-*-{tag}.u32")))
    assert len(inputs) == 3, f"{tag}: expected 3 inputs, found {inputs}"
    for p in inputs:
        v = struct.unpack(f"<{os.path.getsize(p)//4}I", open(p, "rb").read())
        total = list(v) if total is None else [(a + b) & mask for a, b in zip(total, v)]
    got = struct.unpack(f"<{os.path.getsize(path)//4}I", open(path, "rb").read())
    total = [t & mask for t in total]
    assert list(got) == total, f"{tag}: unmasked sum differs from the plain sum"
    nz = sum(1 for v in got if v)
    assert nz > len(got) // 10, f"{tag}: only {nz} of {len(got)} coordinates nonzero"
    print(f"{tag}: unmasked sum of {len(got)} coordinates ({nz} nonzero) equals the plain sum (k={k})")
PY
check_audit_and_versions
echo "PASS"
