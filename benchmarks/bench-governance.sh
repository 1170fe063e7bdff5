#!/usr/bin/env bash
# bench-governance.sh - the federations of `fedagg-bench governance`
# (benchmarks/bench_governance.c), set up with deploy/fedlib.sh as an
# operator does it:
#
#   bench-governance.sh setup DIR BIN_DIR
#       DIR/common: PKI, identity keys, Fashion-MNIST cut into 3 shards near
#       IID (Dirichlet alpha 100, seed 3) for eu-west, us-east, ap-south.
#   bench-governance.sh fed DIR BIN_DIR NAME GATE ROUNDS BAD_AFTER TOLERANCE DRAIN_AFTER
#       one federation in DIR/NAME (PKI and keys linked from DIR/common, the
#       shards copied): the real fedagg-aggregator and 3 fedagg-worker
#       processes on loopback, the built-in MLP (784-256-128-10, FedAvg lr 1;
#       each region 20 local steps of 32 examples, SGD lr 0.05, momentum 0.9;
#       every region evaluating each global model on the 10 000 Fashion-MNIST
#       test images), ROUNDS completed rounds.  ap-south's worker stops after
#       BAD_AFTER rounds, its label file is shuffled (a seeded permutation),
#       and it joins again: from then on its updates are trained on shuffled
#       labels.  With DRAIN_AFTER > 0 an operator drains it once the gate has
#       rejected that many candidates in a row (what the FedaggCandidatesRejected
#       alert asks for); 0: nobody does.  GATE on: promotion { metric accuracy,
#       baseline best of all promoted, TOLERANCE, 2 regions, ROLLBACK,
#       channel production }; off: no gate.
#
# Exit status 0, or 1 with a message on stderr.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
export FA_SRC=${FA_SRC:-$(cd "$here/.." && pwd)}
# shellcheck source=../deploy/fedlib.sh
. "$FA_SRC/deploy/fedlib.sh"

REGIONS=(eu-west us-east ap-south)
CSV=eu-west,us-east,ap-south
TEST_SET='test_images: "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz" test_labels: "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz"'
export OPENBLAS_NUM_THREADS=1

die() {
    echo "bench-governance.sh: $*" >&2
    exit 1
}

cmd=${1:-}
case $cmd in
setup)
    d=$2
    export FA_BIN=$3
    FED_ALPHA=100 FED_SEED=3 fed_setup "$d/common" "${REGIONS[@]}"
    "$FA_SRC/deploy/pki.sh" "$d/common/pki" --operators bench >>"$d/common/logs/pki.log" 2>&1 ||
        die "operator certificate: see $d/common/logs/pki.log"
    ;;
fed)
    d=$2 name=$4 gate=$5 rounds=$6 bad_after=$7 tol=$8 drain_after=${9:-0}
    export FA_BIN=$3
    f="$d/$name"
    rm -rf "$f"
    mkdir -p "$f/logs" "$f/state"
    ln -s "$d/common/pki" "$f/pki"
    ln -s "$d/common/keys" "$f/keys"
    cp -r "$d/common/data" "$f/data"
    export FED_TRAINER="local_steps: 20 batch_size: 32 learning_rate: 0.05 momentum: 0.9"
    export FED_QUANT="bits: 16 clip: CLIP_L2 clip_l2_norm: 10.0 clip_value: 0.05 max_examples: 640"
    export FED_OPTIMIZER="kind: FEDAVG learning_rate: 1.0"
    export FED_ROUND="min_regions: 2
  advertise_deadline_ms: 20000
  shares_deadline_ms: 20000
  masked_deadline_ms: 20000
  consistency_deadline_ms: 20000
  unmask_deadline_ms: 20000"
    if [ "$gate" = on ]; then
        export FED_AGG_EXTRA="operators: [\"bench\"]
promotion {
  enabled: true
  metric: \"accuracy\"
  baseline: BASELINE_BEST_OF_LAST
  baseline_window: 0
  tolerance: $tol
  min_regions: 2
  on_regression: REGRESSION_ROLLBACK
  channels: [\"production\"]
}"
    else
        export FED_AGG_EXTRA=""
    fi
    port=$(fed_free_port udp)
    mport=$(fed_free_port tcp)
    fed_write_aggregator "$f" "$port" "$mport" "$rounds" "${REGIONS[@]}"
    for r in "${REGIONS[@]}"; do
        extra=""
        [ "$r" = ap-south ] && extra="rounds: $bad_after"
        fed_write_worker "$f" "$r" "$port" "$CSV" "$extra"
        sed -i "s|^data {|data {\n  $TEST_SET|" "$f/worker-$r.textproto"
    done
    trap 'fed_stop_all' EXIT TERM INT
    fed_start_aggregator "$f"
    for r in "${REGIONS[@]}"; do fed_start_worker "$f" "$r"; done
    pid=$(fed_worker_pid ap-south)
    wait "$pid" 2>/dev/null || die "$name: ap-south's worker failed in its first $bad_after rounds"
    python3 - "$f/data/ap-south/train-labels-idx1-ubyte.gz" <<'PY' || die "cannot shuffle the labels"
import gzip, random, sys
p = sys.argv[1]
raw = gzip.decompress(open(p, "rb").read())
head, labels = raw[:8], bytearray(raw[8:])
random.Random(31).shuffle(labels)
open(p, "wb").write(gzip.compress(head + bytes(labels)))
PY
    sed -i 's/^rounds: [0-9]*$//' "$f/worker-ap-south.textproto"
    fed_start_worker "$f" ap-south
    if [ "$gate" = on ] && [ "$drain_after" -gt 0 ]; then
        printf 'aggregator: "127.0.0.1:%s"\ntls { cert_file: "pki/operator-bench.crt" key_file: "pki/operator-bench.key" ca_file: "pki/ca.crt" server_name: "localhost" }\n' \
            "$port" >"$f/operator.textproto"
        until [ "$(fed_count_lines "$f/logs/aggregator.log" 'outcome=rejected')" -ge "$drain_after" ]; do
            [ "$(fed_rounds_completed "$f")" -lt "$rounds" ] || break
            kill -0 "$FED_AGG_PID" 2>/dev/null || break
            sleep 0.2
        done
        if [ "$(fed_rounds_completed "$f")" -lt "$rounds" ]; then
            "$FA_BIN/fedagg" drain ap-south --config "$f/operator.textproto" >>"$f/logs/drain.log" 2>&1 ||
                die "$name: drain failed: $(cat "$f/logs/drain.log")"
        fi
    fi
    fed_wait_rounds "$f" "$rounds" 1800 || die "$name: $rounds rounds did not complete"
    # the aggregator ends by itself once its rounds are done
    for _ in $(seq 1 100); do
        kill -0 "$FED_AGG_PID" 2>/dev/null || break
        sleep 0.1
    done
    fed_stop_all
    ;;
*)
    die "usage: bench-governance.sh setup DIR BIN_DIR | fed DIR BIN_DIR NAME on|off ROUNDS BAD_AFTER TOLERANCE DRAIN_AFTER"
    ;;
esac
