#!/usr/bin/env bash
# The lora example end to end: version 0 is the transformer of lora_model.py
# pretrained briefly and centrally (make_init.py) with fresh adapters; three
# regions on loopback fine-tune only the adapters with train.py, and only
# they are federated (model.federated include "*lora_*") with secure
# aggregation; the aggregator evaluates every version with evaluate.py.
#
#   examples/lora/run.sh [BUILD_DIR]      (after `make build`)
#
# Environment: EXAMPLE_ROUNDS (5), EXAMPLE_STEPS (local steps per round, 50),
# EXAMPLE_PRETRAIN (training images for the base, 10000; 0: an untrained
# base), EXAMPLE_MODE (long-lived or one-shot), EXAMPLE_OUT
# (examples/lora/out), EXAMPLE_TIMEOUT (900 s).
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=examples/federation.sh
source "$here/../federation.sh"

EX_NAME=lora
EX_ROUNDS=5
EX_STEPS=50
ex_setup "$@"
PRETRAIN=${EXAMPLE_PRETRAIN:-10000}
EX_DESCRIBE="examples/lora/train.py (adapters only)"
EX_MODEL_EXTRA='federated { include: ["*lora_*"] }'

ex_make_init() {
    "$PY" "$here/make_init.py" --out "$1" --pretrain-examples "$PRETRAIN"
}

ex_trainer() {
    ex_trainer_block "$1" "$PY" "$here/train.py" --local-steps "$STEPS" --threads 1
}

EX_EVALUATOR=("$PY" "$here/evaluate.py" "{input}" "{output}" --threads 1)

ex_run
