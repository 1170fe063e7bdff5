#!/usr/bin/env bash
# bench-model.sh - the processes of `fedagg-bench model` (benchmarks/bench_model.c),
# set up and run the way an operator does it, with deploy/fedlib.sh:
#
#   bench-model.sh python
#       prints the interpreter that imports torch and numpy ($FEDAGG_PYTHON when set,
#       else fed_torch_python), or exits 3 saying there is none.
#   bench-model.sh setup DIR BIN_DIR
#       DIR/common: PKI, identity keys, Fashion-MNIST cut into 3 non-IID shards
#       (Dirichlet alpha 0.5, seed 7: `fedagg data split`), the CNN's version 0
#       (examples/pytorch-cnn/make_init.py --seed 1, F32) and the LoRA
#       transformer's (examples/lora/make_init.py --seed 1 --pretrain-examples 0:
#       the bytes of a round do not depend on the weights, pretraining would
#       only cost minutes).
#   bench-model.sh fed DIR BIN_DIR NAME ROUNDS MODEL MODE INCLUDE LOCAL_STEPS
#       runs one federation to its end in DIR/NAME (PKI, keys and shards linked
#       from DIR/common): the real fedagg-aggregator and 3 fedagg-worker
#       processes on loopback (HTTP/3, mTLS, secure aggregation), every region
#       with the example's own trainer through the Python kit:
#         MODEL  cnn (examples/pytorch-cnn/train.py) or lora (examples/lora/train.py)
#         MODE   one-shot or long-lived (TRAINER_ONE_SHOT / TRAINER_LONG_LIVED)
#         INCLUDE  model.federated include pattern, "-" for none (every floating tensor)
#         LOCAL_STEPS  0: one local epoch per round, else that many steps
#       Server optimizer FedAvg, lr 1; quantisation at the product's defaults
#       (16 bits, or $BENCH_MODEL_BITS: fedagg-bench model --bits; per-tensor
#       adaptive ranges, no L2 clip); min_regions 3 (every
#       round waits for all three regions).  Trainer settings: the examples'
#       defaults (CNN: SGD lr 0.01, momentum 0.9 restarted every round, weight
#       decay 5e-4, batch 64; LoRA: AdamW lr 2e-3), seed 1, --holdout 0 (the
#       whole shard is trained on: the test set is the held-out data, and no
#       federated evaluation runs), one torch thread per region.
#       Writes DIR/NAME/times (start= end= in epoch seconds: aggregator start to
#       the last round's commit in its log being seen).
#   bench-model.sh eval DIR NAME
#       test accuracy of the federation's last model version (model_ref.py eval).
#   bench-model.sh refs DIR ROUNDS LOCAL_STEPS
#       the anchors, both at once (one torch thread each): model_ref.py fedavg
#       -> DIR/ref-fedavg.out, model_ref.py central -> DIR/ref-central.out.
#   bench-model.sh count DIR
#       floating and adapter parameter counts of the LoRA model.
#
# Exit status 0 on success; on failure a message on stderr and 1 (3: no torch).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
export FA_SRC=${FA_SRC:-$(cd "$here/.." && pwd)}
# shellcheck source=../deploy/fedlib.sh
. "$FA_SRC/deploy/fedlib.sh"

REGIONS=(eu-west us-east ap-south)
CSV=eu-west,us-east,ap-south
TIMEOUT_S=${BENCH_MODEL_TIMEOUT_S:-5400}

die() {
    echo "bench-model.sh: $*" >&2
    exit 1
}

torch_python() {
    if [ -n "${FEDAGG_PYTHON:-}" ]; then # the interpreter the kit's tests honour too
        if "$FEDAGG_PYTHON" -c 'import torch, numpy' >/dev/null 2>&1; then
            command -v "$FEDAGG_PYTHON"
            return 0
        fi
        echo "bench-model.sh: FEDAGG_PYTHON=$FEDAGG_PYTHON does not import torch and numpy;" \
            "the model benchmarks need PyTorch (unset it to use /usr/bin/python3)" >&2
        exit 3
    fi
    fed_torch_python 2>/dev/null || {
        echo "bench-model.sh: no python3 with torch and numpy here (Debian: apt-get install" \
            "python3-torch python3-numpy, deploy/install-deps.sh); the model benchmarks need" \
            "PyTorch" >&2
        exit 3
    }
}

py() { # the helper with the kit and the examples on the path
    PYTHONPATH="$FA_SRC/python${PYTHONPATH:+:$PYTHONPATH}" OMP_NUM_THREADS=1 "$PY" "$@"
}

cmd_setup() {
    local dir=$1
    export FA_BIN=$2
    local c=$dir/common
    FED_ALPHA=0.5 FED_SEED=7 fed_setup "$c" "${REGIONS[@]}"
    [ -f "$c/cnn-init.safetensors" ] ||
        py "$FA_SRC/examples/pytorch-cnn/make_init.py" --out "$c/cnn-init.safetensors" --seed 1 \
            >"$c/logs/cnn-init.log" 2>&1 || die "CNN init failed: see $c/logs/cnn-init.log"
    [ -f "$c/lora-init.safetensors" ] ||
        py "$FA_SRC/examples/lora/make_init.py" --out "$c/lora-init.safetensors" --seed 1 \
            --pretrain-examples 0 >"$c/logs/lora-init.log" 2>&1 ||
        die "LoRA init failed: see $c/logs/lora-init.log"
}

cmd_fed() {
    local dir=$1 name=$3 rounds=$4 model=$5 mode=$6 include=$7 steps=$8
    export FA_BIN=$2
    local d=$dir/$name c=$dir/common train mode_field port mport sel="" work
    case $model in
    cnn) train=$FA_SRC/examples/pytorch-cnn/train.py ;;
    lora) train=$FA_SRC/examples/lora/train.py ;;
    *) die "model '$model' is not cnn or lora" ;;
    esac
    local wrap=""
    case $mode in
    one-shot)
        mode_field="mode: TRAINER_ONE_SHOT"
        wrap="\"$here/bench-model-oneshot.sh\", "
        ;;
    long-lived) mode_field="mode: TRAINER_LONG_LIVED" ;;
    *) die "mode '$mode' is not one-shot or long-lived" ;;
    esac
    [ "$include" = "-" ] || sel="federated { include: [\"$include\"] }"
    rm -rf "$d"
    mkdir -p "$d/logs" "$d/state"
    work=$(cd "$d" && pwd)
    for x in pki keys data; do
        ln -s "$(cd "$c/$x" && pwd)" "$d/$x"
    done
    cp "$c/$model-init.safetensors" "$d/init.safetensors"
    port=$(fed_free_port udp)
    mport=$(fed_free_port tcp)
    FED_MODEL="init_file: \"init.safetensors\" $sel" \
        FED_OPTIMIZER="kind: FEDAVG learning_rate: 1.0" \
        FED_QUANT="bits: ${BENCH_MODEL_BITS:-16} max_examples: 60000" \
        FED_ROUND="min_regions: 3
  advertise_deadline_ms: 3600000
  shares_deadline_ms: 60000
  masked_deadline_ms: 600000
  consistency_deadline_ms: 60000
  unmask_deadline_ms: 60000" \
        FED_EVALUATION="every: 1" \
        fed_write_aggregator "$d" "$port" "$mport" "$rounds" "${REGIONS[@]}"
    local r
    for r in "${REGIONS[@]}"; do
        FED_WORKER_TRAINER="external {
    command: [$wrap\"$PY\", \"$train\", \"--holdout\", \"0\", \"--threads\", \"1\", \"--seed\", \"1\",
              \"--local-epochs\", \"1\", \"--local-steps\", \"$steps\"]
    env: [\"PYTHONPATH=$FA_SRC/python\", \"OMP_NUM_THREADS=1\",
          \"FEDAGG_DATA_TRAIN_IMAGES=$work/data/@REGION@/train-images-idx3-ubyte.gz\",
          \"FEDAGG_DATA_TRAIN_LABELS=$work/data/@REGION@/train-labels-idx1-ubyte.gz\",
          \"BENCH_MODEL_RESULTS=$work/logs/trainer-results-@REGION@.log\"]
    timeout_s: 3600
    $mode_field
  }" fed_write_worker "$d" "$r" "$port" "$CSV" "federated_evaluation: false"
    done
    trap fed_stop_all EXIT
    trap 'exit 130' INT TERM
    echo "start=$(date +%s.%N)" >"$d/times"
    fed_start_aggregator "$d"
    local t=0
    until grep -q 'msg="aggregator serving"' "$d/logs/aggregator.log" 2>/dev/null; do
        kill -0 "$FED_AGG_PID" 2>/dev/null ||
            die "the aggregator exited at start: see $d/logs/aggregator.log"
        [ $t -lt 1200 ] || die "the aggregator did not start in 60 s: see $d/logs/aggregator.log"
        t=$((t + 1))
        sleep 0.05
    done
    for r in "${REGIONS[@]}"; do
        fed_start_worker "$d" "$r"
    done
    fed_wait_rounds "$d" "$rounds" "$TIMEOUT_S" ||
        die "federation $name did not complete $rounds rounds: see $d/logs"
    echo "end=$(date +%s.%N)" >>"$d/times"
    # the workers see the federation finished and exit by themselves
    for r in "${REGIONS[@]}"; do
        local p
        p=$(fed_worker_pid "$r")
        for _ in $(seq 1 300); do
            kill -0 "$p" 2>/dev/null || break
            sleep 0.1
        done
    done
    fed_stop_all
    trap - EXIT
}

cmd_eval() {
    local d=$1/$2 m
    m=$(find "$d/state" -maxdepth 1 -name 'model-*.safetensors' | sort | tail -n 1)
    [ -n "$m" ] || die "no model version in $d/state"
    py "$here/model_ref.py" eval --model "$m"
}

cmd_refs() {
    local dir=$1 rounds=$2 steps=$3 c=$1/common a b sa=0 sb=0
    local common=(--split "$c/data" --regions "$CSV" --init "$c/cnn-init.safetensors"
        --rounds "$rounds" --local-steps "$steps")
    py "$here/model_ref.py" fedavg "${common[@]}" >"$dir/ref-fedavg.out" 2>"$dir/ref-fedavg.log" &
    a=$!
    py "$here/model_ref.py" central "${common[@]}" >"$dir/ref-central.out" 2>"$dir/ref-central.log" &
    b=$!
    wait "$a" || sa=$?
    wait "$b" || sb=$?
    [ $sa = 0 ] || die "the PyTorch FedAvg reference failed: see $dir/ref-fedavg.log"
    [ $sb = 0 ] || die "the centralised reference failed: see $dir/ref-central.log"
}

[ $# -ge 1 ] || die "usage: $0 python|setup|fed|eval|refs|count ..."
sub=$1
shift
PY=$(torch_python)
case $sub in
python) echo "$PY" ;;
setup) cmd_setup "$@" ;;
fed) cmd_fed "$@" ;;
eval) cmd_eval "$@" ;;
refs) cmd_refs "$@" ;;
count) py "$here/model_ref.py" count --model "$1/common/lora-init.safetensors" --include 'lora_' ;;
*) die "unknown subcommand '$sub'" ;;
esac
