# agenttest.sh - the region agents' multi-process tests (sourced after
# fedtest.sh): aggregation services hosting federations created at run time
# (docs/service.md), and one long-lived agent per region joining them under
# its own policy (docs/region-policy.md).
#
#   agent_pki                           operator certificates (alice) beside the regions'
#   service_config NAME PORT MPORT      $D/service-NAME.textproto (service.dir svc-NAME)
#   service_start NAME                  logs/service-NAME.log; SERVICE_PID_<NAME>
#   operator_config NAME PORT           $D/operator-NAME.textproto (alice: vision, finance)
#   federation_file FILE ID TEAM TRAINER DATASET ROUNDS [EXTRA]
#   federation_create NAME FILE         fedagg federation create, as alice
#   federation_json NAME ID             fedagg federation show ID --json
#   wait_federation NAME ID STATE ROUNDS TIMEOUT_S
#   agent_config REGION POLICY SERVICE...   $D/agent-REGION.textproto; SERVICE is NAME:PORT
#   agent_start REGION [ENV...]         logs/agent-REGION.log; agent_pid REGION
#   agent_kill REGION SIGNAL
#   region_decision NAME ID REGION      "accepted <reason>" / "refused <reason>"

# The federations' models are small MLPs (784-32-10): rounds of a few
# seconds, so that several federations fit a loaded 2-core machine.
AGENT_MODEL=${AGENT_MODEL:-'input_dim: 784 hidden: [32] output_dim: 10 init_seed: 1'}
AGENT_ROUND=${AGENT_ROUND:-'min_regions: 2
  threshold: 2
  advertise_deadline_ms: 60000
  shares_deadline_ms: 20000
  masked_deadline_ms: 20000
  consistency_deadline_ms: 20000
  unmask_deadline_ms: 20000'}

agent_pki() {
    "$FA_SRC/deploy/pki.sh" "$D/pki" --regions "$ALL" --operators alice >"$D/logs/pki-ops.log" 2>&1 ||
        fail "pki.sh --operators: $(cat "$D/logs/pki-ops.log")"
}

# agent_service_setup: the data, PKI and keys of $REGIONS, and the config
# of a service "central" on free ports $PORT (UDP) and $MPORT (metrics),
# with its operator's.
agent_service_setup() {
    FED_ALPHA=0.5 FED_SEED=3 fed_setup "$D" "${REGIONS[@]}"
    agent_pki
    PORT=$(fed_free_port udp)
    MPORT=$(fed_free_port tcp)
    service_config central "$PORT" "$MPORT"
    operator_config central "$PORT"
}

service_config() {
    local name=$1 port=$2 mport=$3
    mkdir -p "$D/svc-$name"
    cat >"$D/service-$name.textproto" <<EOF
# An aggregation service without a default federation (docs/service.md)
listen: "127.0.0.1:$port"
metrics_listen: "127.0.0.1:$mport"
tls { cert_file: "pki/server.crt" key_file: "pki/server.key" ca_file: "pki/ca.crt" }
audit { signing_key_file: "keys/aggregator.key" }
service { dir: "svc-$name" }
operators: ["alice"]
teams { name: "vision" operators: ["alice"] }
teams { name: "finance" operators: ["alice"] }
EOF
}

service_start() {
    local name=$1
    "$FA_BIN/fedagg-aggregator" --config "$D/service-$name.textproto" \
        >>"$D/logs/service-$name.log" 2>&1 &
    eval "SERVICE_PID_${name//-/_}=$!"
    FED_PIDS+=("$!")
    wait_log "$D/logs/service-$name.log" 'msg="aggregator serving"' 30
}

service_pid() {
    local v="SERVICE_PID_${1//-/_}"
    echo "${!v}"
}

operator_config() {
    local name=$1 port=$2
    cat >"$D/operator-$name.textproto" <<EOF
aggregator: "127.0.0.1:$port"
tls {
  cert_file: "pki/operator-alice.crt"
  key_file: "pki/operator-alice.key"
  ca_file: "pki/ca.crt"
  server_name: "localhost"
}
timeout_ms: 20000
EOF
}

# federation_file FILE ID TEAM TRAINER DATASET ROUNDS [EXTRA]: every region
# invited; paths absolute (the service reads them relative to its dir).
federation_file() {
    local f=$1 id=$2 team=$3 trainer=$4 dataset=$5 rounds=$6 extra=${7:-} r
    {
        echo "federation_id: \"$id\""
        echo "team: \"$team\""
        for r in "${REGIONS[@]}"; do
            echo "regions { id: \"$r\" identity_public_key_file: \"$D/keys/$r.pub\" }"
        done
        echo "round { rounds: $rounds $AGENT_ROUND }"
        echo "model { ${FED_MODEL:-$AGENT_MODEL} }"
        echo "optimizer { ${FED_OPTIMIZER:-kind: FEDAVG learning_rate: 1.0} }"
        echo "quantization { $FED_QUANT }"
        echo "trainer: \"$trainer\""
        echo "dataset: \"$dataset\""
        echo "$extra"
    } >"$f"
}

federation_create() {
    local name=$1 file=$2
    "$FA_BIN/fedagg" federation create "$file" --config "$D/operator-$name.textproto" \
        >"$D/logs/create-$(basename "$file").log" 2>&1 ||
        fail "federation create $file: $(cat "$D/logs/create-$(basename "$file").log")"
}

federation_json() {
    "$FA_BIN/fedagg" federation show "$2" --json --config "$D/operator-$1.textproto" 2>&1
}

# wait_federation NAME ID STATE ROUNDS TIMEOUT_S: until the federation is in
# STATE with at least ROUNDS rounds completed.
wait_federation() {
    local name=$1 id=$2 state=$3 rounds=$4 t=$5 start=$SECONDS j
    while :; do
        j=$(federation_json "$name" "$id") || true
        if python3 -c '
import json, sys
j = json.loads(sys.argv[1])
sys.exit(0 if j.get("state") == sys.argv[2] and j.get("rounds_completed", 0) >= int(sys.argv[3]) else 1)
' "$j" "$state" "$rounds" 2>/dev/null; then
            return 0
        fi
        [ $((SECONDS - start)) -lt "$t" ] ||
            fail "federation $id on $name not $state with $rounds rounds after ${t}s: $j"
        sleep 1
    done
}

# region_decision NAME ID REGION: the service's record of REGION's decision.
region_decision() {
    federation_json "$1" "$2" | python3 -c '
import json, sys
j = json.load(sys.stdin)
for r in j.get("regions", []):
    if r.get("id") == sys.argv[1]:
        print(r.get("decision", ""), r.get("decision_reason", ""))
' "$3"
}

# agent_config REGION POLICY SERVICE...: SERVICE is NAME:PORT; POLICY the
# body of the policy block.
agent_config() {
    local r=$1 policy=$2 s
    shift 2
    {
        echo "region_id: \"$r\""
        echo "tls { cert_file: \"pki/client-$r.crt\" key_file: \"pki/client-$r.key\" ca_file: \"pki/ca.crt\" }"
        echo "identity_key_file: \"keys/$r.key\""
        fed_regions_block "${REGIONS[@]}"
        echo "device: CPU"
        echo "state_dir: \"agent-$r\""
        for s in "$@"; do
            echo "services { name: \"${s%%:*}\" address: \"127.0.0.1:${s##*:}\" server_name: \"localhost\""
            echo "           public_key_file: \"keys/aggregator.pub\" poll_s: 1 }"
        done
        echo "policy {"
        echo "$policy"
        echo "}"
    } >"$D/agent-$r.textproto"
    "$FA_BIN/fedagg" config check "$D/agent-$r.textproto" >"$D/logs/check-agent-$r.log" 2>&1 &&
        grep -q "OK (region agent config" "$D/logs/check-agent-$r.log" ||
        fail "agent config of $r: $(cat "$D/logs/check-agent-$r.log")"
}

# The dataset block of REGION's shard: dataset_block NAME REGION [PRIVACY]
dataset_block() {
    printf 'datasets { name: "%s" data { train_images: "data/%s/train-images-idx3-ubyte.gz" train_labels: "data/%s/train-labels-idx1-ubyte.gz" } %s }\n' \
        "$1" "$2" "$2" "${3:-}"
}

agent_start() {
    local r=$1
    shift
    env "$@" "$FA_BIN/fedagg-worker" --config "$D/agent-$r.textproto" >>"$D/logs/agent-$r.log" 2>&1 &
    eval "AGENT_PID_${r//-/_}=$!"
    FED_PIDS+=("$!")
}

agent_pid() {
    local v="AGENT_PID_${1//-/_}"
    echo "${!v}"
}

agent_kill() {
    local pid
    pid=$(agent_pid "$1")
    kill "-$2" "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}

# audit_check NAME ID: the federation's audit log verifies, every region
# signature in it checked against the regions' keys (their advertisements,
# uploads, evaluations, privacy statements, decisions on the offer);
# logs/show-ID.jsonl gets its records.
audit_check() {
    local log="$D/svc-$1/federations/$2/audit.log" keys=() r
    for r in "${REGIONS[@]}"; do keys+=(--region-key "$r=$D/keys/$r.pub"); done
    "$FA_BIN/fedagg" audit verify "$log" --pubkey "$D/keys/aggregator.pub" "${keys[@]}" \
        >"$D/logs/verify-$2.log" 2>&1 || fail "audit verify $2: $(cat "$D/logs/verify-$2.log")"
    grep -q ' [1-9][0-9]* region signatures verified' "$D/logs/verify-$2.log" &&
        ! grep -q 'not checked' "$D/logs/verify-$2.log" ||
        fail "audit verify $2 left region signatures unchecked: $(cat "$D/logs/verify-$2.log")"
    "$FA_BIN/fedagg" audit show "$log" --json >"$D/logs/show-$2.jsonl" || fail "audit show $2"
    echo "$2: $(tail -1 "$D/logs/verify-$2.log" | sed 's/.*audit.log: //')"
}
