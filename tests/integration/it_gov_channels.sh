#!/usr/bin/env bash
# Release channels (docs/governance.md): the gate points `staging` at each
# version it promotes; an operator releases a promoted version to
# `production` with `fedagg models release`, recorded in the signed log
# with the operator's name; a region's serving system pulls it with
# `fedagg model fetch --channel production` (its worker config: the
# region's certificate and the aggregator key it pins) and gets the
# promoted model and the proof of the record that put it there; `fedagg
# model verify` checks both again offline, and refuses a tampered proof, a
# tampered model, a proof of another channel.  Releases of a version that
# is not promoted, or not kept, are refused; the model card the aggregator
# serves is the one `fedagg audit lineage` recomputes from the log.
source "$FA_SRC/tests/integration/fedtest.sh"

F="$FA_BIN/fedagg"
export FED_AGG_EXTRA='operators: ["alice"]
promotion { enabled: true tolerance: 0.05 min_regions: 2 channels: ["staging"] }'
fed_test_config 100000
TEST_SET='test_images: "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz" test_labels: "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz"'
for r in "${REGIONS[@]}"; do
    sed -i "s|^data {|data {\n  $TEST_SET|" "$D/worker-$r.textproto"
done
"$FA_SRC/deploy/pki.sh" "$D/pki" --operators alice >"$D/logs/pki-ops.log" 2>&1 ||
    fail "pki.sh --operators: $(cat "$D/logs/pki-ops.log")"
cat >"$D/operator.textproto" <<EOF
aggregator: "127.0.0.1:$PORT"
tls { cert_file: "pki/operator-alice.crt" key_file: "pki/operator-alice.key" ca_file: "pki/ca.crt" server_name: "localhost" }
EOF
OPC=(--config "$D/operator.textproto")

fed_start_aggregator "$D"
for r in "${REGIONS[@]}"; do fed_start_worker "$D" "$r"; done
fed_wait_rounds "$D" 4 120 || fail "4 rounds did not complete"
wait_log "$D/logs/aggregator.log" 'channel=staging' 60
"$F" pause "${OPC[@]}" >/dev/null || fail "pause"
wait_log "$D/logs/aggregator.log" 'federation paused' 60

"$F" models governance "${OPC[@]}" --json >"$D/gov.json" || fail "models governance"
"$F" models governance "${OPC[@]}" >"$D/gov.txt" || fail "models governance (table)"
grep -q "^staging " "$D/gov.txt" || fail "governance table: $(cat "$D/gov.txt")"
read -r V UNDECIDED < <(python3 -c '
import json, sys
g = json.load(open(sys.argv[1]))
assert g["policy"]["metric"] == "accuracy" and g["policy"]["channels"] == ["staging"], g["policy"]
assert g["channels"][0]["channel"] == "staging" and g["channels"][0]["by"] is None, g["channels"]
promoted = [p["version"] for p in g["promoted"]]
undecided = [v["version"] for v in g["versions"] if v["outcome"] == "candidate"]
print(promoted[-1], undecided[-1] if undecided else -1)' "$D/gov.json") || fail "governance: $(cat "$D/gov.json")"

# --- releases ------------------------------------------------------------------
"$F" models release "$V" --channel production "${OPC[@]}" >"$D/release.out" 2>&1 ||
    fail "release: $(cat "$D/release.out")"
grep -q "channel production now points at version $V (released by alice)" "$D/release.out" ||
    fail "release said: $(cat "$D/release.out")"
rc=0
"$F" models release "$V" --channel production "${OPC[@]}" >"$D/out" 2>&1 || rc=$?
[ "$rc" = 1 ] && grep -q "points at version $V already" "$D/out" || fail "a second release: $rc $(cat "$D/out")"
if [ "$UNDECIDED" -ge 0 ]; then
    rc=0
    "$F" models release "$UNDECIDED" --channel production "${OPC[@]}" >"$D/out" 2>&1 || rc=$?
    [ "$rc" = 1 ] && grep -q "is not promoted" "$D/out" || fail "release of a candidate: $rc $(cat "$D/out")"
fi
rc=0
"$F" models release 999999 --channel production "${OPC[@]}" >"$D/out" 2>&1 || rc=$?
[ "$rc" = 1 ] && grep -q "not kept" "$D/out" || fail "release of no version: $rc $(cat "$D/out")"
rc=0
"$F" models release "$V" --channel 'Prod!' "${OPC[@]}" >"$D/out" 2>&1 || rc=$?
[ "$rc" = 2 ] || fail "a bad channel name: exit $rc"
grep -q 'msg="release channel moved" proc=aggregator channel=production version='"$V"' by="alice"' \
    "$D/logs/aggregator.log" || fail "the aggregator's log has no release by alice"

# --- a region's serving pull ---------------------------------------------------------
"$F" model fetch --channel production --config "$D/worker-eu-west.textproto" \
    --out "$D/prod.safetensors" >"$D/fetch.out" 2>&1 || fail "fetch: $(cat "$D/fetch.out")"
grep -q "version $V of federation demo, channel production (moved by alice" "$D/fetch.out" ||
    fail "fetch said: $(cat "$D/fetch.out")"
"$F" model inspect "$D/prod.safetensors" >/dev/null || fail "the fetched model does not inspect"
cmp -s "$D/prod.safetensors" "$D/state/model-$(printf %08d "$V").safetensors" ||
    fail "the fetched model is not version $V's file"
rc=0
"$F" model fetch --channel canary --config "$D/worker-eu-west.textproto" --out "$D/canary.safetensors" \
    >"$D/out" 2>&1 || rc=$?
[ "$rc" = 1 ] && grep -q "no release channel 'canary'" "$D/out" || fail "fetch of no channel: $rc $(cat "$D/out")"
[ ! -e "$D/canary.safetensors" ] && [ ! -e "$D/canary.safetensors.proof" ] || fail "a failed fetch wrote files"
# a fetch that pins another key refuses the proof and writes nothing
"$F" keygen --out "$D/keys/other" >/dev/null
rc=0
"$F" model fetch --channel production --config "$D/worker-eu-west.textproto" --pubkey "$D/keys/other.pub" \
    --out "$D/foreign.safetensors" >"$D/out" 2>&1 || rc=$?
[ "$rc" = 1 ] && grep -q "does not verify against the aggregator's key" "$D/out" ||
    fail "fetch with another key: $rc $(cat "$D/out")"
[ ! -e "$D/foreign.safetensors" ] || fail "a refused fetch wrote the model"

# --- offline ---------------------------------------------------------------------------------
VK=(--pubkey "$D/keys/aggregator.pub")
"$F" model verify "$D/prod.safetensors" --proof "$D/prod.safetensors.proof" "${VK[@]}" --channel production \
    >"$D/out" 2>&1 || fail "verify: $(cat "$D/out")"
grep -q "released to channel production by alice" "$D/out" || fail "verify said: $(cat "$D/out")"
rc=0
"$F" model verify "$D/prod.safetensors" --proof "$D/prod.safetensors.proof" "${VK[@]}" --channel staging \
    >"$D/out" 2>&1 || rc=$?
[ "$rc" = 1 ] && grep -q "not a move of channel staging" "$D/out" || fail "verify as staging: $rc $(cat "$D/out")"
# a tampered proof: one character of its record changed
python3 - "$D/prod.safetensors.proof" "$D/tampered.proof" <<'PY'
import sys
lines = open(sys.argv[1]).read().split("\n")
i = next(k for k, l in enumerate(lines) if l.startswith("record "))
l = lines[i]
j = len(l) // 2
lines[i] = l[:j] + ("A" if l[j] != "A" else "B") + l[j + 1:]
open(sys.argv[2], "w").write("\n".join(lines))
PY
rc=0
"$F" model verify "$D/prod.safetensors" --proof "$D/tampered.proof" "${VK[@]}" >"$D/out" 2>&1 || rc=$?
[ "$rc" = 1 ] && grep -q "does not verify" "$D/out" || fail "a tampered proof: $rc $(cat "$D/out")"
# a tampered model
cp "$D/prod.safetensors" "$D/tampered.safetensors"
printf '\x01' | dd of="$D/tampered.safetensors" bs=1 seek=$(($(stat -c %s "$D/tampered.safetensors") - 1)) \
    conv=notrunc 2>/dev/null
rc=0
"$F" model verify "$D/tampered.safetensors" --proof "$D/prod.safetensors.proof" "${VK[@]}" >"$D/out" 2>&1 || rc=$?
[ "$rc" = 1 ] && grep -q "not that model" "$D/out" || fail "a tampered model: $rc $(cat "$D/out")"

# --- the card: the aggregator's and the log's ---------------------------------------------------
"$F" model card "$V" "${OPC[@]}" --json >"$D/card-agg.json" || fail "model card"
"$F" model card "$V" "${OPC[@]}" >"$D/card.md" || fail "model card (Markdown)"
grep -q "^# Model card: federation demo, version $V" "$D/card.md" || fail "card: $(head -3 "$D/card.md")"
grep -q "production points at it (record [0-9]*, moved by alice)" "$D/card.md" || fail "card channels: $(cat "$D/card.md")"
"$F" audit lineage "$V" --log "$D/state/audit.log" "${VK[@]}" --config "$D/aggregator.textproto" --json \
    >"$D/card-log.json" 2>"$D/out" || fail "audit lineage: $(cat "$D/out")"
cmp -s "$D/card-agg.json" "$D/card-log.json" || fail "the aggregator's card differs from the log's:
$(diff <(python3 -m json.tool "$D/card-agg.json") <(python3 -m json.tool "$D/card-log.json") | head -20)"
"$F" audit verify "$D/state/audit.log" "${VK[@]}" --config "$D/aggregator.textproto" >"$D/out" 2>&1 ||
    fail "audit verify: $(cat "$D/out")"
echo "PASS"
