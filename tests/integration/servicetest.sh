# servicetest.sh - common setup of the aggregation service tests (sourced):
# fedtest.sh's federation as the default federation "demo" (team vision) of
# a service under $D/svc, operators alice (team vision) and bob (team nlp)
# with their certificates and operator configs, federation files, and the
# regions' workers of a created federation (today's worker on the service's
# routes for it, WorkerConfig.service_routes).
source "$FA_SRC/tests/integration/fedtest.sh"

# svc_config ROUNDS : the default federation of ROUNDS rounds (0: until
# stopped), the service around it, the operators ($SVC_AGG_EXTRA: more of
# the aggregator config).
svc_config() {
    FED_AGG_EXTRA="service { dir: \"svc\" ${SVC_BLOCK:-} }
operators: [\"alice\", \"bob\"]
teams { name: \"vision\" operators: [\"alice\"] }
teams { name: \"nlp\" operators: [\"bob\"] }
team: \"vision\"
${SVC_AGG_EXTRA:-}" fed_test_config "$1"
    "$FA_SRC/deploy/pki.sh" "$D/pki" --operators alice,bob >"$D/logs/pki-ops.log" 2>&1 ||
        fail "pki.sh --operators: $(cat "$D/logs/pki-ops.log")"
    local op
    for op in alice bob; do
        cat >"$D/op-$op.textproto" <<EOF
aggregator: "127.0.0.1:$PORT"
tls {
  cert_file: "pki/operator-$op.crt"
  key_file: "pki/operator-$op.key"
  ca_file: "pki/ca.crt"
  server_name: "localhost"
}
EOF
    done
}

# svc_fed_file ID TEAM ROUNDS [EXTRA] : $D/ID.textproto, a federation of the
# three regions (keys read by the service, relative to its dir).
svc_fed_file() {
    local r
    {
        printf 'federation_id: "%s"\nteam: "%s"\n' "$1" "$2"
        for r in "${REGIONS[@]}"; do
            printf 'regions { id: "%s" identity_public_key_file: "../keys/%s.pub" }\n' "$r" "$r"
        done
        printf 'round {\n  rounds: %s\n  %s\n}\n' "$3" "$FED_ROUND"
        printf 'model { %s }\n' "${SVC_MODEL:-input_dim: 784 hidden: [64] output_dim: 10 init_seed: 2}"
        printf 'optimizer { kind: FEDAVG learning_rate: 1.0 }\n'
        printf 'quantization { %s }\n' "$FED_QUANT"
        printf '%s\n' "${4:-}"
    } >"$D/$1.textproto"
}

# svc_op OPERATOR ARGS... : `fedagg ARGS` as that operator.
svc_op() {
    local op=$1
    shift
    "$FA_BIN/fedagg" "$@" --config "$D/op-$op.textproto"
}

# svc_start_workers ID : the three regions' workers of federation ID, on the
# service's routes for it; FEDAGG_DEBUG_DUMP_DIR of each is $D/dump/ID.
svc_start_workers() {
    local id=$1 r
    mkdir -p "$D/dump/$id"
    for r in "${REGIONS[@]}"; do
        mkdir -p "$D/worker-$id-$r"
        sed -e "s|^federation_id: .*|federation_id: \"$id\"\nservice_routes: true|" \
            -e "s|^state_dir: .*|state_dir: \"worker-$id-$r\"|" \
            "$D/worker-$r.textproto" >"$D/worker-$id-$r.textproto"
        FEDAGG_DEBUG_DUMP_DIR="$D/dump/$id" "$FA_BIN/fedagg-worker" \
            --config "$D/worker-$id-$r.textproto" >>"$D/logs/worker-$id-$r.log" 2>&1 &
        eval "SVC_WORKER_${id//[-.]/_}_${r//-/_}=$!"
        FED_PIDS+=("$!")
    done
}

# svc_stop_workers ID : SIGTERM to the workers of federation ID, and wait.
svc_stop_workers() {
    local r v p
    for r in "${REGIONS[@]}"; do
        v="SVC_WORKER_${1//[-.]/_}_${r//-/_}"
        p=${!v:-}
        [ -n "$p" ] || continue
        kill -TERM "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
}

# svc_rounds ID : rounds of federation ID completed, by the aggregator's log.
svc_rounds() {
    fed_count_lines "$D/logs/aggregator.log" "msg=\"round completed\" proc=aggregator federation=$1 "
}

# svc_wait_rounds ID N TIMEOUT_S
svc_wait_rounds() {
    local start=$SECONDS
    while [ "$(svc_rounds "$1")" -lt "$2" ]; do
        [ $((SECONDS - start)) -lt "$3" ] || fail "federation $1: $(svc_rounds "$1") of $2 rounds after $3 s"
        kill -0 "$FED_AGG_PID" 2>/dev/null || fail "the aggregator exited"
        sleep 0.3
    done
}

# svc_h3 REGION COMMAND ARGS... : fedagg-h3 with the region's certificate.
svc_h3() {
    local r=$1 cmd=$2
    shift 2
    "$FA_BIN/fedagg-h3" "$cmd" --server "127.0.0.1:$PORT" --name localhost --ca "$D/pki/ca.crt" \
        --cert "$D/pki/client-$r.crt" --key "$D/pki/client-$r.key" "$@"
}

# svc_check_sums DIR : every unmasked ring sum the aggregator dumped in DIR
# equals the plain sum of the regions' quantised inputs of its attempt, bit
# for bit.  Prints how many were checked.
svc_check_sums() {
    python3 - "$1" <<'PY'
import glob, os, struct, sys
d = sys.argv[1]
sums = sorted(glob.glob(os.path.join(d, "sum-r*-a*.u32")))
assert sums, f"no sums in {d}"
for path in sums:
    tag = os.path.basename(path)[4:-4]
    k = int(open(path + ".bits").read())
    mask = (1 << k) - 1
    inputs = sorted(glob.glob(os.path.join(d, f"input-*-{tag}.u32")))
    assert len(inputs) >= 2, f"{d} {tag}: inputs {inputs}"
    total = None
    for p in inputs:
        v = struct.unpack(f"<{os.path.getsize(p)//4}I", open(p, "rb").read())
        total = list(v) if total is None else [(a + b) & mask for a, b in zip(total, v)]
    got = struct.unpack(f"<{os.path.getsize(path)//4}I", open(path, "rb").read())
    assert list(got) == [t & mask for t in total], f"{d} {tag}: unmasked sum differs from the plain sum"
    nz = sum(1 for v in got if v)
    assert nz > len(got) // 10, f"{d} {tag}: only {nz} of {len(got)} nonzero"
print(f"{d}: {len(sums)} sums equal the plain sums of their inputs")
PY
}

# svc_verify_log LOG [--region-key ...] : fedagg audit verify with the
# aggregator's key.
svc_verify_log() {
    local log=$1
    shift
    "$FA_BIN/fedagg" audit verify "$log" --pubkey "$D/keys/aggregator.pub" "$@" \
        >"$D/logs/verify-$(basename "$(dirname "$log")")-$(basename "$log").log" 2>&1 ||
        fail "audit verify $log: $(cat "$D/logs/verify-$(basename "$(dirname "$log")")-$(basename "$log").log")"
}

# svc_check_versions LOG : the audit log's aggregations go 0 -> 1 -> 2 ...,
# no gap or duplicate (actions change no version).
svc_check_versions() {
    "$FA_BIN/fedagg" audit show "$1" --json >"$D/logs/show.jsonl" || fail "audit show $1"
    python3 - "$D/logs/show.jsonl" "$1" <<'PY' || fail "$1: model versions not contiguous"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
recs = [r for r in recs if not ({"admin", "decision", "lifecycle"} & r.keys())]
prev = 0
for r in recs:
    pv, nv = r["prev_version"], r["new_version"]
    assert pv == prev and nv == prev + 1, f"record {r['index']}: {pv} -> {nv} after {prev}"
    prev = nv
print(f"{sys.argv[2]}: {len(recs)} rounds, versions 1..{prev} contiguous")
PY
}
