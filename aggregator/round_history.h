/* round_history.h - what operators look back on: the last attempts of the
 * federation (outcome, phase durations, participants) and the accuracy of
 * each model version (built-in, evaluator command, federated), for the
 * admin API's "rounds" document and the dashboard's timeline and curves.
 * Kept in memory (a ring of FA_FED_HISTORY entries); after a restart the
 * completed rounds are read back from the audit log.  Sans-I/O. */
#ifndef FA_AGGREGATOR_ROUND_HISTORY_H
#define FA_AGGREGATOR_ROUND_HISTORY_H

#include <stddef.h>
#include <stdint.h>

#include "crypto/secagg.h"

/* One attempt. */
typedef struct fa_round_history_attempt {
    uint64_t round;
    uint32_t attempt;
    int completed; /* 1 completed, 0 aborted */
    char reason[200];
    uint64_t start_unix_ms, end_unix_ms; /* wall clock: when, for people */
    double seconds;                      /* how long, on the monotonic clock; < 0: unknown */
    double phase_s[FA_SECAGG_N_PHASES];      /* advertise .. unmask; < 0: not reached */
    char *participants, *dropped;            /* comma-separated region ids (malloc'ed) */
    uint64_t version;                        /* completed: the version it produced */
} fa_round_history_attempt;

/* The accuracies known of one version (NaN: not measured). */
typedef struct fa_round_history_eval {
    uint64_t version;
    double global_accuracy;    /* the built-in MLP evaluation */
    double central_accuracy;   /* the evaluator command */
    double federated_accuracy; /* the regions' example-weighted mean */
    uint32_t federated_regions;
} fa_round_history_eval;

typedef struct fa_round_history {
    fa_round_history_attempt *a;
    size_t n, next; /* entries held; where the next one goes */
    fa_round_history_eval *v;
    size_t nv, vnext;
    size_t cap;
} fa_round_history;

/* Returns 0 or -1 (out of memory). */
int fa_round_history_init(fa_round_history *h, size_t cap);
void fa_round_history_free(fa_round_history *h);

/* Adds an attempt (copied; the lists duplicated), dropping the oldest when
 * full.  Returns 0 or -1. */
int fa_round_history_add(fa_round_history *h, const fa_round_history_attempt *a);
size_t fa_round_history_count(const fa_round_history *h);
/* Attempt i, oldest first. */
const fa_round_history_attempt *fa_round_history_at(const fa_round_history *h, size_t i);

/* The evaluation entry of version (created when missing, the oldest
 * dropped when full); NULL when out of memory. */
fa_round_history_eval *fa_round_history_version(fa_round_history *h, uint64_t version);
size_t fa_round_history_versions(const fa_round_history *h);
/* Version entry i, oldest first. */
const fa_round_history_eval *fa_round_history_version_at(const fa_round_history *h, size_t i);

#endif
