#!/usr/bin/env bash
# Multi-rank checks of the worker's local data parallelism under mpirun
# (tests/tools/worker_mpi/worker_mpi_check.c):
#   - collectives of the MPI backend with 1, 2 and 4 ranks (oversubscribed);
#   - error feedback of every compressor over 3 real MPI ranks;
#   - 12 steps of data-parallel training without compression give the same
#     delta alone (MPI singleton), and with 1, 2 and 4 ranks, within float
#     tolerance; every rank ends with bit-identical weights;
#   - the compressed runs (PowerSGD, top-k, QSGD8) train on 2 ranks;
#   - DP-SGD adds its noise once for the region: the update's noise variance
#     is (sigma C / q n)^2 on 1, 2 and 4 ranks, not 2 or 4 times that.
# On a machine with a GPU (FA_TEST_GPU=1), the same with NCCL.
set -euo pipefail

BUILD=${FA_BUILD:?FA_BUILD not set}
CHECK="$BUILD/tests/fa-worker-mpi-check"
[ -x "$CHECK" ] || { echo "FAIL: $CHECK not built"; exit 1; }
if ! command -v mpirun >/dev/null 2>&1; then
    echo "SKIP: mpirun not found (install openmpi-bin)"
    exit 0
fi

MPIRUN=(mpirun --oversubscribe)
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
# One BLAS thread per rank: the ranks already share the cores.
export OPENBLAS_NUM_THREADS=1
# Keep OpenMPI on this host (shared memory and loopback).
export OMPI_MCA_btl=self,vader,tcp
export OMPI_MCA_btl_tcp_if_include=lo
export OMPI_MCA_oob_tcp_if_include=lo

tmp=$(mktemp -d /tmp/fa_it_worker_mpi.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

run() { # run NP ARGS...: all ranks must print "ok"
    local np=$1; shift
    local out="$tmp/out.$np.$RANDOM"
    if ! "${MPIRUN[@]}" -np "$np" "$CHECK" "$@" >"$out" 2>&1; then
        cat "$out"; echo "FAIL: mpirun -np $np $*"; exit 1
    fi
    local oks
    oks=$(grep -c '^ok ' "$out" || true)
    if [ "$oks" != "$np" ]; then
        cat "$out"; echo "FAIL: $oks of $np ranks said ok: $*"; exit 1
    fi
    grep '^ok ' "$out" | sort | head -n 1
}

for np in 1 2 4; do
    run "$np" comm
done
for kind in none powersgd topk qsgd8; do
    run 3 ef "$kind"
done

# The same global batch on 1, 2 and 4 ranks: the same training.
"$CHECK" train --out "$tmp/d_alone.bin" 2>"$tmp/alone.log" | grep '^ok ' \
    || { cat "$tmp/alone.log"; echo "FAIL: singleton run"; exit 1; }
for np in 1 2 4; do
    run "$np" train --out "$tmp/d$np.bin"
done
"$CHECK" compare "$tmp/d1.bin" "$tmp/d_alone.bin" --tol 0
"$CHECK" compare "$tmp/d1.bin" "$tmp/d2.bin" --tol 1e-4
"$CHECK" compare "$tmp/d1.bin" "$tmp/d4.bin" --tol 1e-4

for kind in powersgd topk qsgd8; do
    run 2 train --compress "$kind" --out "$tmp/c_$kind.bin"
done

for np in 1 2 4; do
    run "$np" dp
done

if [ "${FA_TEST_GPU:-0}" = 1 ]; then
    run 1 comm --device gpu
    run 1 train --device gpu --out "$tmp/g1.bin"
    "$CHECK" compare "$tmp/d1.bin" "$tmp/g1.bin" --tol 1e-3
fi
echo "PASS it_worker_mpi"
