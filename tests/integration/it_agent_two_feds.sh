#!/usr/bin/env bash
# Two federations at once with the same three region agents: fed-mlp trains
# the built-in MLP, fed-cnn the PyTorch CNN of examples/pytorch-cnn through
# the Python kit (eu-west and ap-south one-shot, us-east long-lived), each
# agent running both in workers of their own and sharing its one device
# between them.  The dataset's files reach the PyTorch trainer from the
# region's policy (FEDAGG_DATA_* in its environment), never from the
# federation.  Checks: both federations complete their rounds with all
# three regions; each audit log verifies; in each federation the unmasked
# sum equals the plain sum of the regions' quantised updates bit for bit
# (FEDAGG_DEBUG_DUMP_DIR with "{federation}", on both sides); each
# region's data statement names the policy's dataset and trainer.
source "$FA_SRC/deploy/fedlib.sh"
TPY=$(fed_torch_python) || { echo "SKIP: no python3 with torch and numpy here"; exit 77; }
source "$FA_SRC/tests/integration/fedtest.sh"
source "$FA_SRC/tests/integration/agenttest.sh"
export PYTHONPATH="$FA_SRC/python"
export OMP_NUM_THREADS=1
ROUNDS=2
# A round starts when the three regions have trained (a one-shot trainer
# imports torch every round): a generous advertisement deadline that the
# phase does not wait for when everybody is there.
AGENT_ROUND='min_regions: 2
  threshold: 2
  advertise_deadline_ms: 180000
  shares_deadline_ms: 20000
  masked_deadline_ms: 20000
  consistency_deadline_ms: 20000
  unmask_deadline_ms: 20000'

agent_service_setup
"$TPY" "$FA_SRC/examples/pytorch-cnn/make_init.py" --out "$D/cnn-init.safetensors" \
    >"$D/logs/make_init.log" 2>&1 || fail "make_init.py: $(cat "$D/logs/make_init.log")"
for r in "${REGIONS[@]}"; do
    mode=TRAINER_ONE_SHOT
    [ "$r" = us-east ] && mode=TRAINER_LONG_LIVED
    agent_config "$r" "$(dataset_block fmnist "$r")
  trainers { name: \"mlp\" builtin { $FED_TRAINER } }
  trainers { name: \"torch-cnn\" external {
      command: [\"$TPY\", \"$FA_SRC/examples/pytorch-cnn/train.py\", \"--local-steps\", \"15\",
                \"--batch-size\", \"32\", \"--holdout\", \"0.05\", \"--threads\", \"1\"]
      mode: $mode timeout_s: 180 start_timeout_s: 180
      env: [\"PYTHONPATH=$PYTHONPATH\", \"FEDAGG_DEVICE=cpu\", \"OMP_NUM_THREADS=1\"] } }
  accept_teams: \"vision\"" "central:$PORT"
done
federation_file "$D/fed-mlp.textproto" fed-mlp vision mlp fmnist "$ROUNDS"
FED_MODEL="init_file: \"$D/cnn-init.safetensors\"" FED_QUANT='bits: 16 max_examples: 480' \
    federation_file "$D/fed-cnn.textproto" fed-cnn vision torch-cnn fmnist "$ROUNDS"

export FEDAGG_DEBUG_DUMP_DIR="$D/dump/{federation}"
mkdir -p "$D/dump/fed-mlp" "$D/dump/fed-cnn"
service_start central
federation_create central "$D/fed-mlp.textproto"
federation_create central "$D/fed-cnn.textproto"
for r in "${REGIONS[@]}"; do agent_start "$r"; done
for f in fed-mlp fed-cnn; do wait_federation central "$f" finished "$ROUNDS" 600; done

for f in fed-mlp fed-cnn; do
    audit_check central "$f"
    python3 - "$D/logs/show-$f.jsonl" "$D/dump/$f" "$f" "$ROUNDS" <<'PY' || fail "$f: the sums"
import glob, json, os, struct, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rounds = [r for r in recs if "new_version" in r and not ({"admin", "decision", "lifecycle"} & r.keys())]
assert len(rounds) == int(sys.argv[4]), f"{len(rounds)} rounds"
for r in rounds:
    assert sorted(r["participants"]) == ["ap-south", "eu-west", "us-east"], r["participants"]
d = sys.argv[2]
sums = sorted(glob.glob(os.path.join(d, "sum-r*-a*.u32")))
assert len(sums) == int(sys.argv[4]), f"expected {sys.argv[4]} sums, found {sums}"
for path in sums:
    tag = os.path.basename(path)[4:-4]
    mask = (1 << int(open(path + ".bits").read())) - 1
    inputs = sorted(glob.glob(os.path.join(d, f"input-*-{tag}.u32")))
    assert len(inputs) == 3, f"{tag}: expected 3 inputs, found {inputs}"
    total = None
    for p in inputs:
        v = struct.unpack(f"<{os.path.getsize(p)//4}I", open(p, "rb").read())
        total = list(v) if total is None else [(a + b) & mask for a, b in zip(total, v)]
    got = struct.unpack(f"<{os.path.getsize(path)//4}I", open(path, "rb").read())
    assert list(got) == [t & mask for t in total], f"{tag}: unmasked sum differs from the plain sum"
    print(f"{sys.argv[3]} {tag}: unmasked sum of {len(got)} coordinates equals the plain sum")
PY
done
# Both federations in one agent per region, each in a worker of its own.
for r in "${REGIONS[@]}"; do
    for f in fed-mlp fed-cnn; do
        grep -q "msg=\"federation worker started\".*federation=$f" "$D/logs/agent-$r.log" ||
            fail "$r ran no worker for $f"
    done
done
# Each region's data statement names the policy's dataset and trainer.
for f in fed-mlp:mlp fed-cnn:torch-cnn; do
    "$FA_BIN/fedagg" model card 1 --federation "${f%%:*}" --json \
        --config "$D/operator-central.textproto" >"$D/card-${f%%:*}.json" 2>&1 ||
        fail "model card of ${f%%:*}: $(cat "$D/card-${f%%:*}.json")"
    python3 - "$D/card-${f%%:*}.json" "${f##*:}" <<'PY' || fail "${f%%:*}: the data statements"
import json, sys
c = json.load(open(sys.argv[1]))
regions = {r["region"]: r["data"] for r in c["regions"]}
assert sorted(regions) == ["ap-south", "eu-west", "us-east"], regions
for name, d in regions.items():
    assert d and d["dataset"] == "fmnist" and d["trainer"] == sys.argv[2], (name, d)
    assert d["signature"] == "verified" and len(d["manifest_sha256"]) == 64, (name, d)
PY
done
grep -q 'FEDAGG_DATA_TRAIN_IMAGES=.*data/eu-west/train-images' \
    "$D/agent-eu-west/federations/central/fed-cnn/worker.textproto" ||
    fail "the trainer's environment does not name the policy's dataset"
! grep -h 'level=error' "$D"/logs/agent-*.log || fail "errors in the agents' logs"
echo "PASS"
