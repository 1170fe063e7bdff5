/* leader_core.h - what a federation worker's leader (rank 0) does next,
 * round after round, without I/O.
 *
 * The leader follows one federation: it reads where the federation is,
 * and for each attempt it may take part in, checks the region's privacy
 * budget, the room in its state directory, downloads the global model,
 * waits for the device (under a region agent), trains, charges and states
 * the update's privacy cost, and runs the secure-aggregation attempt; a
 * restarted worker first resumes the attempt it saved.  This core decides
 * the order of those steps and what each outcome means (go on, sit this
 * attempt out, wait and look again, back off, stop); the edge
 * (worker/fedagg_worker_main.c) does each step and reports its outcome:
 *
 *   fa_leader_core_init(&c, rounds);
 *   for (;;) {
 *       step = fa_leader_core_next(&c, &wait_ms);
 *       REFRESH: sleep wait_ms, GET the federation's position,
 *                fa_leader_core_info(&c, now, &view)
 *       STOP, FAIL, FINISH: end
 *       else:    do the step, fa_leader_core_done(&c, now, outcome, &view)
 *   }
 *
 * The view is what the edge knows when it reports: the federation's
 * position (its last GET) and the region's own state (the model it holds,
 * the model its update was trained from, a saved attempt).  Time (for the
 * state directory's back-off) is any monotonic millisecond clock, passed in.
 */
#ifndef FA_WORKER_LEADER_CORE_H
#define FA_WORKER_LEADER_CORE_H

#include <stdint.h>

typedef enum fa_leader_step {
    FA_LEADER_REFRESH = 0,   /* wait, then read the federation's position */
    FA_LEADER_FINISH = 1,    /* the federation finished: final evaluation, end */
    FA_LEADER_STATEMENT = 2, /* a saved attempt: its privacy statement again */
    FA_LEADER_RESUME = 3,    /* run the saved attempt */
    FA_LEADER_GATE = 4,      /* can the privacy budget pay for this round? */
    FA_LEADER_ROOM = 5,      /* has the state directory room for an attempt? */
    FA_LEADER_FETCH = 6,     /* download the global model */
    FA_LEADER_DEVICE = 7,    /* wait for the device (a region agent's queue) */
    FA_LEADER_TRAIN = 8,     /* train the local round, quantise the update */
    FA_LEADER_CHARGE = 9,    /* charge the update, send the privacy statement */
    FA_LEADER_UPLOAD = 10,   /* run the attempt with the update */
    FA_LEADER_STOP = 11,     /* end, success */
    FA_LEADER_FAIL = 12,     /* end with the last step's error */
} fa_leader_step;

typedef enum fa_leader_outcome {
    FA_LEADER_OK = 0,      /* the step succeeded */
    FA_LEADER_SKIP = 1,    /* this attempt goes without this region */
    FA_LEADER_AGAIN = 2,   /* a passing trouble: look again shortly */
    FA_LEADER_REPLAY = 3,  /* the federation moved on: resynchronise */
    FA_LEADER_FAILED = 4,  /* the attempt failed: retry after a back-off */
    FA_LEADER_STOPPED = 5, /* stop for good, with success (budget, signal) */
    FA_LEADER_FATAL = 6,   /* stop with an error */
} fa_leader_outcome;

typedef struct fa_leader_view {
    /* the federation's position */
    uint64_t round, model_version;
    uint32_t attempt;
    int advertising; /* its attempt takes advertisements (regions may join) */
    int finished;
    /* this region */
    int has_saved;          /* a saved attempt of (round, attempt) */
    int dp;                 /* differential privacy on */
    int device;             /* training waits for the agent's device */
    uint64_t have_version;  /* the global model held; UINT64_MAX: none */
    uint64_t delta_version; /* the model the update was trained from; UINT64_MAX: none */
} fa_leader_view;

typedef struct fa_leader_core {
    fa_leader_step next;
    uint32_t wait_ms;
    fa_leader_view v;
    uint64_t last_round; /* the attempt done for this region (taken part or sat out) */
    uint32_t last_attempt;
    uint64_t rounds_done, rounds_limit;
    unsigned failures;  /* attempts failed in a row */
    uint64_t room_next; /* no room in the state directory: next check */
    uint32_t room_backoff_ms;
} fa_leader_core;

/* Starts with a REFRESH at once; rounds_limit 0: until the federation
 * finishes. */
void fa_leader_core_init(fa_leader_core *c, uint64_t rounds_limit);

/* The step to do now (*wait_ms: REFRESH's wait first). */
fa_leader_step fa_leader_core_next(const fa_leader_core *c, uint32_t *wait_ms);

/* The federation's position after a REFRESH. */
void fa_leader_core_info(fa_leader_core *c, uint64_t now_ms, const fa_leader_view *v);

/* The outcome of the step last returned, with the view now.  A REFRESH
 * whose GET failed reports FA_LEADER_FATAL here. */
void fa_leader_core_done(fa_leader_core *c, uint64_t now_ms, fa_leader_outcome o,
                         const fa_leader_view *v);

/* Rounds completed with this region. */
uint64_t fa_leader_core_rounds(const fa_leader_core *c);

/* The back-off of the state directory's room check, ms (0: room). */
uint32_t fa_leader_core_room_backoff(const fa_leader_core *c);

#endif
