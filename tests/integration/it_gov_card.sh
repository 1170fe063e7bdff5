#!/usr/bin/env bash
# A model card that names everything that went into a version
# (docs/governance.md): three regions train the PyTorch CNN of
# examples/pytorch-cnn through the Python kit (long-lived trainers, data
# named by FEDAGG_DATA_* as the kit reads it), under distributed
# differential privacy (every region's budget, mechanism ddg, signed into
# the log each round), with the promotion gate on.  The card of version 1,
# as the aggregator serves it (`fedagg model card`), names its parent,
# round and attempt, the three regions with their signed data statements
# (dataset, manifest digest, example count, trainer and its command's
# digest) and privacy statements, the config digest, the optimizer and
# quantisation settings, the distributed-DP round and its epsilons, the
# regions' evaluations, the gate's decision, the channel, its ancestry; and
# `fedagg audit lineage` recomputes the same document from the log alone.
# shellcheck source=deploy/fedlib.sh
source "$FA_SRC/deploy/fedlib.sh"
TPY=$(fed_torch_python) || { echo "SKIP: no python3 with torch and numpy here"; exit 77; }
source "$FA_SRC/tests/integration/fedtest.sh"
export PYTHONPATH="$FA_SRC/python"
export OMP_NUM_THREADS=1
F="$FA_BIN/fedagg"

"$TPY" "$FA_SRC/examples/pytorch-cnn/make_init.py" --out "$D/cnn-init.safetensors" \
    >"$D/make_init.log" 2>&1 || fail "make_init.py: $(cat "$D/make_init.log")"
export FED_MODEL='init_file: "cnn-init.safetensors"'
export FED_OPTIMIZER='kind: FEDAVG learning_rate: 1.0'
export FED_QUANT='bits: 16 max_examples: 320'
export FED_ROUND="min_regions: 3
  advertise_deadline_ms: 120000
  shares_deadline_ms: 20000
  masked_deadline_ms: 30000
  consistency_deadline_ms: 20000
  unmask_deadline_ms: 20000"
export FED_EVALUATION=""
export FED_AGG_EXTRA='operators: ["alice"]
distributed_dp { enabled: true clip: 2.0 noise_multiplier: 0.001 min_regions: 3 }
promotion { enabled: true metric: "accuracy" tolerance: 0.5 min_regions: 3 channels: ["production"] }'
fed_test_config 100000
for r in "${REGIONS[@]}"; do
    FED_WORKER_TRAINER=$(printf 'external { command: ["%s", "%s", "--local-steps", "10", "--batch-size", "32", "--holdout", "0.05", "--threads", "1"]
      mode: TRAINER_LONG_LIVED timeout_s: 180 start_timeout_s: 180
      env: ["PYTHONPATH=%s", "FEDAGG_DEVICE=cpu", "OMP_NUM_THREADS=1",
            "FEDAGG_DATA_TRAIN_IMAGES=%s/data/%s/train-images-idx3-ubyte.gz",
            "FEDAGG_DATA_TRAIN_LABELS=%s/data/%s/train-labels-idx1-ubyte.gz"] }' \
        "$TPY" "$FA_SRC/examples/pytorch-cnn/train.py" "$PYTHONPATH" "$D" "$r" "$D" "$r") \
        fed_write_worker "$D" "$r" "$PORT" "$ALL" \
        'privacy { target_epsilon: 1e9 mechanism: "ddg" unit: "region" }'
done
"$FA_SRC/deploy/pki.sh" "$D/pki" --operators alice >"$D/logs/pki-ops.log" 2>&1 ||
    fail "pki.sh --operators: $(cat "$D/logs/pki-ops.log")"
cat >"$D/operator.textproto" <<EOF
aggregator: "127.0.0.1:$PORT"
tls { cert_file: "pki/operator-alice.crt" key_file: "pki/operator-alice.key" ca_file: "pki/ca.crt" server_name: "localhost" }
EOF
for f in "$D"/aggregator.textproto "$D"/worker-*.textproto; do
    "$F" config check "$f" >/dev/null || fail "config $f does not check"
done

fed_start_aggregator "$D"
for r in "${REGIONS[@]}"; do fed_start_worker "$D" "$r"; done
fed_wait_rounds "$D" 1 300 || fail "round 1 did not complete"
# No round after the second: the candidate of round 1 is decided when
# round 2's advertisements are in, and the log then holds still.
"$F" pause --config "$D/operator.textproto" >/dev/null || fail "pause"
wait_log "$D/logs/aggregator.log" 'federation paused' 200
grep -q 'msg="candidate decided".* version=1 outcome=promoted' "$D/logs/aggregator.log" ||
    fail "version 1 was not promoted: $(grep 'candidate decided' "$D/logs/aggregator.log")"
"$F" model card 1 --config "$D/operator.textproto" --json >"$D/card-agg.json" || fail "model card --json"
"$F" model card 1 --config "$D/operator.textproto" >"$D/card.md" || fail "model card"
fed_stop_all

VK=(--pubkey "$D/keys/aggregator.pub" --config "$D/aggregator.textproto")
"$F" audit lineage 1 --log "$D/state/audit.log" "${VK[@]}" --json >"$D/card-log.json" 2>"$D/out" ||
    fail "audit lineage: $(cat "$D/out")"
cmp -s "$D/card-agg.json" "$D/card-log.json" || fail "the log's card is not the aggregator's:
$(diff <(python3 -m json.tool "$D/card-agg.json") <(python3 -m json.tool "$D/card-log.json") | head)"

python3 - "$D/card-agg.json" "$TPY" "$FA_SRC/examples/pytorch-cnn/train.py" <<'PY' || fail "the card misses a part"
import json, sys
c = json.load(open(sys.argv[1]))
hexlen = lambda s: isinstance(s, str) and len(s) == 64
assert c["federation"] == "demo" and c["version"] == 1 and hexlen(c["model_sha256"]), c
m = c["made"]
assert m["by"] == "round" and m["parent"] == 0 and m["round"] == 1 and m["attempt"] == 0, m
assert hexlen(c["config_digest"]) and hexlen(c["tensor_table_digest"]) and c["num_params"] > 0
regions = {r["region"]: r for r in c["regions"]}
assert sorted(regions) == ["ap-south", "eu-west", "us-east"], regions
trainers = set()
for name, r in regions.items():
    d, p = r["data"], r["privacy"]
    assert d and d["dataset"] == "default" and hexlen(d["manifest_sha256"]), (name, d)
    assert d["num_examples"] == 320 and d["signature"] == "verified", (name, d)
    assert d["trainer"] == "external" and d["trainer_kind"] == "external:long-lived", d
    trainers.add(d["trainer_sha256"])
    assert hexlen(r["upload_digest"]), r
    assert p and p["mechanism"] == "ddg" and p["epsilon_round"] > 0 and p["epsilon_total"] > 0, p
assert len(trainers) == 1, "the same command everywhere has one digest"
assert len({r["data"]["manifest_sha256"] for r in regions.values()}) == 3, "each shard its manifest"
s = c["settings"]
assert s["optimizer"]["kind"] == "fedavg" and s["optimizer"]["learning_rate"] == 1.0, s
assert s["quantization"]["max_examples"] == 320, s
dp = s["distributed_dp"]
assert dp and dp["noisy_contributions"] == 3 and dp["epsilon_round"] > 0 and dp["epsilon_total"] > 0, dp
e = c["evaluations"]
assert len(e["statements"]) == 3 and all(0 <= x["accuracy"] <= 1 for x in e["statements"]), e
assert e["federated"]["regions"] == 3, e
d = c["decision"]
assert d["outcome"] == "promoted" and d["rule"]["metric"] == "accuracy" and d["regions"] == 3, d
assert d["record"] == e["record"], "the decision carries the statements it rests on"
assert c["status"] == "promoted"
assert [x["channel"] for x in c["channels"]] == ["production"], c["channels"]
assert [a["version"] for a in c["ancestry"]] == [0], c["ancestry"]
print("card of version 1: every part named")
PY
# The trainer digest is that of the command the regions ran.
want=$(python3 - "$D/worker-eu-west.textproto" <<'PY'
import hashlib, re, sys
text = open(sys.argv[1]).read()
cmd = re.search(r'command: \[([^\]]*)\]', text).group(1)
argv = [a.strip().strip('"') for a in cmd.split('", "')]
argv = [a.strip('"') for a in argv]
h = hashlib.sha256(b"fedagg-trainer command v1\n" + b"long-lived\0")
for a in argv:
    h.update(a.encode() + b"\0")
print(h.hexdigest())
PY
)
python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); assert c["regions"][0]["data"]["trainer_sha256"] == sys.argv[2], (c["regions"][0]["data"]["trainer_sha256"], sys.argv[2])' \
    "$D/card-agg.json" "$want" || fail "the trainer digest is not the command's"
for section in "## Regions whose updates are in it" "## Settings" "## Evaluations" "## Promotion decision" \
    "## Release channels" "## Ancestry" "distributed DP: noise multiplier" "external (external:long-lived)"; do
    grep -qF "$section" "$D/card.md" || fail "the Markdown card has no '$section': $(cat "$D/card.md")"
done
echo "PASS"
