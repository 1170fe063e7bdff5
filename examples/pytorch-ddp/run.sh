#!/usr/bin/env bash
# The pytorch-ddp example end to end: three regions on loopback, each
# training the CNN data-parallel with EXAMPLE_RANKS ranks under torchrun
# (python3 -m fedagg.torchrun, DistributedDataParallel over gloo), federated
# with secure aggregation; the aggregator evaluates every version with
# ../pytorch-cnn/evaluate.py.
#
#   examples/pytorch-ddp/run.sh [BUILD_DIR]      (after `make build`)
#
# Environment: EXAMPLE_ROUNDS (8), EXAMPLE_STEPS (local steps per round, each
# of the global batch of 64 split over the ranks; 60), EXAMPLE_RANKS (2),
# EXAMPLE_MODE (long-lived or one-shot), EXAMPLE_OUT (examples/pytorch-ddp/out),
# EXAMPLE_TIMEOUT (900 s).
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=examples/federation.sh
source "$here/../federation.sh"

EX_NAME=pytorch-ddp
EX_ROUNDS=8
EX_STEPS=60
ex_setup "$@"
RANKS=${EXAMPLE_RANKS:-2}
EX_DESCRIBE="examples/pytorch-ddp/train.py under torchrun, $RANKS ranks each"

ex_make_init() {
    "$PY" "$here/../pytorch-cnn/make_init.py" --out "$1"
}

# Each region's group on its own port: torchrun --standalone would put all
# three groups' rendezvous on port 29400.
ex_trainer() {
    ex_trainer_block "$1" "$PY" -m fedagg.torchrun --nnodes=1 --nproc_per_node="$RANKS" \
        --master_addr=127.0.0.1 --master_port="$(fed_free_port tcp)" \
        "$here/train.py" --local-steps "$STEPS" --threads 1
}

EX_EVALUATOR=("$PY" "$here/../pytorch-cnn/evaluate.py" "{input}" "{output}" --threads 1)

ex_run
