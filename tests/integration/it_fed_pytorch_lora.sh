#!/usr/bin/env bash
# The LoRA transformer of examples/lora federated by three long-lived
# PyTorch regions with only the adapters federated (model.federated include
# "*lora_*"):
#   - the federation's coordinates are the adapters' parameters;
#   - every frozen tensor is byte-identical in every published version;
#   - every adapter tensor changed;
#   - each region's upload per round (worker log "round done ... bytes_up=")
#     is at most the masked vector of the adapters ((adapter parameters + 1)
#     x ring bits / 8) plus the protocol's small messages, a fraction of
#     what the whole model would take.
# shellcheck source=deploy/fedlib.sh
source "$FA_SRC/deploy/fedlib.sh"
TPY=$(fed_torch_python) || { echo "SKIP: no python3 with torch and numpy here"; exit 77; }
source "$FA_SRC/tests/integration/fedtest.sh"
export PYTHONPATH="$FA_SRC/python"
export OMP_NUM_THREADS=1
ROUNDS=3

# An untrained base (no pretraining: seconds, not minutes) with fresh adapters.
"$TPY" "$FA_SRC/examples/lora/make_init.py" --out "$D/lora-init.safetensors" \
    --pretrain-examples 0 >"$D/make_init.log" 2>&1 || fail "make_init.py: $(cat "$D/make_init.log")"
read -r N_ALL N_LORA N_TENSORS < <("$TPY" - "$D/lora-init.safetensors" <<'PY'
import sys
from fedagg import safetensors as st
t = st.load_raw(sys.argv[1])
numel = lambda x: len(x.data) // st.dtype_size(x.dtype)
print(sum(numel(x) for x in t.values()), sum(numel(x) for k, x in t.items() if "lora_" in k),
      sum(1 for k in t if "lora_" in k))
PY
)
echo "model: $N_ALL parameters, $N_LORA of them in $N_TENSORS adapter tensors"
[ "$N_TENSORS" = 26 ] && [ "$N_LORA" -gt 0 ] && [ $((N_LORA * 5)) -lt "$N_ALL" ] ||
    fail "unexpected model: $N_ALL parameters, $N_LORA in $N_TENSORS adapter tensors"

export FED_MODEL='init_file: "lora-init.safetensors" federated { include: ["*lora_*"] }'
export FED_OPTIMIZER='kind: FEDAVG learning_rate: 1.0'
export FED_QUANT='bits: 16 max_examples: 320'
export FED_EVALUATION='every: 1'
export FED_ROUND="min_regions: 2
  threshold: 2
  advertise_deadline_ms: 60000
  shares_deadline_ms: 20000
  masked_deadline_ms: 20000
  consistency_deadline_ms: 20000
  unmask_deadline_ms: 20000"
fed_test_config 0 # the aggregator runs until stopped; each worker stops after $ROUNDS
for r in "${REGIONS[@]}"; do
    FED_WORKER_TRAINER="external {
      command: [\"$TPY\", \"$FA_SRC/examples/lora/train.py\", \"--local-steps\", \"10\",
                \"--batch-size\", \"32\", \"--holdout\", \"0.02\", \"--threads\", \"1\"]
      mode: TRAINER_LONG_LIVED timeout_s: 180 start_timeout_s: 180
      env: [\"PYTHONPATH=$PYTHONPATH\", \"OMP_NUM_THREADS=1\",
            \"FEDAGG_DATA_TRAIN_IMAGES=$D/data/$r/train-images-idx3-ubyte.gz\",
            \"FEDAGG_DATA_TRAIN_LABELS=$D/data/$r/train-labels-idx1-ubyte.gz\"] }" \
        fed_write_worker "$D" "$r" "$PORT" "$ALL" "rounds: $ROUNDS"
done
"$FA_BIN/fedagg" model inspect "$D/lora-init.safetensors" --config "$D/aggregator.textproto" \
    >"$D/inspect.txt" || fail "fedagg model inspect --config"
grep -q "^federated: $N_TENSORS tensors, $N_LORA coordinates" \
    "$D/inspect.txt" || fail "inspect does not count $N_LORA federated coordinates: $(tail -4 "$D/inspect.txt")"

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

# The federation's coordinates and ring: GET /v1/federation.
"$FA_BIN/fedagg-h3" get --server "127.0.0.1:$PORT" --name localhost --ca "$D/pki/ca.crt" \
    --cert "$D/pki/client-eu-west.crt" --key "$D/pki/client-eu-west.key" /v1/federation \
    --out "$D/info.bin" >/dev/null 2>&1 || fail "GET /v1/federation"
protoc --decode=fedagg.FederationInfo -I "$FA_SRC/proto" "$FA_SRC/proto/fedagg.proto" \
    <"$D/info.bin" >"$D/info.txt"
params=$(sed -n 's/^num_params: //p' "$D/info.txt")
bits=$(sed -n 's/^  ring_bits: //p' "$D/info.txt")
[ "$params" = "$N_LORA" ] || fail "the federation has $params coordinates, the adapters $N_LORA"
[ -n "$bits" ] && [ "$bits" -ge 16 ] && [ "$bits" -le 32 ] || fail "ring bits '$bits'"
kill -TERM "$FED_AGG_PID"
s=0
wait "$FED_AGG_PID" || s=$?
[ "$s" = 0 ] || fail "the aggregator exited with status $s"

# Upload bytes: the masked adapters plus the key advertisement, shares,
# consistency signature and unmask shares (about 1.5 KiB for 3 regions).
masked=$(((N_LORA + 1) * bits / 8 + 1))
bound=$((masked + 8192))
full=$(((N_ALL + 1) * bits / 8))
for r in "${REGIONS[@]}"; do
    ups=$(grep 'msg="round done"' "$D/logs/worker-$r.log" | sed -n 's/.* bytes_up=\([0-9]*\).*/\1/p')
    [ "$(echo "$ups" | wc -l)" = "$ROUNDS" ] || fail "$r: bytes_up of $ROUNDS rounds: $ups"
    for b in $ups; do
        [ "$b" -ge "$masked" ] && [ "$b" -le "$bound" ] ||
            fail "$r uploaded $b bytes in a round: not within [$masked, $bound] (the masked adapters)"
        [ $((b * 5)) -lt "$full" ] || fail "$r uploaded $b bytes, the whole model would be $full"
    done
    echo "ok: $r uploaded $(echo "$ups" | paste -sd, -) bytes per round: the masked adapters are $masked" \
        "($N_LORA x $bits bits), the whole model would be $full"
done

# Frozen tensors byte-identical in every version; every adapter trained.
python3 - "$D/lora-init.safetensors" "$D/state" "$ROUNDS" <<'PY' || fail "the published versions"
import os, sys
from fedagg import safetensors as st
init = st.load_raw(sys.argv[1])
rounds = int(sys.argv[3])
frozen = [k for k in init if "lora_" not in k]
changed = set()
for v in range(0, rounds + 1):
    p = os.path.join(sys.argv[2], "model-%08d.safetensors" % v)
    m = st.load_raw(p)
    assert list(m) == list(init), p
    for k in frozen:
        assert m[k] == init[k], "version %d: frozen tensor %s changed" % (v, k)
    for k in init:
        if "lora_" in k:
            assert (m[k].dtype, tuple(m[k].shape)) == (init[k].dtype, tuple(init[k].shape)), k
            if m[k].data != init[k].data:
                changed.add(k)
    fed = st.read_metadata(p).get("fedagg.federated", "")
    if v > 0:
        assert fed and all(("\"%s\"" % k) in fed for k in init if "lora_" in k), fed[:200]
        assert not any(("\"%s\"" % k) in fed for k in frozen), "a frozen tensor is federated"
adapters = [k for k in init if "lora_" in k]
assert changed == set(adapters), "adapters that did not change: %s" % sorted(set(adapters) - changed)
print("versions 0..%d: %d frozen tensors byte-identical, all %d adapter tensors changed"
      % (rounds, len(frozen), len(adapters)))
PY
# The same with the CLI: the last version against version 0.
"$FA_BIN/fedagg" model diff "$D/lora-init.safetensors" \
    "$(printf '%s/state/model-%08d.safetensors' "$D" "$ROUNDS")" >"$D/diff.txt" ||
    fail "fedagg model diff: the tables differ: $(cat "$D/diff.txt")"
grep -q "^same table: .* values differ in $N_TENSORS tensors" "$D/diff.txt" ||
    fail "fedagg model diff: not the $N_TENSORS adapters changed: $(tail -1 "$D/diff.txt")"
check_audit_and_versions
echo "PASS"
