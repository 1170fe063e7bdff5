#!/usr/bin/env bash
# A region's trainer output that the worker must refuse, on a small
# mixed-dtype model (F32, BF16, F16, F64 federated; an F32 buffer and an I64
# counter not federated; a BOOL mask), one refusal per round, each in another
# region: a missing, an extra, a reshaped and a retyped tensor, NaN and +Inf
# in a federated tensor.  Each is logged by that region naming the tensor,
# and the round completes without it (participants=2).  The other regions'
# outputs change the I64 counter (and the BOOL mask) every round, which must
# NOT be refused, and so does a NaN in a tensor that is not federated: the
# last round completes with all three, and the published model keeps the
# global counter.  The trainer is tests/worker/fake_trainer.py (standard
# library only) and the model is written with the kit's dependency-free
# safetensors writer: no torch or numpy needed.
source "$FA_SRC/tests/integration/fedtest.sh"

# The interpreter itself (a pyenv shim is slower to start: a round has 6 s).
PY=$(python3 -c "import sys; print(sys.executable)")
export PYTHONPATH="$FA_SRC/python"

# The model of tests/worker/test_model.h, written with the kit.
"$PY" - "$D/model.safetensors" <<'PY'
import struct, sys
from fedagg import safetensors as st
R = st.RawTensor
def bf16(v):  # exact for these values
    return struct.unpack("<H", struct.pack("<f", v)[2:])[0]
t = {
    "encoder.weight": R("F32", (4, 3), struct.pack("<12f", *[(i - 6) / 8 for i in range(12)])),
    "encoder.bias": R("BF16", (4,), struct.pack("<4H", *[bf16(0.5 - i / 4) for i in range(4)])),
    "bn.running_mean": R("F32", (4,), struct.pack("<4f", *[(i + 1) / 8 for i in range(4)])),
    "bn.num_batches_tracked": R("I64", (), struct.pack("<q", 7)),
    "head.weight": R("F16", (2, 4), struct.pack("<8e", *[i / 4 - 1 for i in range(8)])),
    "head.bias": R("F64", (2,), struct.pack("<2d", 1.5, -2.0)),
    "mask": R("BOOL", (3,), bytes([1, 0, 1])),
}
st.save_raw(t, sys.argv[1], {"format": "pt"})
PY

# Round -> the region that refuses and how (fake_trainer.py's modes); every
# other region trains "ok" (floating w' = 0.5 w + 0.25, counter + 1, mask
# negated).  Round 7: eu-west writes NaN into bn.running_mean (not federated).
cat >"$D/schedule" <<'EOF'
1 eu-west missing
2 us-east extra
3 ap-south badshape
4 eu-west baddtype
5 us-east nan
6 ap-south inf
7 eu-west nanlocal
EOF
cat >"$D/trainer.sh" <<EOF
#!/bin/sh
# trainer.sh REGION: fake_trainer.py in this round's mode for REGION.
mode=\$(awk -v r="\$FEDAGG_ROUND" -v g="\$1" '\$1 == r && \$2 == g { print \$3 }' "$D/schedule")
exec "$PY" "$FA_SRC/tests/worker/fake_trainer.py" "\${mode:-ok}"
EOF
export FED_MODEL='init_file: "model.safetensors" federated { exclude: ["bn.*"] }'
export FED_EVALUATION='every: 1'
export FED_WORKER_TRAINER="external { command: [\"sh\", \"$D/trainer.sh\", \"@REGION@\"] timeout_s: 60 }"
# A refusing region never advertises: its round closes at the advertise
# deadline.  The fake trainer takes a fraction of a second; 6 s still
# tolerates a loaded machine.
export FED_ROUND="min_regions: 2
  threshold: 2
  advertise_deadline_ms: 6000
  shares_deadline_ms: 8000
  masked_deadline_ms: 8000
  consistency_deadline_ms: 8000
  unmask_deadline_ms: 8000"
fed_test_config 7
"$FA_BIN/fedagg" config check "$D/aggregator.textproto" >/dev/null || fail "aggregator config"
"$FA_BIN/fedagg" config check "$D/worker-eu-west.textproto" >/dev/null || fail "worker config"
fed_start_aggregator "$D"
for r in "${REGIONS[@]}"; do fed_start_worker "$D" "$r"; done
fed_wait_rounds "$D" 7 150 || fail "seven rounds did not complete"

# Each refusal: in the refusing region's log, with the tensor named; the
# round without that region.
check_refusal() { # ROUND REGION PATTERN
    local n=$1 r=$2 pat=$3 log="$D/logs/worker-$2.log"
    grep 'msg="local round failed; this region skips the round"' "$log" | grep -q -- "$pat" ||
        fail "round $n: no refusal matching \"$pat\" in $log: $(grep 'level=error' "$log" | tail -3)"
    round_line "$n" | grep -q 'participants=2 ' || fail "round $n: $(round_line "$n")"
    echo "ok: round $n, $r refused: $(grep -o -- "$pat" "$log" | head -1); round completed with 2"
}
check_refusal 1 eu-west "missing tensor 'head.bias'"
check_refusal 2 us-east "extra tensor 'extra.weight'"
check_refusal 3 ap-south "tensor 'encoder.weight' has shape \[3, 4\], the model's is \[4, 3\]"
check_refusal 4 eu-west "tensor 'encoder.bias' is F32, the model's is BF16"
check_refusal 5 us-east "tensor 'head.weight': element 5 is NaN"
check_refusal 6 ap-south "tensor 'encoder.weight': element 2 is +inf"
# Exactly those six refusals, nothing else refused (the counter changes
# every round in every region, and round 7 has NaN in a local buffer).
n=$(cat "$D"/logs/worker-*.log | grep -c 'msg="local round failed' || true)
[ "$n" = 6 ] || fail "$n refusals, expected 6: $(grep -h 'msg="local round failed' "$D"/logs/worker-*.log)"
round_line 7 | grep -q 'participants=3 ' || fail "round 7 (counters changed, NaN in a local " \
    "buffer: nothing to refuse): $(round_line 7)"
echo "ok: changed I64 counters and BOOL masks, a NaN in a buffer that is not federated: accepted"

wait "$FED_AGG_PID" || fail "the aggregator exited with status $?"
# The published model: the global counter and mask (INTEGERS_KEEP_GLOBAL),
# the federated tensors trained, every table entry as in version 0.
"$PY" - "$D/model.safetensors" "$D/state" <<'PY' || fail "the published model"
import glob, os, struct, sys
from fedagg import safetensors as st
init = st.load_raw(sys.argv[1])
models = sorted(glob.glob(os.path.join(sys.argv[2], "**", "model-*.safetensors"), recursive=True),
                key=lambda p: int(p.rsplit("-", 1)[1].split(".")[0]))
assert models, "no published model"
last = st.load_raw(models[-1])
assert int(st.read_metadata(models[-1]).get("fedagg.version", "0")) == 7, models[-1]
assert list(last) == list(init), (list(last), list(init))
for k, t in init.items():
    assert (last[k].dtype, tuple(last[k].shape)) == (t.dtype, tuple(t.shape)), k
assert struct.unpack("<q", last["bn.num_batches_tracked"].data)[0] == 7, "counter changed"
assert last["mask"].data == bytes([1, 0, 1]), "mask changed"
assert last["bn.running_mean"].data == init["bn.running_mean"].data, "buffer changed"
for k in ("encoder.weight", "encoder.bias", "head.weight", "head.bias"):
    assert last[k].data != init[k].data, k + " did not train"
print("published %s: counter 7, mask and buffer as version 0, federated tensors trained"
      % os.path.basename(models[-1]))
PY
check_audit_and_versions
echo "PASS"
