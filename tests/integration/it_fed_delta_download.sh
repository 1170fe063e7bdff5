#!/usr/bin/env bash
# The quantised-delta download (docs/model.md): regions and aggregator hold
# bit-identical weights after 20 rounds.  With `model_delta { enabled: true }`
# the aggregator publishes every version v also as a delta of 4- or 8-bit
# steps against v-1, and defines model-<v> as what that delta rebuilds
# (model/delta.h).  The config names no width, so this runs the default
# (DELTA_BITS, when set, names one: it_fed_delta_download_8bit.sh).
# Three regions download version 0 whole and every later one as a delta
# (GET /v1/models/latest?delta_from=v-1), rebuild it and check its SHA-256
# against the full model's and the signed audit log.  Checked here:
#   - every region rebuilt its versions from deltas (log lines with
#     encoding=delta), each about a quarter (8 bits) or an eighth (4 bits)
#     of the full file's bytes, and every delta file in the store says that
#     width (fedagg.delta.bits);
#   - every version a region rebuilt or downloaded, round by round, has the
#     SHA-256 of the aggregator's published model-<v> (the region's log
#     names the digest of the bytes it wrote), and at the end the file each
#     region holds is the store's file of its version, byte for byte;
#   - a region whose held model no longer matches (test switch
#     worker-damage-held-model flips a bit of its version 5) gets a delta
#     that does not apply, says so, downloads version 6 whole and goes on
#     with deltas; the metrics files count both;
#   - the audit log verifies.
source "$FA_SRC/tests/integration/fedtest.sh"
fed_need_test_hooks

ROUNDS=20
# the width the delta files must say: the config's default unless named
DEFAULT_BITS=4
WANT_BITS=${DELTA_BITS:-$DEFAULT_BITS}
# rounds 0: the aggregator runs on until stopped, once every region holds
# version $ROUNDS (the model of round $ROUNDS's result)
FED_AGG_EXTRA="model_delta { enabled: true ${DELTA_BITS:+bits: $DELTA_BITS }block: 256 }" \
    fed_test_config 0
# keep every version, to compare each region's model with the store's
sed -i 's/keep_versions: 5/keep_versions: 30/' "$D/aggregator.textproto"
for r in "${REGIONS[@]}"; do
    fed_write_worker "$D" "$r" "$PORT" "$ALL" "metrics_file: \"$D/$r.prom\""
done
agg="$D/logs/aggregator.log"
victim=eu-west
fed_start_aggregator "$D"
for r in "${REGIONS[@]}"; do
    if [ "$r" = "$victim" ]; then
        start_worker_fp "$r" "worker-damage-held-model=5"
    else
        fed_start_worker "$D" "$r"
    fi
done
fed_wait_rounds "$D" "$ROUNDS" 300 || fail "$ROUNDS rounds did not complete"
for n in $(seq 1 "$ROUNDS"); do
    round_line "$n" | grep -q 'participants=3 dropped=0' || fail "round $n: $(round_line "$n")"
done
for r in "${REGIONS[@]}"; do
    wait_log "$D/logs/worker-$r.log" "msg=\"global model downloaded\" .* version=$ROUNDS " 60
done
fed_stop_all

# Round by round: what each region wrote against the store's files.
python3 - "$D" "$victim" "$WANT_BITS" "${REGIONS[@]}" <<'PY' || fail "regions and aggregator differ"
import hashlib, json, os, re, struct, sys
d, victim, bits, regions = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
def sha(p):
    return hashlib.sha256(open(p, "rb").read()).hexdigest()
def header(p):
    b = open(p, "rb").read(1 << 20)
    return json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])
store, n_delta_files = {}, 0
for f in os.listdir(os.path.join(d, "state")):
    m = re.fullmatch(r"model-(\d{8})\.safetensors", f)
    if m:
        store[int(m.group(1))] = sha(os.path.join(d, "state", f))
    if re.fullmatch(r"delta-(\d{8})\.safetensors", f):
        h = header(os.path.join(d, "state", f))
        assert h["__metadata__"]["fedagg.delta.bits"] == str(bits), f"{f}: {h['__metadata__']}"
        for k, t in h.items():
            if k.startswith("q."):
                assert t["dtype"] == ("U8" if bits == 4 else "I8"), f"{f}: {k} is {t}"
        n_delta_files += 1
assert n_delta_files >= 20, f"{n_delta_files} delta files in the store"
full = os.path.getsize(os.path.join(d, "state", "model-00000010.safetensors"))
pairs = 0
for r in regions:
    lines = [l for l in open(os.path.join(d, "logs", f"worker-{r}.log"))
             if 'msg="global model downloaded"' in l]
    kv = [dict(re.findall(r"(\w+)=(\S+)", l)) for l in lines]
    deltas = [x for x in kv if x["encoding"] == "delta"]
    for x in kv:
        v = int(x["version"])
        assert v in store, f"{r}: version {v} not in the store"
        assert x["sha256"] == store[v], f"{r}: version {v}: region wrote {x['sha256']}, aggregator published {store[v]}"
        pairs += 1
    for x in deltas:
        b = int(x["bytes"])
        # steps (1 or 1/2 byte) and scales (4/256) per 4-byte parameter, and the header
        assert b < full * (0.30 if bits == 8 else 0.16), f"{r}: a delta of {b} bytes for a model of {full}"
    want = 19 if r == victim else 20
    assert len(deltas) >= want, f"{r}: {len(deltas)} versions rebuilt from deltas, fewer than {want}"
    # the held file now, against the store's of its version
    held = os.path.join(d, f"worker-{r}", "global.safetensors")
    b = open(held, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    v = int(json.loads(b[8:8 + n])["__metadata__"]["fedagg.version"])
    assert v >= 20, f"{r} holds version {v}, not 20 or later"
    assert hashlib.sha256(b).hexdigest() == store[v], f"{r}: held version {v} differs from the store's"
    print(f"{r}: {len(kv)} downloads ({len(deltas)} deltas, {sum(int(x['bytes']) for x in deltas) // max(1, len(deltas))} bytes each vs {full} whole); holds version {v}, identical to the store's")
print(f"ok: {pairs} downloads, each the aggregator's published file byte for byte; {n_delta_files} delta files of {bits} bits")
PY

# The victim: its delta did not apply to the damaged model; it said so and
# took the full file, then deltas again.
vlog="$D/logs/worker-$victim.log"
grep -q 'msg="TEST SWITCH: damaged the held model' "$vlog" || fail "the test switch did not act"
grep -q 'level=warn msg="model delta refused; downloading the full model" .*from=5 ' "$vlog" ||
    fail "$victim did not refuse the delta against its damaged model: $(grep -E 'delta|version=6 ' "$vlog" | head -5)"
grep 'msg="model delta refused' "$vlog" | grep -q 'the delta applies to the model with SHA-256' ||
    fail "the refusal does not say why: $(grep 'msg="model delta refused' "$vlog")"
grep -q 'msg="global model downloaded" .* version=6 encoding=full' "$vlog" ||
    fail "$victim did not download version 6 whole"
grep -q 'msg="global model downloaded" .* version=8 encoding=delta' "$vlog" ||
    fail "$victim did not return to deltas"
grep -q "^fedagg_worker_model_delta_fallbacks_total{region=\"$victim\"} 1$" "$D/$victim.prom" ||
    fail "the fallback is not counted: $(grep fallbacks "$D/$victim.prom")"
for r in "${REGIONS[@]}"; do
    grep -q "^fedagg_worker_model_downloads_delta_total{region=\"$r\"} [12][0-9]$" "$D/$r.prom" ||
        fail "$r's metrics count too few deltas: $(grep model_downloads "$D/$r.prom")"
done
echo "ok: $(grep 'msg="model delta refused' "$vlog" | cut -c1-300)"

# The store keeps the delta files beside the versions.
[ -f "$D/state/delta-00000020.safetensors" ] || fail "no delta file of version 20 in the store"
# the rounds' audit records name the models the regions checked
grep -q 'msg="model proven in the signed audit log" .*version=20 ' "$D/logs/worker-us-east.log" ||
    fail "us-east did not prove version 20 in the audit log"
! grep -h 'level=error' "$D"/logs/*.log || fail "errors in the logs"
check_audit_and_versions
echo "PASS"
