#!/usr/bin/env bash
# The soak (tests/soak/soak.sh, `make soak`) in short, under ctest: 35 s of
# random SIGKILLs of the aggregator and the workers and blackholes of their
# paths, every worker behind an impairment relay; then 2 rounds after the
# last fault, the audit log verifying, contiguous versions, no process dead
# on its own, no error line or sanitizer report in any log.  About 60 s on
# 2 cores (the aggregator is SIGKILLed at the end, not drained: a drain
# waits up to 30 s for requests of workers killed in the last minute).
# SOAK_SEED replays a run; by default each run draws its faults anew.
: "${FA_SRC:?FA_SRC must be set}" "${FA_BIN:?FA_BIN must be set}"
export SOAK_SECONDS=${SOAK_SECONDS:-35} SOAK_AFTER_ROUNDS=${SOAK_AFTER_ROUNDS:-2}
export SOAK_TAIL_S=${SOAK_TAIL_S:-120} SOAK_QUICK_STOP=1
exec bash "$FA_SRC/tests/soak/soak.sh"
