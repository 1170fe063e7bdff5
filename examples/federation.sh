# shellcheck shell=bash
# federation.sh - what the examples' run.sh scripts share (sourced): a
# federation of three regions on loopback, built on deploy/fedlib.sh, that
# trains an example's PyTorch model with its own trainer and evaluator.
#
# A run.sh sets EX_NAME (the example's name: the output directory's default
# name), EX_ROUNDS and EX_STEPS (default rounds and local steps per round),
# calls ex_setup "$@" (which sets PY, the interpreter with torch, OUT, ROUNDS,
# STEPS, TRAINER_MODE from the environment), then defines these and calls ex_run:
#   ex_make_init OUT    writes version 0 (safetensors) to OUT
#   ex_trainer REGION   prints the worker's trainer block for REGION
#   EX_EVALUATOR        the evaluator command's argv (an array, with "{input}"
#                       and "{output}"), run by the aggregator after every commit
#   EX_MODEL_EXTRA      (optional) more of the model block, e.g. a federated selection
#   EX_DESCRIBE         (optional) a line saying what the regions run
#
# Environment of the run (each example's README names its defaults):
#   EXAMPLE_OUT      output directory (default examples/<name>/out)
#   EXAMPLE_ROUNDS   rounds of secure aggregation
#   EXAMPLE_STEPS    local steps per region and round
#   EXAMPLE_MODE     long-lived (default) or one-shot: how the worker runs the trainer
#   EXAMPLE_TIMEOUT  seconds the whole federation may take (default 900)
#   EXAMPLE_PYTHON   the interpreter with torch (default: fed_torch_python's choice)
# The first argument, when given, is the build directory (default <source>/build);
# nothing is built here: run `make build` (or cmake --build) first.
set -euo pipefail

EX_SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

ex_die() {
    echo "$EX_NAME: $*" >&2
    exit 1
}

ex_setup() {
    local build
    build=$(cd "${1:-$EX_SRC/build}" 2>/dev/null && pwd) || ex_die "no build directory ${1:-$EX_SRC/build}: run 'make build' first"
    export FA_BIN="$build/bin" FA_SRC="$EX_SRC"
    # shellcheck source=deploy/fedlib.sh
    source "$EX_SRC/deploy/fedlib.sh"
    local b
    for b in fedagg fedagg-aggregator fedagg-worker; do
        [ -x "$FA_BIN/$b" ] || ex_die "$FA_BIN/$b is missing: run 'make build' first"
    done
    PY=${EXAMPLE_PYTHON:-}
    if [ -z "$PY" ]; then
        PY=$(fed_torch_python) || ex_die "no python3 with torch and numpy (Debian: apt-get install python3-torch python3-numpy)"
    fi
    OUT=${EXAMPLE_OUT:-$EX_SRC/examples/$EX_NAME/out}
    ROUNDS=${EXAMPLE_ROUNDS:-$EX_ROUNDS}
    STEPS=${EXAMPLE_STEPS:-$EX_STEPS}
    MODE=${EXAMPLE_MODE:-long-lived}
    case "$MODE" in
    long-lived) TRAINER_MODE=TRAINER_LONG_LIVED ;;
    one-shot) TRAINER_MODE=TRAINER_ONE_SHOT ;;
    *) ex_die "EXAMPLE_MODE must be long-lived or one-shot, not '$MODE'" ;;
    esac
    EX_TIMEOUT=${EXAMPLE_TIMEOUT:-900}
    REGIONS=(eu-west us-east ap-south)
    export PYTHONPATH="$EX_SRC/python${PYTHONPATH:+:$PYTHONPATH}"
    # Every process shares this machine's cores: one thread each.
    export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
}

ex_run() {
    local timeout=$EX_TIMEOUT all
    all=$(IFS=,; echo "${REGIONS[*]}")

    trap fed_stop_all EXIT
    trap 'echo; echo "$EX_NAME: interrupted; stopping every process"; exit 130' INT TERM
    local start=$SECONDS
    rm -rf "$OUT"
    mkdir -p "$OUT"
    echo "$EX_NAME: setting up the federation in $OUT"
    echo "  - PKI, Ed25519 identity keys, Fashion-MNIST split into 3 non-IID shards (Dirichlet alpha 0.5)"
    FED_ALPHA=0.5 FED_SEED=7 fed_setup "$OUT" "${REGIONS[@]}"
    python3 - "$OUT/data/manifest.json" <<'EOF'
import json, sys
for r in json.load(open(sys.argv[1]))["shards"]:
    print(f"      {r['region']:<9} {r['count']:>6} examples, labels 0-9: {r['histogram']}")
EOF
    echo "  - version 0 of the model: $OUT/init.safetensors"
    ex_make_init "$OUT/init.safetensors" >"$OUT/logs/make_init.log" 2>&1 ||
        { cat "$OUT/logs/make_init.log" >&2; ex_die "writing the initial model failed"; }
    sed 's/^/      /' "$OUT/logs/make_init.log"

    local port mport
    port=$(fed_free_port udp)
    mport=$(fed_free_port tcp)
    FED_MODEL="init_file: \"init.safetensors\" ${EX_MODEL_EXTRA:-}" \
    FED_OPTIMIZER="kind: FEDAVG learning_rate: 1.0" \
    FED_QUANT="bits: 16" \
    FED_EVALUATION="command: [$(ex_quote_list "${EX_EVALUATOR[@]}")] timeout_s: 600" \
    FED_ROUND="min_regions: 2
  threshold: 2
  advertise_deadline_ms: 600000
  shares_deadline_ms: 60000
  masked_deadline_ms: 60000
  consistency_deadline_ms: 60000
  unmask_deadline_ms: 60000" \
        fed_write_aggregator "$OUT" "$port" "$mport" "$ROUNDS" "${REGIONS[@]}"
    local r
    for r in "${REGIONS[@]}"; do
        FED_WORKER_TRAINER=$(ex_trainer "$r") fed_write_worker "$OUT" "$r" "$port" "$all"
    done
    local f
    for f in "$OUT"/*.textproto; do
        "$FA_BIN/fedagg" config check "$f" >/dev/null || ex_die "config $f does not check"
    done
    "$FA_BIN/fedagg" model inspect "$OUT/init.safetensors" --config "$OUT/aggregator.textproto" \
        >"$OUT/logs/inspect.log" || ex_die "fedagg model inspect: see $OUT/logs/inspect.log"
    grep -E '^(totals|federated):' "$OUT/logs/inspect.log" | sed 's/^/      /'

    echo "$EX_NAME: starting the aggregator (HTTP/3 on 127.0.0.1:$port, metrics on 127.0.0.1:$mport)"
    fed_start_aggregator "$OUT"
    sleep 0.5
    echo "$EX_NAME: starting the regions ${REGIONS[*]}: ${EX_DESCRIBE:-the example trainer}, $MODE"
    for r in "${REGIONS[@]}"; do fed_start_worker "$OUT" "$r"; done
    echo "$EX_NAME: $ROUNDS rounds of secure aggregation (FedAvg), $STEPS local steps per region and round"
    echo
    python3 "$EX_SRC/examples/monitor.py" "$OUT/logs/aggregator.log" "$ROUNDS" "$timeout" \
        "$FED_AGG_PID" "$OUT/rounds.csv" || {
        echo "$EX_NAME: FAILED; the logs are in $OUT/logs/" >&2
        tail -n 5 "$OUT"/logs/*.log "$OUT"/worker-*/external/external-trainer.log >&2 || true
        exit 1
    }
    # The aggregator stops by itself once the regions have had their grace
    # to evaluate the final model; then everything else stops.
    wait "$FED_AGG_PID" 2>/dev/null || true
    fed_stop_all

    local last final central
    last=$(printf '%s/state/model-%08d.safetensors' "$OUT" "$ROUNDS")
    [ -f "$last" ] || ex_die "no final model $last"
    central=$(grep 'msg="model evaluated by the evaluator command"' "$OUT/logs/aggregator.log" |
        grep " version=$ROUNDS " | sed -n 's/.* accuracy=\([0-9.]*\).*/\1/p' | tail -1 || true)
    if [ -z "$central" ]; then
        # the aggregator stopped before its evaluator was done: run it here
        echo "$EX_NAME: evaluating the final model"
        local argv=("${EX_EVALUATOR[@]/\{input\}/$last}")
        argv=("${argv[@]/\{output\}/$OUT/final-eval.json}")
        "${argv[@]}" 2>>"$OUT/logs/final-eval.log" || ex_die "the evaluator failed: see $OUT/logs/final-eval.log"
        central=$(python3 -c 'import json,sys; print("%.4f" % json.load(open(sys.argv[1]))["accuracy"])' \
            "$OUT/final-eval.json")
    fi
    final="$central (version $ROUNDS, Fashion-MNIST test set, by the evaluator command)"

    echo
    echo "$EX_NAME: verifying the audit log (fedagg audit verify)"
    local verified
    if "$FA_BIN/fedagg" audit verify "$OUT/state/audit.log" --pubkey "$OUT/keys/aggregator.pub" \
        --config "$OUT/aggregator.textproto" >"$OUT/logs/audit-verify.log" 2>&1; then
        verified="verified ($(tail -1 "$OUT/logs/audit-verify.log" | sed 's/^ok: [^ ]*: //'))"
    else
        verified="FAILED: see $OUT/logs/audit-verify.log"
    fi
    local errors
    errors=$(cat "$OUT"/logs/aggregator.log "$OUT"/logs/worker-*.log | grep -c 'level=error' || true)
    cat <<EOF

$EX_NAME: summary
  rounds completed     $(($(wc -l <"$OUT/rounds.csv") - 1)) of $ROUNDS (secure aggregation, FedAvg, 3 non-IID regions)
  final model          $final
  audit log            $verified
  errors in the logs   $errors
  wall time            $((SECONDS - start)) s
  files
    $OUT/rounds.csv         per round: regions, seconds, federated and central evaluation
    $OUT/state/             the published models (model-<v>.safetensors), audit log
    $OUT/init.safetensors   version 0
    $OUT/logs/              one logfmt log per process
    $OUT/worker-*/external/external-trainer.log   each region's trainer output
    $OUT/*.textproto        the configurations
    $OUT/pki/, keys/        certificates and identity keys (development only)
EOF
    case "$verified" in
    verified*) exit 0 ;;
    *) exit 1 ;;
    esac
}

# ex_quote_list ARG... : the arguments as the body of a textproto string list.
ex_quote_list() {
    local args=() a
    for a in "$@"; do args+=("\"$a\""); done
    (IFS=,; echo "${args[*]}")
}

# ex_trainer_block REGION ARGV... : the trainer block of an example trainer
# (argv as given), with the region's shard in the environment, in $TRAINER_MODE.
ex_trainer_block() {
    local r=$1
    shift
    printf 'external {
    command: [%s]
    mode: %s timeout_s: 1800 start_timeout_s: 600
    env: ["PYTHONPATH=%s", "OMP_NUM_THREADS=1", "FEDAGG_DEVICE=cpu",
          "FEDAGG_DATA_TRAIN_IMAGES=%s/data/%s/train-images-idx3-ubyte.gz",
          "FEDAGG_DATA_TRAIN_LABELS=%s/data/%s/train-labels-idx1-ubyte.gz"]
  }' "$(ex_quote_list "$@")" "$TRAINER_MODE" "$PYTHONPATH" "$OUT" "$r" "$OUT" "$r"
}
