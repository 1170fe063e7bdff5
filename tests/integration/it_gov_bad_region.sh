#!/usr/bin/env bash
# The quality gate against a region whose data goes bad (docs/governance.md).
# Three regions train the built-in MLP and evaluate every global model on
# held-out data; the federation's promotion policy promotes a candidate
# whose federated accuracy is within 0.02 of the best promoted one, rolls
# back otherwise, and moves the `production` channel on promotion.  After
# round 3 ap-south's labels are shuffled by an "upstream job" (its worker
# stops after 3 rounds, its label file is permuted, it restarts): its data
# statement's manifest digest changes, and its updates drag the model down.
# Checked: a candidate holding ap-south's bad updates is rejected, recorded
# with its figures, and the federation rolls back to the last promoted
# version; no promoted version (so nothing production ever pointed at)
# descends from a bad update; once an operator drains ap-south the
# federation improves and promotes again; `fedagg audit verify` recomputes
# every decision, and `fedagg audit lineage` shows the rejection.
source "$FA_SRC/tests/integration/fedtest.sh"

F="$FA_BIN/fedagg"
# Shards near IID (Dirichlet alpha 100) and gentle local steps: rounds of
# good regions improve the model steadily, so a regression is the bad
# region's, not client drift's.
export FED_TRAINER="local_steps: 20 batch_size: 32 learning_rate: 0.05 momentum: 0.9"
export FED_QUANT="bits: 16 clip: CLIP_L2 clip_l2_norm: 10.0 clip_value: 0.05 max_examples: 640"
export FED_OPTIMIZER="kind: FEDAVG learning_rate: 1.0"
export FED_AGG_EXTRA='operators: ["alice"]
promotion {
  enabled: true
  metric: "accuracy"
  baseline: BASELINE_BEST_OF_LAST
  baseline_window: 0
  tolerance: 0.02
  min_regions: 2
  on_regression: REGRESSION_ROLLBACK
  channels: ["production"]
}'
FED_ALPHA=100 FED_SEED=3 fed_setup "$D" "${REGIONS[@]}"
fed_test_config 40
TEST_SET='test_images: "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz"
  test_labels: "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz"'
for r in "${REGIONS[@]}"; do
    extra=""
    [ "$r" = ap-south ] && extra="rounds: 3"
    fed_write_worker "$D" "$r" "$PORT" "$ALL" "$extra"
    sed -i "s|^data {|data {\n  $(echo "$TEST_SET" | tr '\n' ' ')|" "$D/worker-$r.textproto"
done
"$F" config check "$D/aggregator.textproto" >/dev/null || fail "aggregator config does not check"
"$FA_SRC/deploy/pki.sh" "$D/pki" --operators alice >"$D/logs/pki-ops.log" 2>&1 ||
    fail "pki.sh --operators: $(cat "$D/logs/pki-ops.log")"
cat >"$D/operator.textproto" <<EOF
aggregator: "127.0.0.1:$PORT"
tls { cert_file: "pki/operator-alice.crt" key_file: "pki/operator-alice.key" ca_file: "pki/ca.crt" server_name: "localhost" }
EOF

fed_start_aggregator "$D"
for r in "${REGIONS[@]}"; do fed_start_worker "$D" "$r"; done

# ap-south stops after its 3 rounds; an upstream job shuffles its labels.
pid=$(fed_worker_pid ap-south)
wait "$pid" 2>/dev/null || fail "ap-south's worker did not stop cleanly after its 3 rounds"
python3 - "$D/data/ap-south/train-labels-idx1-ubyte.gz" <<'PY' || fail "cannot shuffle the labels"
import gzip, random, sys
p = sys.argv[1]
raw = gzip.decompress(open(p, "rb").read())
head, labels = raw[:8], bytearray(raw[8:])
random.Random(31).shuffle(labels)
open(p, "wb").write(gzip.compress(head + bytes(labels)))
PY
sed -i 's/^rounds: 3$//' "$D/worker-ap-south.textproto"
fed_start_worker "$D" ap-south

# The gate rejects the first candidate with bad updates and rolls back.
wait_log "$D/logs/aggregator.log" 'msg="rolled back to the last promoted version"' 120
# The operator takes the bad region out.
"$F" drain ap-south --config "$D/operator.textproto" >"$D/logs/drain.out" 2>&1 ||
    fail "drain: $(cat "$D/logs/drain.out")"
drained_at=$(fed_rounds_completed "$D")
# The federation improves without it: a new promotion after the drain.
start=$SECONDS
until [ "$(grep 'msg="candidate decided"' "$D/logs/aggregator.log" | sed -n '/outcome=promoted/p' |
    awk -F'version=' '{split($2, a, " "); print a[1]}' | sort -n | tail -1)" -gt \
    "$(grep 'msg="rolled back' "$D/logs/aggregator.log" | tail -1 | sed 's/.*new_version=\([0-9]*\).*/\1/')" ] &&
    [ "$(fed_rounds_completed "$D")" -ge $((drained_at + 3)) ]; do
    [ $((SECONDS - start)) -lt 120 ] || fail "no promotion after the drain within 120 s"
    sleep 0.5
done
fed_stop_all

"$F" audit verify "$D/state/audit.log" --pubkey "$D/keys/aggregator.pub" \
    --config "$D/aggregator.textproto" >"$D/logs/verify.out" 2>&1 ||
    fail "audit verify: $(cat "$D/logs/verify.out")"
grep -q "promotion decisions recomputed" "$D/logs/verify.out" || fail "verify: $(cat "$D/logs/verify.out")"
grep -q "data statements verified" "$D/logs/verify.out" || fail "verify: $(cat "$D/logs/verify.out")"

# Every version's card, from the log alone.
last=$("$F" audit show "$D/state/audit.log" --json | python3 -c '
import json, sys
print(max(json.loads(l)["new_version"] for l in sys.stdin if l.strip()))')
mkdir -p "$D/cards"
for v in $(seq 0 "$last"); do
    "$F" audit lineage "$v" --log "$D/state/audit.log" --pubkey "$D/keys/aggregator.pub" \
        --config "$D/aggregator.textproto" --json >"$D/cards/$v.json" 2>"$D/cards/$v.err" ||
        fail "lineage of version $v: $(cat "$D/cards/$v.err")"
done
python3 - "$D/cards" "$last" <<'PY' || fail "the gate let a bad update through, or did not reject one"
import json, sys
d, last = sys.argv[1], int(sys.argv[2])
cards = {v: json.load(open("%s/%d.json" % (d, v))) for v in range(last + 1)}
# ap-south's manifest digest changed when its labels were shuffled: the
# versions whose own round took an update stated on the new manifest are bad.
manifests = []
for v in range(last + 1):
    for r in cards[v]["regions"]:
        if r["region"] == "ap-south" and r["data"]:
            m = r["data"]["manifest_sha256"]
            if m not in manifests:
                manifests.append(m)
assert len(manifests) == 2, f"ap-south stated {len(manifests)} manifests, expected 2: {manifests}"
bad_manifest = manifests[1]
def bad_self(v):
    return any(r["region"] == "ap-south" and r["data"] and r["data"]["manifest_sha256"] == bad_manifest
               for r in cards[v]["regions"])
bad = {v for v in cards if bad_self(v)}
assert bad, "no version holds a bad update: did ap-south take part after it went bad?"
def tainted(v):
    return v in bad or any(a["version"] in bad for a in cards[v]["ancestry"])
promoted = [v for v in cards if cards[v]["status"] == "promoted"]
rejected = [v for v in cards if cards[v]["status"] == "rejected"]
for v in promoted:
    assert not tainted(v), f"version {v} was promoted but descends from a bad update"
bad_rejected = [v for v in rejected if v in bad]
assert bad_rejected, f"no bad candidate was rejected (bad {sorted(bad)}, rejected {rejected})"
first = min(bad_rejected)
dec = cards[first]["decision"]
assert dec["action"] == "rollback" and dec["value"] < dec["baseline"] - 0.02, dec
# the rollback after it restores the last promoted version, byte for byte
rb = [v for v in cards if cards[v]["made"]["by"] == "rollback" and cards[v]["made"]["parent"] == first]
assert rb, f"no rollback from version {first}"
restored = cards[rb[0]]["made"]["restores"]
assert cards[rb[0]]["model_sha256"] == cards[restored]["model_sha256"], "the rollback is not byte for byte"
assert cards[restored]["status"] == "promoted", cards[restored]["status"]
# production: every version it ever pointed at is promoted and clean
moved = sorted({v for v in cards for m in cards[v]["releases"] if m["channel"] == "production"})
assert moved and all(v in promoted for v in moved), moved
after = [v for v in promoted if v > rb[-1]]
assert after and any(v in moved for v in after), f"no promotion to production after the drain: {after} {moved}"
print(f"bad versions {sorted(bad)}; rejected {rejected}; rollbacks {rb}; production {moved}")
PY
# A person reads the rejection in the card.
"$F" audit lineage "$(python3 -c "
import json; import glob
for p in sorted(glob.glob('$D/cards/*.json'), key=lambda s: int(s.split('/')[-1][:-5])):
    c = json.load(open(p))
    if c['status'] == 'rejected':
        print(c['version']); break")" --log "$D/state/audit.log" --pubkey "$D/keys/aggregator.pub" \
    --config "$D/aggregator.textproto" >"$D/logs/card.md" || fail "lineage (Markdown)"
grep -q '^\*\*rejected\*\* (record [0-9]*, rollback): accuracy' "$D/logs/card.md" ||
    fail "card: $(cat "$D/logs/card.md")"
grep -q "drained" "$D/logs/drain.out" || fail "drain said: $(cat "$D/logs/drain.out")"
echo "PASS"
