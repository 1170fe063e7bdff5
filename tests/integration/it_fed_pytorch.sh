#!/usr/bin/env bash
# Three regions federate the PyTorch CNN of examples/pytorch-cnn (F32 weights
# and BatchNorm buffers, I64 num_batches_tracked; version 0 from its
# make_init.py as model.init_file) through the Python kit, with secure
# aggregation, each region in another trainer mode:
#   eu-west   one-shot     examples/pytorch-cnn/train.py, a process per round
#   us-east   long-lived   the same trainer, TRAINER_LONG_LIVED
#   ap-south  torchrun     examples/pytorch-ddp/train.py under
#             python3 -m fedagg.torchrun --standalone --nproc_per_node=2 (one-shot)
# Checks: every round completes with all three; the unmasked sum equals the
# plain sum of the regions' quantised updates bit for bit; every published
# model loads into the CNN with load_state_dict(strict=True) with int64
# counters; federated evaluation (status federated_eval of 3 regions,
# fedagg_fedeval_accuracy, the reports verified by fedagg audit verify); the
# aggregator's evaluator command (examples/pytorch-cnn/evaluate.py) gives
# central_eval; the audit log verifies and the versions are contiguous.
# shellcheck source=deploy/fedlib.sh
source "$FA_SRC/deploy/fedlib.sh"
TPY=$(fed_torch_python) || { echo "SKIP: no python3 with torch and numpy here"; exit 77; }
source "$FA_SRC/tests/integration/fedtest.sh"
fed_need_test_hooks
export PYTHONPATH="$FA_SRC/python"
export OMP_NUM_THREADS=1
ROUNDS=2
STEPS=${FED_TORCH_STEPS:-15}

"$TPY" "$FA_SRC/examples/pytorch-cnn/make_init.py" --out "$D/cnn-init.safetensors" \
    >"$D/make_init.log" 2>&1 || fail "make_init.py: $(cat "$D/make_init.log")"
export FED_MODEL='init_file: "cnn-init.safetensors"'
export FED_OPTIMIZER='kind: FEDAVG learning_rate: 1.0'
# Every region's weight 1 (15 steps of 32 examples); adaptive ranges per tensor.
export FED_QUANT='bits: 16 max_examples: 480'
export FED_EVALUATION="command: [\"$TPY\", \"$FA_SRC/examples/pytorch-cnn/evaluate.py\", \"{input}\",
    \"{output}\", \"--examples\", \"2000\", \"--threads\", \"1\"] timeout_s: 120"
# A round starts when all three have trained (a one-shot region imports torch
# every round, the torchrun one three times): generous deadlines that the
# phases do not wait for when everybody is there.  The advertisement's is
# the longest: round 1's attempt opens as the aggregator starts, and the
# torchrun region, which starts three Pythons with torch before it can
# advertise, took over 60 s when the suite ran beside it on 2 cores.
export FED_ROUND="min_regions: 2
  threshold: 2
  advertise_deadline_ms: 180000
  shares_deadline_ms: 20000
  masked_deadline_ms: 20000
  consistency_deadline_ms: 20000
  unmask_deadline_ms: 20000"
fed_test_config 0 # the aggregator runs until stopped; each worker stops after $ROUNDS

trainer() { # trainer REGION MODE SCRIPT-AND-LAUNCHER...
    local r=$1 mode=$2 args=() a
    shift 2
    for a in "$@" --local-steps "$STEPS" --batch-size 32 --holdout 0.05 --threads 1; do
        args+=("\"$a\"")
    done
    printf 'external { command: [%s] mode: %s timeout_s: 180 start_timeout_s: 180
      env: ["PYTHONPATH=%s", "FEDAGG_DEVICE=cpu", "OMP_NUM_THREADS=1",
            "FEDAGG_DATA_TRAIN_IMAGES=%s/data/%s/train-images-idx3-ubyte.gz",
            "FEDAGG_DATA_TRAIN_LABELS=%s/data/%s/train-labels-idx1-ubyte.gz"] }' \
        "$(IFS=,; echo "${args[*]}")" "$mode" "$PYTHONPATH" "$D" "$r" "$D" "$r"
}
FED_WORKER_TRAINER=$(trainer eu-west TRAINER_ONE_SHOT "$TPY" "$FA_SRC/examples/pytorch-cnn/train.py") \
    fed_write_worker "$D" eu-west "$PORT" "$ALL" "rounds: $ROUNDS"
FED_WORKER_TRAINER=$(trainer us-east TRAINER_LONG_LIVED "$TPY" "$FA_SRC/examples/pytorch-cnn/train.py") \
    fed_write_worker "$D" us-east "$PORT" "$ALL" "rounds: $ROUNDS"
FED_WORKER_TRAINER=$(trainer ap-south TRAINER_ONE_SHOT "$TPY" -m fedagg.torchrun --standalone \
    --nproc_per_node=2 "$FA_SRC/examples/pytorch-ddp/train.py") \
    fed_write_worker "$D" ap-south "$PORT" "$ALL" "rounds: $ROUNDS"
for f in "$D"/*.textproto; do
    "$FA_BIN/fedagg" config check "$f" >/dev/null || fail "config $f does not check"
done

export FEDAGG_DEBUG_DUMP_DIR="$D/dump"
mkdir -p "$FEDAGG_DEBUG_DUMP_DIR"
fed_start_aggregator "$D"
for r in "${REGIONS[@]}"; do fed_start_worker "$D" "$r"; done
fed_wait_rounds "$D" "$ROUNDS" 400 || fail "$ROUNDS rounds did not complete"
for n in $(seq 1 "$ROUNDS"); do
    round_line "$n" | grep -q 'participants=3 dropped=0' || fail "round $n: $(round_line "$n")"
done
# Each worker stops after its rounds (the long-lived trainer is shut down).
for r in "${REGIONS[@]}"; do
    pid=$(fed_worker_pid "$r")
    s=0
    wait "$pid" || s=$?
    [ "$s" = 0 ] || fail "the $r worker exited with status $s"
    c=$(grep -c 'msg="round done".*proof=verified' "$D/logs/worker-$r.log" || true)
    [ "$c" = "$ROUNDS" ] || fail "$r proved $c of $ROUNDS rounds"
done
grep -q 'torchrun\|rank 1' "$D/worker-ap-south/external/external-trainer.log" ||
    fail "ap-south's trainer did not run under torchrun"
grep -q '2 ranks (gloo)' "$D/worker-ap-south/external/external-trainer.log" ||
    fail "ap-south's trainer did not run 2 ranks"
! grep -h 'level=error' "$D"/logs/*.log || fail "errors in the logs"

# Federated evaluation: the regions' reports on version ROUNDS-1 (sent in
# the last round; the workers stopped before evaluating the last version).
# Central evaluation: the evaluator runs after every commit, beside the
# rounds: wait for one of the last version.
status() {
    "$FA_BIN/fedagg-h3" get --server "127.0.0.1:$PORT" --name localhost --ca "$D/pki/ca.crt" \
        --cert "$D/pki/client-us-east.crt" --key "$D/pki/client-us-east.key" /v1/status \
        --out "$D/status.bin" >/dev/null 2>&1 || fail "GET /v1/status"
    protoc --decode=fedagg.Status -I "$FA_SRC/proto" "$FA_SRC/proto/fedagg.proto" \
        <"$D/status.bin" >"$D/status.txt"
}
start=$SECONDS
until status && grep -A1 '^central_eval {' "$D/status.txt" | grep -q "model_version: $ROUNDS"; do
    [ $((SECONDS - start)) -lt 60 ] || fail "no central evaluation of version $ROUNDS: $(cat "$D/status.txt")"
    sleep 1
done
python3 - "$D/status.txt" "$ROUNDS" <<'PY' || fail "status: $(cat "$D/status.txt")"
import re, sys
text, rounds = open(sys.argv[1]).read(), int(sys.argv[2])
def block(name):
    m = re.search(r"^%s \{\n(.*?)^\}" % name, text, re.S | re.M)
    assert m, "no %s in status" % name
    return dict(re.findall(r"^  (\w+): (\S+)$", m.group(1), re.M))
assert re.search(r"^rounds_completed: %d$" % rounds, text, re.M), "rounds_completed"
assert re.search(r"^model_version: %d$" % rounds, text, re.M), "model_version"
fe, ce = block("federated_eval"), block("central_eval")
assert fe["model_version"] == str(rounds - 1) and fe["regions"] == "3", fe
assert 0 < float(fe["accuracy"]) <= 1 and int(fe["num_examples"]) > 1000, fe
assert ce["regions"] == "1" and ce["num_examples"] == "2000", ce
assert 0.3 < float(ce["accuracy"]) <= 1, "central accuracy %s after %d rounds" % (ce["accuracy"], rounds)
print("status: federated_eval of version %s by %s regions, accuracy %s; central_eval of version %s,"
      " accuracy %s" % (fe["model_version"], fe["regions"], fe["accuracy"], ce["model_version"],
                        ce["accuracy"]))
PY
curl -sf "http://127.0.0.1:$MPORT/metrics" >"$D/metrics.txt" || fail "GET /metrics"
grep -q '^fedagg_fedeval_accuracy 0\.[0-9]' "$D/metrics.txt" || fail "no fedagg_fedeval_accuracy"
grep -q '^fedagg_fedeval_regions 3$' "$D/metrics.txt" || fail "fedagg_fedeval_regions is not 3"
grep -q '^fedagg_central_eval_accuracy 0\.[0-9]' "$D/metrics.txt" ||
    fail "no fedagg_central_eval_accuracy"
grep -q 'msg="evaluation report accepted"' "$D/logs/aggregator.log" || fail "no report accepted"

# The aggregator stops cleanly on SIGTERM.
kill -TERM "$FED_AGG_PID"
s=0
wait "$FED_AGG_PID" || s=$?
[ "$s" = 0 ] || fail "the aggregator exited with status $s"
grep -q 'msg="aggregator stopped"' "$D/logs/aggregator.log" || fail "no clean stop"

# Bit for bit: the aggregator's unmasked ring sum against the plain sum of
# the quantised inputs the regions masked (the debug dump hook).
python3 - "$FEDAGG_DEBUG_DUMP_DIR" "$ROUNDS" <<'PY' || fail "the unmasked sums"
import glob, os, struct, sys
d, rounds = sys.argv[1], int(sys.argv[2])
sums = sorted(glob.glob(os.path.join(d, "sum-r*-a*.u32")))
assert len(sums) == rounds, f"expected {rounds} sums, found {sums}"
for path in sums:
    tag = os.path.basename(path)[4:-4]           # r<round>-a<attempt>
    mask = (1 << int(open(path + ".bits").read())) - 1
    inputs = sorted(glob.glob(os.path.join(d, f"input-*-{tag}.u32")))
    assert len(inputs) == 3, f"{tag}: expected 3 inputs, found {inputs}"
    total = None
    for p in inputs:
        v = struct.unpack(f"<{os.path.getsize(p)//4}I", open(p, "rb").read())
        total = list(v) if total is None else [(a + b) & mask for a, b in zip(total, v)]
    got = struct.unpack(f"<{os.path.getsize(path)//4}I", open(path, "rb").read())
    assert list(got) == [t & mask for t in total], f"{tag}: unmasked sum differs from the plain sum"
    # the CNN's 20,682 floating coordinates (every one federated) and the weight
    assert len(got) == 20682 + 1, f"{tag}: {len(got)} coordinates"
    nz = sum(1 for v in got if v)
    assert nz > len(got) // 2, f"{tag}: only {nz} of {len(got)} coordinates nonzero"
    print(f"{tag}: unmasked sum of {len(got)} coordinates ({nz} nonzero) equals the plain sum")
PY

# Every published model is the CNN's state dict: strict load, int64 counters,
# the table of version 0, trained (the last one differs from version 0).
"$TPY" - "$FA_SRC/examples/pytorch-cnn" "$D/cnn-init.safetensors" "$D/state" "$ROUNDS" <<'PY' ||
import glob, os, sys
import torch
sys.path.insert(0, sys.argv[1])
import fedagg.torch as fto
from cnn import CNN
init = fto.load_state_dict(sys.argv[2])
models = sorted(glob.glob(os.path.join(sys.argv[3], "model-*.safetensors")))
assert models and models[-1].endswith("model-%08d.safetensors" % int(sys.argv[4])), models
for path in models:
    sd = fto.load_state_dict(path)
    net = CNN()
    net.load_state_dict(sd, strict=True)
    assert list(sd) == list(init), path
    for k, v in sd.items():
        assert v.dtype == init[k].dtype and v.shape == init[k].shape, (path, k)
    for k in ("bn1.num_batches_tracked", "bn2.num_batches_tracked"):
        assert sd[k].dtype == torch.int64 and sd[k].shape == (), (path, k)
        assert int(sd[k]) == 0, (path, k, "the global counter is kept")
last = fto.load_state_dict(models[-1])
moved = [k for k in init if init[k].is_floating_point() and not torch.equal(init[k], last[k])]
assert len(moved) == 14, "tensors trained: %s" % moved
print("%d published models load into the CNN with strict=True, int64 counters; %d tensors trained"
      % (len(models), len(moved)))
PY
    fail "the published models"
check_audit_and_versions
grep -q " $((3 * ROUNDS)) evaluation reports verified" "$D/logs/audit-verify.log" ||
    fail "audit verify: not $((3 * ROUNDS)) evaluation reports verified: $(cat "$D/logs/audit-verify.log")"
tail -1 "$D/logs/audit-verify.log"
echo "PASS"
