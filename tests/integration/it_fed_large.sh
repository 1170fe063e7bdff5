#!/usr/bin/env bash
# A federation whose model is larger than 2^31 bytes: the built-in MLP
# 784-754700-10 (599 986 510 float32 parameters, 2.4 GB; fc1.weight alone
# is 2.37 GB), one region, two secure rounds with FedAdam through the
# aggregator and a worker.  The built-in trainer could not train it here,
# so the region's trainer is tests/integration/large_trainer.py, which
# writes the output without training (every weight negated, a streaming
# pass over the input): the test is about the federation path at that size
# -- the model download, the worker's update, the masked upload, the
# aggregator's journals in files, the streamed decode, optimizer step and
# commit (model and optimizer state read back from the previous version's
# files), the audit record -- not about learning.
#
# Checked: both rounds complete with the region; version 2's files hold
# every tensor, larger than 2^31 bytes; sampled coordinates of version 2's
# float32 master weights (below and beyond the 2^31-byte offset) equal
# FedAdam applied twice to the negation deltas, within the 16-bit
# quantiser's error, and the published version 2 (the regions' delta
# reconstruction, model/delta.h) is within a delta step of them; the audit
# log verifies; the aggregator's peak RSS stays within 6 bytes per parameter.
#
# Label `large` (make check-large): about 10 minutes on 2 cores (337 s for
# the two rounds here, after ~1 min writing version 0), 10 GB
# of memory and 25 GB of disk; not part of `make check`.
source "$FA_SRC/tests/integration/fedtest.sh"

H=754700
N=$((784 * H + H + 10 * H + 10))
REGIONS=(eu-west)
ALL=eu-west

need_mem=$((12 * N))
avail=$(($(awk '/^MemAvailable:/ { print $2 }' /proc/meminfo) * 1024))
if [ "$avail" -lt "$need_mem" ]; then
    echo "SKIP: needs ~$((need_mem >> 20)) MiB of memory, $((avail >> 20)) MiB available" >&2
    exit 77
fi
free_disk=$(df -B1 --output=avail "$D" | tail -1)
if [ "$free_disk" -lt $((44 * N)) ]; then
    echo "SKIP: needs ~$((44 * N >> 20)) MiB of disk in $D, $((free_disk >> 20)) MiB free" >&2
    exit 77
fi

PY=$(python3 -c "import sys; print(sys.executable)")
export FED_MODEL="input_dim: 784 hidden: [$H] output_dim: 10 init_seed: 1"
export FED_OPTIMIZER="kind: FEDADAM learning_rate: 0.01 beta1: 0.9 beta2: 0.99 tau: 0.001"
# One fixed range [-1, 1]: the deltas (-2 w, |w| < 0.5 for He's init) fit
# it unclipped; a region of weight 1.
export FED_QUANT="bits: 16 range: RANGE_FIXED clip_value: 1.0 max_examples: 1"
export FED_EVALUATION='every: 1'
export FED_WORKER_TRAINER="external { command: [\"$PY\", \"$FA_SRC/tests/integration/large_trainer.py\"] timeout_s: 1800 }"
export FED_ROUND="min_regions: 1
  threshold: 1
  advertise_deadline_ms: 1800000
  shares_deadline_ms: 600000
  masked_deadline_ms: 1800000
  consistency_deadline_ms: 600000
  unmask_deadline_ms: 600000"
fed_setup "$D" "${REGIONS[@]}"
PORT=$(fed_free_port udp)
MPORT=$(fed_free_port tcp)
fed_write_aggregator "$D" "$PORT" "$MPORT" 2 "${REGIONS[@]}"
fed_write_worker "$D" eu-west "$PORT" "$ALL"
# Every version retained: the check reads versions 0 and 2.
sed -i 's/keep_versions: 5/keep_versions: 3/' "$D/aggregator.textproto"

start=$SECONDS
fed_start_aggregator "$D"
fed_start_worker "$D" eu-west
fed_wait_rounds "$D" 2 3000 || fail "two rounds did not complete"
echo "it_fed_large: two rounds of $N parameters in $((SECONDS - start)) s" >&2
for n in 1 2; do
    round_line "$n" | grep -q 'participants=1 dropped=0' || fail "round $n: $(round_line "$n")"
done
hwm=$(($(awk '/^VmHWM:/ { print $2 }' "/proc/$FED_AGG_PID/status" 2>/dev/null || echo 0) * 1024))
wait "$FED_AGG_PID" || fail "the aggregator exited with an error"
! grep -h 'level=error' "$D"/logs/*.log || fail "errors in the logs"
[ "$hwm" -gt 0 ] || fail "no VmHWM of the aggregator"
echo "it_fed_large: aggregator peak RSS $((hwm >> 20)) MiB, $(awk -v h="$hwm" -v n="$N" \
    'BEGIN { printf "%.2f", h / n }') bytes per parameter" >&2
[ "$hwm" -le $((6 * N)) ] || fail "aggregator peak RSS $hwm bytes is over 6 bytes per parameter"

M0="$D/state/model-00000000.safetensors"
M2="$D/state/model-00000002.safetensors"
M1="$D/state/model-00000001.safetensors"
W2="$D/state/master-00000002.safetensors" # the master weights (model_delta is on by default)
[ -f "$M2" ] || fail "no version 2"
[ -f "$W2" ] || fail "no master weights of version 2"
[ -f "$M1" ] || fail "no version 1"
[ "$(stat -c %s "$M2")" -gt 2147483648 ] || fail "version 2 is not larger than 2^31 bytes"
"$FA_BIN/fedagg" model diff "$M0" "$M2" >"$D/diff.txt" || fail "version 2's table differs from version 0's"
"$FA_BIN/fedagg" audit verify "$D/state/audit.log" --pubkey "$D/keys/aggregator.pub" \
    >/dev/null || fail "audit verify"

# FedAdam twice (fresh state: m = 0, v = tau^2) on the deltas the trainer
# makes (-2 w of the model it downloaded: version 0, then the published
# version 1), in float64, against version 2's master weights at sampled
# coordinates of every tensor, fc1.weight's beyond byte 2^31 among them.
"$PY" - "$M0" "$W2" "$M2" "$M1" <<'PY' || fail "version 2 is not FedAdam of the negation updates"
import json, math, struct, sys

def table(path):
    f = open(path, "rb")
    n = struct.unpack("<Q", f.read(8))[0]
    h = json.loads(f.read(n))
    h.pop("__metadata__", None)
    return f, 8 + n, h

def value(t, name, i):
    f, base, h = t
    f.seek(base + h[name]["data_offsets"][0] + 4 * i)
    return struct.unpack("<f", f.read(4))[0]

lr, b1, b2, tau = 0.01, 0.9, 0.99, 1e-3
t0, t2, tp, t1 = table(sys.argv[1]), table(sys.argv[2]), table(sys.argv[3]), table(sys.argv[4])
worst, worst_pub, checked, beyond = 0.0, 0.0, 0, 0
for name, meta in t0[2].items():
    numel = math.prod(meta["shape"]) if meta["shape"] else 1
    for k in range(200):
        i = (k * 2654435761) % numel
        w = value(t0, name, i)
        m, v = 0.0, tau * tau
        for r in range(2):
            # the region negates the model it downloaded: version 0, then
            # the published version 1 (not the master weights)
            g = -2.0 * (w if r == 0 else value(t1, name, i))
            m = b1 * m + (1 - b1) * g
            v = b2 * v + (1 - b2) * g * g
            w = w + lr * m / (math.sqrt(v) + tau)
        got = value(t2, name, i)
        # 16-bit codes over [-1, 1]: an error of 3e-5 in g moves w by far less
        err = abs(got - w)
        worst = max(worst, err)
        checked += 1
        beyond += t0[2][name]["data_offsets"][0] + 4 * i >= 2 ** 31
        if err > 1e-4 + 1e-3 * abs(w):
            sys.exit(f"{name}[{i}]: {got} in version 2's master weights, FedAdam gives {w}")
        # the published model: the master weights up to half a 4-bit delta
        # step (a block's largest change, about two FedAdam steps of lr, / 7)
        pub = value(tp, name, i)
        worst_pub = max(worst_pub, abs(pub - got))
        if abs(pub - got) > 2 * lr / 7:
            sys.exit(f"{name}[{i}]: {pub} published in version 2, {got} in its master weights")
assert beyond > 0, "no coordinate beyond byte 2^31 sampled"
print(f"it_fed_large: {checked} coordinates ({beyond} beyond byte 2^31) within {worst:.2e}, "
      f"published within {worst_pub:.2e} of them", file=sys.stderr)
PY
echo "PASS it_fed_large"
