#!/bin/sh
# bench-model-oneshot.sh TRAINER ARGS... - runs a one-shot trainer unchanged and,
# when it succeeded, appends "round=<FEDAGG_ROUND> <its results JSON on one line>"
# to $BENCH_MODEL_RESULTS.  `fedagg-bench model` (overhead part) reads the trainer's
# own training time from there: the worker truncates the one-shot trainer's log
# every round, so the kit's per-round summary line is gone by the end of the run.
# What this adds to a round: one /bin/sh and one tr, a few milliseconds.
"$@"
rc=$?
if [ "$rc" = 0 ] && [ -n "${BENCH_MODEL_RESULTS:-}" ] && [ -f "${FEDAGG_RESULT:-}" ]; then
    { printf 'round=%s ' "${FEDAGG_ROUND:-}"; tr -d '\n' <"$FEDAGG_RESULT"; echo; } \
        >>"$BENCH_MODEL_RESULTS"
fi
exit "$rc"
