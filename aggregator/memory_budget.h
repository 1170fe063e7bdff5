/* memory_budget.h - does a federation's round fit the memory the
 * aggregator may use?  Checked at start, so that a model too large for the
 * pod is refused with the numbers instead of being OOM-killed mid-round. */
#ifndef FA_AGGREGATOR_MEMORY_BUDGET_H
#define FA_AGGREGATOR_MEMORY_BUDGET_H

#include <stddef.h>
#include <stdint.h>

#include "common/fa_err.h"

/* The memory a round holds at its peak, by part (bytes).  The master
 * weights and the optimizer state stay in the model store's files and are
 * streamed through the step (aggregator/global_model.h), the journals of
 * the uploads in flight are files beyond a fixed budget
 * (aggregator/upload_journal.h): what grows with d is the
 * secure-aggregation sum, and once at start the initial model while version
 * 0 is written (before any round's memory). */
typedef struct fa_memory_need {
    uint64_t sum;      /* 4 (d + 1): the secure-aggregation running sum */
    uint64_t step;     /* the streamed optimizer step's scratch (a few MiB) */
    uint64_t uploads;  /* the journals of the uploads in flight held in memory */
    uint64_t requests; /* request bodies held while received (the transport's budget) */
    uint64_t initial;  /* 4 d: the initial weights while version 0 is written */
    uint64_t total;    /* the larger of initial and the round's parts together */
} fa_memory_need;

/* d federated coordinates, n_state optimizer state vectors, in_flight
 * masked uploads of masked_bytes at a time, their journals in memory up to
 * journal_memory bytes (fa_upload_journal_new). */
void fa_memory_round_need(uint64_t d, size_t n_state, uint32_t in_flight, uint64_t masked_bytes,
                          uint64_t journal_memory, fa_memory_need *out);

/* Adds the budget of buffered request bytes (quic.max_buffered_request_bytes)
 * to the round's parts, and the total. */
void fa_memory_add_requests(fa_memory_need *need, uint64_t bytes);

/* The memory allowed: configured (non-zero), else the cgroup's limit (v2
 * memory.max, v1 memory.limit_in_bytes), else the machine's.  *source
 * names where it came from.  Returns 0 or FA_ERR_IO when nothing can say. */
int fa_memory_limit(uint64_t configured, uint64_t *limit, const char **source, fa_error *err);

/* 0 when need fits limit, else FA_ERR_NOSPACE with a message that gives
 * every part and what to change. */
int fa_memory_check(const fa_memory_need *need, uint64_t limit, const char *source, fa_error *err);

/* The same beside `others` federations of the process that hold `used`
 * bytes of the limit (aggregator/service.h): 0 when need fits what they
 * leave, else FA_ERR_NOSPACE with every part, theirs included. */
int fa_memory_check_beside(const fa_memory_need *need, uint64_t used, size_t others, uint64_t limit,
                           const char *source, fa_error *err);

#endif
