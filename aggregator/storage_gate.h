/* storage_gate.h - when the aggregator's storage cannot take a round.
 *
 * A round ends in a commit (model, master weights, optimizer state, round
 * state, sum): on a full disk or a failing device there is no point in
 * opening attempts that every region would run through for nothing.  The
 * gate closes on a failure (not enough free space before an attempt opens,
 * a failed state save or commit) and opens again only when a check after a
 * back-off finds the storage usable: 1 s, doubling, at most 60 s.  The
 * caller logs a failure only when the gate says so (the first, and each
 * change of back-off), so a full disk is one line per back-off, not one
 * per tick.
 *
 * Sans-I/O: timestamps in, decisions out.  The free-space probe is the
 * caller's (statvfs).
 */
#ifndef FA_AGGREGATOR_STORAGE_GATE_H
#define FA_AGGREGATOR_STORAGE_GATE_H

#include <stdint.h>

#define FA_STORAGE_BACKOFF_MIN_MS 1000u
#define FA_STORAGE_BACKOFF_MAX_MS 60000u

typedef struct fa_storage_gate {
    int blocked;          /* 1: do not open attempts */
    uint64_t next_ms;     /* blocked: when to check again */
    uint64_t backoff_ms;  /* the current back-off */
    uint64_t failures;    /* since the gate last opened */
    uint64_t total;       /* failures ever (metric) */
    uint64_t since_ms;    /* blocked: since when */
    char reason[384];     /* blocked: why (for /readyz, status, the log) */
} fa_storage_gate;

void fa_storage_gate_init(fa_storage_gate *g);

/* A failure at now_ms: the gate closes (or stays closed) and the next
 * check is one back-off away, the back-off doubling up to the maximum.
 * Returns 1 when this failure is to be logged: the first one, or one with
 * a longer back-off than the last logged. */
int fa_storage_gate_fail(fa_storage_gate *g, uint64_t now_ms, const char *reason);

/* Whether the gate is closed and its next check is due at now_ms. */
int fa_storage_gate_due(const fa_storage_gate *g, uint64_t now_ms);

/* The storage works again: the gate opens and the back-off resets.  Returns
 * 1 when it was closed (the caller logs the recovery). */
int fa_storage_gate_ok(fa_storage_gate *g);

#endif
