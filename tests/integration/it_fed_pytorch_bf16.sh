#!/usr/bin/env bash
# The CNN of examples/pytorch-cnn written in BF16 (make_init.py --dtype bf16;
# the counters stay I64), federated by three long-lived PyTorch regions:
#   - every published model is BF16 (fedagg model inspect --json), its
#     floating tensors half the bytes of float32 and the file about half the
#     F32 file of the same model;
#   - master-<v>.safetensors (the float32 master weights) is kept beside
#     every version, GET /v1/models/latest?dtype=f32 serves it (the bytes
#     and SHA-256 of that file), GET /v1/models/latest the BF16 one;
#   - the published BF16 tensors are the master rounded to nearest even
#     (with model_delta off: as deltas, the default, they are what the delta
#     rebuilds);
#   - the models load into the CNN with load_state_dict(strict=True).
# shellcheck source=deploy/fedlib.sh
source "$FA_SRC/deploy/fedlib.sh"
TPY=$(fed_torch_python) || { echo "SKIP: no python3 with torch and numpy here"; exit 77; }
source "$FA_SRC/tests/integration/fedtest.sh"
export PYTHONPATH="$FA_SRC/python"
export OMP_NUM_THREADS=1
ROUNDS=2

for dt in bf16 f32; do
    "$TPY" "$FA_SRC/examples/pytorch-cnn/make_init.py" --dtype "$dt" \
        --out "$D/cnn-$dt.safetensors" >>"$D/make_init.log" 2>&1 || fail "make_init.py: $(cat "$D/make_init.log")"
done
export FED_MODEL='init_file: "cnn-bf16.safetensors"'
export FED_OPTIMIZER='kind: FEDAVG learning_rate: 1.0'
export FED_QUANT='bits: 16 max_examples: 480'
export FED_EVALUATION='every: 1'
export FED_ROUND="min_regions: 2
  threshold: 2
  advertise_deadline_ms: 60000
  shares_deadline_ms: 20000
  masked_deadline_ms: 20000
  consistency_deadline_ms: 20000
  unmask_deadline_ms: 20000"
# Published in full (model_delta off): each version is its master rounded.
# As deltas (the default) it is the reconstruction model/delta.h defines,
# which test_aggregator_federation (test_any_model_round_delta) checks for
# a BF16 model and it_fed_delta_download end to end.
export FED_AGG_EXTRA='model_delta { enabled: false }'
fed_test_config 0 # the aggregator runs until stopped; each worker stops after $ROUNDS
for r in "${REGIONS[@]}"; do
    FED_WORKER_TRAINER="external {
      command: [\"$TPY\", \"$FA_SRC/examples/pytorch-cnn/train.py\", \"--local-steps\", \"15\",
                \"--batch-size\", \"32\", \"--holdout\", \"0.05\", \"--threads\", \"1\"]
      mode: TRAINER_LONG_LIVED timeout_s: 180 start_timeout_s: 180
      env: [\"PYTHONPATH=$PYTHONPATH\", \"OMP_NUM_THREADS=1\",
            \"FEDAGG_DATA_TRAIN_IMAGES=$D/data/$r/train-images-idx3-ubyte.gz\",
            \"FEDAGG_DATA_TRAIN_LABELS=$D/data/$r/train-labels-idx1-ubyte.gz\"] }" \
        fed_write_worker "$D" "$r" "$PORT" "$ALL" "rounds: $ROUNDS"
done
fed_start_aggregator "$D"
for r in "${REGIONS[@]}"; do fed_start_worker "$D" "$r"; done
fed_wait_rounds "$D" "$ROUNDS" 240 || fail "$ROUNDS rounds did not complete"
for n in $(seq 1 "$ROUNDS"); do
    round_line "$n" | grep -q 'participants=3 dropped=0' || fail "round $n: $(round_line "$n")"
done
for r in "${REGIONS[@]}"; do
    s=0
    wait "$(fed_worker_pid "$r")" || s=$?
    [ "$s" = 0 ] || fail "the $r worker exited with status $s"
done
! grep -h 'level=error' "$D"/logs/*.log || fail "errors in the logs"

# The published models and their masters.
for v in $(seq 1 "$ROUNDS"); do
    m=$(printf '%s/state/model-%08d.safetensors' "$D" "$v")
    [ -f "$m" ] || fail "no $m"
    [ -f "${m/model-/master-}" ] || fail "no master ${m/model-/master-} beside $m"
    "$FA_BIN/fedagg" model inspect "$m" --json >"$D/inspect-$v.json" || fail "inspect $m"
    "$FA_BIN/fedagg" model inspect "${m/model-/master-}" --json >"$D/inspect-master-$v.json" ||
        fail "inspect the master of version $v"
done
python3 - "$D" "$ROUNDS" <<'PY' || fail "the published BF16 models"
import json, os, sys
d, rounds = sys.argv[1], int(sys.argv[2])
def floating_bytes(j, dtype):
    ts = [t for t in j["tensors"] if t["dtype"] not in ("I64",)]
    assert all(t["dtype"] == dtype for t in ts), [(t["name"], t["dtype"]) for t in ts]
    return sum(t["bytes"] for t in ts), len(ts)
f32_size = os.path.getsize(os.path.join(d, "cnn-f32.safetensors"))
for v in range(1, rounds + 1):
    m, ms = (json.load(open(os.path.join(d, "inspect-%s%d.json" % (p, v)))) for p in ("", "master-"))
    nb, n = floating_bytes(m, "BF16")
    assert n == 14 and nb == 20682 * 2, (v, n, nb)
    counters = [t for t in m["tensors"] if t["dtype"] == "I64"]
    assert [t["name"] for t in counters] == ["bn1.num_batches_tracked", "bn2.num_batches_tracked"]
    mb, mn = floating_bytes(ms, "F32")
    assert mn == 14 and mb == 2 * nb, (v, mn, mb)
    assert m["size"] < 0.55 * f32_size, "model %d: %d bytes, the F32 file %d" % (v, m["size"], f32_size)
    assert all(t["stats"]["nonfinite"] == 0 for t in m["tensors"] if "stats" in t)
    print("version %d: 14 BF16 tensors (%d bytes, the master's F32 %d), file %d bytes vs %d for F32"
          % (v, nb, mb, m["size"], f32_size))
PY

# Over HTTP/3: the native model and the float32 master, byte for byte.
get() { # get PATH OUT : prints the client's JSON line
    "$FA_BIN/fedagg-h3" get --server "127.0.0.1:$PORT" --name localhost --ca "$D/pki/ca.crt" \
        --cert "$D/pki/client-eu-west.crt" --key "$D/pki/client-eu-west.key" "$1" --out "$2" \
        2>>"$D/logs/h3.log" || fail "GET $1"
}
last=$(printf '%08d' "$ROUNDS")
for q in "" "?dtype=f32"; do
    want="$D/state/model-$last.safetensors"
    [ -n "$q" ] && want="$D/state/master-$last.safetensors"
    line=$(get "/v1/models/latest$q" "$D/got.safetensors")
    echo "$line" | grep -q '"status":200' || fail "GET /v1/models/latest$q: $line"
    sha=$(sha256sum "$want" | cut -d' ' -f1)
    echo "$line" | grep -q "\"sha256\":\"$sha\"" || fail "GET /v1/models/latest$q: not $want ($line)"
    cmp -s "$D/got.safetensors" "$want" || fail "GET /v1/models/latest$q: other bytes than $want"
    echo "ok: GET /v1/models/latest$q serves $(basename "$want") (sha256 $sha)"
done
"$FA_BIN/fedagg" model inspect "$D/got.safetensors" --json | grep -q '"dtype": "BF16"' &&
    fail "?dtype=f32 served BF16 tensors"
line=$(get "/v1/models/latest?dtype=f16" "$D/bad.bin")
echo "$line" | grep -q '"status":400' || fail "GET ?dtype=f16 is not refused: $line"

# The BF16 model is the master rounded to nearest even, and loads strictly.
"$TPY" - "$FA_SRC/examples/pytorch-cnn" "$D/state" "$ROUNDS" <<'PY' || fail "BF16 against the master"
import os, sys
import torch
sys.path.insert(0, sys.argv[1])
import fedagg.torch as fto
from cnn import CNN
for v in range(0, int(sys.argv[3]) + 1):
    p = os.path.join(sys.argv[2], "model-%08d.safetensors" % v)
    sd = fto.load_state_dict(p)
    CNN().load_state_dict(sd, strict=True)
    if v == 0:
        continue
    master = fto.load_state_dict(p.replace("model-", "master-"))
    finer = 0
    assert list(master) == list(sd), list(master)
    for k, m in master.items():
        if not m.is_floating_point():  # the counters, as published
            assert m.dtype == sd[k].dtype == torch.int64 and torch.equal(m, sd[k]), k
            continue
        assert m.dtype == torch.float32 and sd[k].dtype == torch.bfloat16, k
        # torch's float32 -> bfloat16 conversion rounds to nearest even
        r = m.to(torch.bfloat16)
        assert torch.equal(r.view(torch.int16), sd[k].view(torch.int16)), \
            "%s of version %d is not its master rounded" % (k, v)
        finer += int((r.float() != m).sum())
    # a float32 master, not the BF16 model widened: most trained weights
    # have bits that BF16 drops
    assert finer > 20682 // 2, "version %d: only %d master weights finer than BF16" % (v, finer)
    for k in ("bn1.num_batches_tracked", "bn2.num_batches_tracked"):
        assert sd[k].dtype == torch.int64, k
print("versions 1..%s: every BF16 tensor is its float32 master rounded to nearest even; "
      "every version loads into the CNN with strict=True" % sys.argv[3])
PY

kill -TERM "$FED_AGG_PID"
s=0
wait "$FED_AGG_PID" || s=$?
[ "$s" = 0 ] || fail "the aggregator exited with status $s"
check_audit_and_versions
echo "PASS"
