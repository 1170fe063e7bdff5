# fedlib.sh - shell functions that set up and run a fedagg federation on
# loopback: the PKI, identity keys, data shards, configs, processes.
# Sourced by deploy/demo.sh and the multi-process tests (tests/integration/).
#
#   FA_BIN   directory of fedagg, fedagg-aggregator, fedagg-worker (required)
#   FA_SRC   source tree (for deploy/pki.sh; default: this file's parent)
#
# A federation lives in one directory D:
#   D/pki/            CA, aggregator and region certificates (deploy/pki.sh)
#   D/keys/           Ed25519 identity keys of the regions, the audit signing key
#   D/data/<region>/  each region's shard (fedagg data split)
#   D/aggregator.textproto, D/worker-<region>.textproto
#   D/state/          the aggregator's storage (models, audit log, round state)
#   D/worker-<region>/  each worker's state directory
#   D/logs/           one log per process

FA_SRC=${FA_SRC:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
FED_PIDS=()

fed_die() {
    echo "fedlib: $*" >&2
    exit 1
}

# A free port on 127.0.0.1: fed_free_port udp|tcp.  Drawn below the
# kernel's ephemeral range (ip_local_port_range), where no other process's
# connect or bind to port 0 can take it between this check and the daemon's
# bind (a port bind(0) handed out here can go to the next such socket
# anywhere on the machine: it once cost a test its metrics port); checked
# free by binding it.
fed_free_port() {
    python3 - "$1" <<'EOF'
import random, socket, sys
kind = socket.SOCK_DGRAM if sys.argv[1] == "udp" else socket.SOCK_STREAM
try:
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low = int(f.read().split()[0])
except (OSError, ValueError, IndexError):
    low = 32768
first = 10000 if low > 12000 else 1024
for _ in range(200):
    s = socket.socket(socket.AF_INET, kind)
    try:
        s.bind(("127.0.0.1", random.randrange(first, low) if low > first else 0))
        print(s.getsockname()[1])
        sys.exit(0)
    except OSError:
        pass
    finally:
        s.close()
sys.exit("fed_free_port: no free %s port on 127.0.0.1 below %d" % (sys.argv[1], low))
EOF
}

# fed_setup D REGION... : PKI, keys and data shards (alpha FED_ALPHA, default
# 0.5; seed FED_SEED, default 7).  Idempotent for an existing D.
fed_setup() {
    local d=$1
    shift
    local regions=("$@")
    local csv
    csv=$(IFS=,; echo "${regions[*]}")
    mkdir -p "$d/keys" "$d/logs" "$d/state"
    "$FA_SRC/deploy/pki.sh" "$d/pki" --regions "$csv" >"$d/logs/pki.log" 2>&1 ||
        fed_die "PKI failed: see $d/logs/pki.log"
    for r in "${regions[@]}" aggregator; do
        [ -f "$d/keys/$r.key" ] || "$FA_BIN/fedagg" keygen --out "$d/keys/$r" >/dev/null ||
            fed_die "keygen $r failed"
    done
    if [ ! -f "$d/data/manifest.json" ]; then
        "$FA_BIN/fedagg" data split --regions "${#regions[@]}" --alpha "${FED_ALPHA:-0.5}" \
            --seed "${FED_SEED:-7}" --out "$d/data" --names "$csv" >"$d/logs/split.log" 2>&1 ||
            fed_die "data split failed: see $d/logs/split.log"
    fi
}

# The regions block of a config: fed_regions_block REGION...
fed_regions_block() {
    local r
    for r in "$@"; do
        printf 'regions { id: "%s" identity_public_key_file: "keys/%s.pub" }\n' "$r" "$r"
    done
}

# fed_write_aggregator D PORT METRICS_PORT ROUNDS REGION...
# Extra text for the config comes from $FED_AGG_EXTRA, the optimizer from
# $FED_OPTIMIZER, the round policy from $FED_ROUND, the quantisation from
# $FED_QUANT, the model from $FED_MODEL, the evaluation from $FED_EVALUATION
# (each the body of its block).
FED_EVALUATION_DEFAULT='test_images: "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz"
  test_labels: "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz"'

fed_write_aggregator() {
    local d=$1 port=$2 mport=$3 rounds=$4
    shift 4
    cat >"$d/aggregator.textproto" <<EOF
# Written by deploy/fedlib.sh
federation_id: "demo"
listen: "127.0.0.1:$port"
metrics_listen: "127.0.0.1:$mport"
tls {
  cert_file: "pki/server.crt"
  key_file: "pki/server.key"
  ca_file: "pki/ca.crt"
}
$(fed_regions_block "$@")
round {
  rounds: $rounds
  ${FED_ROUND:-min_regions: 2
  advertise_deadline_ms: 60000
  shares_deadline_ms: 20000
  masked_deadline_ms: 60000
  consistency_deadline_ms: 20000
  unmask_deadline_ms: 20000}
}
model { ${FED_MODEL:-input_dim: 784 hidden: [256, 128] output_dim: 10 init_seed: 1} }
optimizer { ${FED_OPTIMIZER:-kind: FEDADAM learning_rate: 0.01 beta1: 0.9 beta2: 0.99 tau: 0.001} }
quantization { ${FED_QUANT:-bits: 16 clip: CLIP_L2 clip_l2_norm: 10.0 clip_value: 1.0 max_examples: 60000} }
storage { dir: "state" keep_versions: 5 }
audit { signing_key_file: "keys/aggregator.key" origin: "fedagg.demo/federation" }
evaluation {
  ${FED_EVALUATION:-$FED_EVALUATION_DEFAULT}
}
${FED_AGG_EXTRA:-}
EOF
}

# fed_write_worker D REGION PORT ALL_REGIONS_CSV [EXTRA]
# EXTRA is added to the config (e.g. a compression block).  The trainer is
# the built-in one with $FED_TRAINER, or the body of $FED_WORKER_TRAINER
# (e.g. 'external { command: [...] }'; "@REGION@" in it becomes the region).
fed_write_worker() {
    local d=$1 r=$2 port=$3 all=$4 extra=${5:-}
    local regions
    IFS=, read -r -a regions <<<"$all"
    mkdir -p "$d/worker-$r"
    cat >"$d/worker-$r.textproto" <<EOF
# Written by deploy/fedlib.sh
region_id: "$r"
federation_id: "demo"
aggregator: "127.0.0.1:$port"
tls {
  cert_file: "pki/client-$r.crt"
  key_file: "pki/client-$r.key"
  ca_file: "pki/ca.crt"
  server_name: "localhost"
}
identity_key_file: "keys/$r.key"
aggregator_public_key_file: "keys/aggregator.pub"
$(fed_regions_block "${regions[@]}")
data {
  train_images: "data/$r/train-images-idx3-ubyte.gz"
  train_labels: "data/$r/train-labels-idx1-ubyte.gz"
}
trainer { $(fed_worker_trainer "$r") }
device: CPU
state_dir: "worker-$r"
$extra
EOF
}

fed_worker_trainer() {
    if [ -n "${FED_WORKER_TRAINER:-}" ]; then
        printf '%s' "${FED_WORKER_TRAINER//@REGION@/$1}"
    else
        printf 'builtin { %s }' "${FED_TRAINER:-local_epochs: 1 batch_size: 64 learning_rate: 0.05 momentum: 0.9}"
    fi
}

# An interpreter that imports torch and numpy (Debian's python3-torch is for
# /usr/bin/python3; a python3 earlier on PATH may lack it): prints its path,
# or fails saying so.
fed_torch_python() {
    local p
    for p in /usr/bin/python3 python3; do
        if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import torch, numpy' >/dev/null 2>&1; then
            command -v "$p"
            return 0
        fi
    done
    echo "fedlib: no python3 with torch and numpy (install python3-torch: deploy/install-deps.sh)" >&2
    return 1
}

# fed_start_aggregator D : starts it in the background (log D/logs/aggregator.log).
fed_start_aggregator() {
    local d=$1
    "$FA_BIN/fedagg-aggregator" --config "$d/aggregator.textproto" \
        >>"$d/logs/aggregator.log" 2>&1 &
    FED_AGG_PID=$!
    FED_PIDS+=("$FED_AGG_PID")
}

# fed_start_worker D REGION [RANKS] : one process, or RANKS under mpirun.
fed_start_worker() {
    local d=$1 r=$2 ranks=${3:-1}
    if [ "$ranks" -gt 1 ]; then
        OMPI_MCA_btl_vader_single_copy_mechanism=none \
            mpirun --allow-run-as-root --oversubscribe -np "$ranks" \
            "$FA_BIN/fedagg-worker" --config "$d/worker-$r.textproto" \
            >>"$d/logs/worker-$r.log" 2>&1 &
    else
        "$FA_BIN/fedagg-worker" --config "$d/worker-$r.textproto" \
            >>"$d/logs/worker-$r.log" 2>&1 &
    fi
    eval "FED_WORKER_PID_${r//-/_}=$!"
    FED_PIDS+=("$!")
}

# The pid of a region's worker: fed_worker_pid REGION
fed_worker_pid() {
    local v="FED_WORKER_PID_${1//-/_}"
    echo "${!v}"
}

# fed_count_lines FILE PATTERN : lines of FILE matching PATTERN, 0 while
# FILE does not exist yet (grep -c then answers nothing, and a numeric test
# of an empty answer fails instead of waiting).
fed_count_lines() {
    local n
    n=$(grep -c -- "$2" "$1" 2>/dev/null) || true
    echo "${n:-0}"
}

# Completed rounds according to the aggregator's log.
fed_rounds_completed() {
    fed_count_lines "$1/logs/aggregator.log" 'msg="round completed"'
}

# fed_wait_rounds D N TIMEOUT_S : waits until N rounds completed.
fed_wait_rounds() {
    local d=$1 n=$2 timeout=$3 start=$SECONDS
    while [ "$(fed_rounds_completed "$d")" -lt "$n" ]; do
        if [ $((SECONDS - start)) -ge "$timeout" ]; then
            echo "fedlib: only $(fed_rounds_completed "$d") of $n rounds after ${timeout}s" >&2
            return 1
        fi
        if [ -n "${FED_AGG_PID:-}" ] && ! kill -0 "$FED_AGG_PID" 2>/dev/null; then
            echo "fedlib: the aggregator exited early" >&2
            return 1
        fi
        sleep 0.5
    done
}

# Stops every process started here: SIGTERM, then SIGKILL after a grace.
fed_stop_all() {
    local p
    for p in "${FED_PIDS[@]}"; do
        kill -TERM "$p" 2>/dev/null || true
    done
    for _ in $(seq 1 50); do
        local alive=0
        for p in "${FED_PIDS[@]}"; do
            kill -0 "$p" 2>/dev/null && alive=1
        done
        [ "$alive" = 0 ] && break
        sleep 0.1
    done
    for p in "${FED_PIDS[@]}"; do
        kill -KILL "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    FED_PIDS=()
}
