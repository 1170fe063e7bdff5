#!/usr/bin/env bash
# The pytorch-cnn example end to end: three regions on loopback federate the
# CNN of cnn.py (BatchNorm, F32 with I64 counters) with train.py and secure
# aggregation; the aggregator evaluates every version with evaluate.py.
#
#   examples/pytorch-cnn/run.sh [BUILD_DIR]      (after `make build`)
#
# Environment: EXAMPLE_ROUNDS (10), EXAMPLE_STEPS (local steps per round, 100),
# EXAMPLE_MODE (long-lived or one-shot), EXAMPLE_DTYPE (f32 or bf16),
# EXAMPLE_OUT (examples/pytorch-cnn/out), EXAMPLE_TIMEOUT (900 s).
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=examples/federation.sh
source "$here/../federation.sh"

EX_NAME=pytorch-cnn
EX_ROUNDS=10
EX_STEPS=100
ex_setup "$@"
DTYPE=${EXAMPLE_DTYPE:-f32}
EX_DESCRIBE="examples/pytorch-cnn/train.py"

ex_make_init() {
    "$PY" "$here/make_init.py" --out "$1" --dtype "$DTYPE"
}

ex_trainer() {
    ex_trainer_block "$1" "$PY" "$here/train.py" --local-steps "$STEPS" --threads 1
}

EX_EVALUATOR=("$PY" "$here/evaluate.py" "{input}" "{output}" --threads 1)

ex_run
