/* agent_core.h - the region agent's decisions, without I/O
 * (docs/region-policy.md, docs/architecture.md "The region agent").
 *
 * The agent (fedagg-worker with `services` in its config) joins the
 * federations the aggregation services invite its region to, under the
 * region's own policy, and runs each accepted one in a federation worker
 * process of its own.  This core holds every decision it takes; the edge
 * (worker/agent.c) does the listing, the signing and posting, the
 * processes, the socket and the files, and feeds the core what happened:
 *
 *   fa_agent_core_new(&c, cfg, now, &err);
 *   loop:
 *     fa_agent_core_tick(c, now);
 *     while (fa_agent_core_pop(c, &a)) do a;          LIST, POST_DECISION, START, STOP,
 *                                                      GRANT, SKIP
 *     report what happened: fa_agent_core_listed / _list_failed, _started,
 *     _exited, _device_acquire / _device_release / _detached, _privacy
 *     wait until fa_agent_core_next_timer(c) or an event
 *
 * The decisions:
 *   - accept or refuse an offer (policy: the team or federation id, the
 *     trainer and the dataset by name, the model's size, the federation's
 *     regions, its privacy mechanism against the dataset's budget, the
 *     number of federations at once), each refusal with its reason for the
 *     central operators; a decision is posted when it differs from the one
 *     last posted (a policy edited and the agent restarted may change it);
 *   - run, stop and restart the federation workers: a worker that fails is
 *     restarted after a back-off (1 s doubling to 5 min, reset after a run
 *     of 5 min), one that ends by itself (the federation finished, or its
 *     budget stopped it) is not; a federation that disappears from the
 *     listing, or is stopped centrally, has its worker stopped;
 *   - share each device: one training at a time, first come first served;
 *     a round whose deadline the queue would make it miss is skipped at
 *     once rather than trained late (the expected wait is the holder's and
 *     those ahead's last measured training times);
 *   - back off a service that does not answer (1 s doubling to its poll
 *     interval);
 *   - spend a dataset's privacy budget: every federation on the dataset
 *     spends from one accountant (worker/privacy_budget.h, shared), so the
 *     round that would exceed it is refused whichever federation asks.
 *
 * Time is the wall clock in milliseconds since the Unix epoch (the rounds'
 * deadlines are the aggregator's, in that clock), always passed in.  No
 * I/O, no clocks, no randomness.  Not thread-safe.
 */
#ifndef FA_WORKER_AGENT_CORE_H
#define FA_WORKER_AGENT_CORE_H

#include <stddef.h>
#include <stdint.h>

#include "common/fa_err.h"
#include "config.pb-c.h"
#include "fedagg.pb-c.h"
#include "worker/privacy_budget.h"

#define FA_AGENT_REASON_MAX 320
/* The longest federation id the agent takes (it names a directory). */
#define FA_AGENT_ID_MAX 128
/* The device of a policy that names none. */
#define FA_AGENT_DEFAULT_DEVICE "local"

typedef struct fa_agent_core fa_agent_core;

typedef enum fa_agent_action_kind {
    FA_AGENT_LIST = 1,          /* list the offers of `service` (GET /v1/federations) */
    FA_AGENT_POST_DECISION = 2, /* sign and post the decision on `fed` (accept, reason) */
    FA_AGENT_START = 3,         /* start the worker of `fed` */
    FA_AGENT_STOP = 4,          /* stop the worker of `fed` (SIGTERM, its grace) */
    FA_AGENT_GRANT = 5,         /* tell the worker of `fed`: the device is yours */
    FA_AGENT_SKIP = 6,          /* tell the worker of `fed`: skip this round (reason) */
} fa_agent_action_kind;

typedef struct fa_agent_action {
    fa_agent_action_kind kind;
    int fed;     /* the federation's handle (every kind but LIST) */
    int service; /* the service (every kind) */
    int accept;  /* POST_DECISION */
    /* POST_DECISION: the refusal's reason; STOP, SKIP: why, for the log */
    char reason[FA_AGENT_REASON_MAX];
} fa_agent_action;

/* Creates the core of the agent of cfg (a WorkerConfig with `services`;
 * cfg must outlive the core).  Every service is due for a listing at once.
 * Returns 0, FA_ERR_INVAL (no services) or FA_ERR_NOMEM. */
int fa_agent_core_new(fa_agent_core **out, const Fedagg__WorkerConfig *cfg, uint64_t now_ms,
                      fa_error *err);

/* NULL is a no-op. */
void fa_agent_core_del(fa_agent_core *c);

/* Timers: listings due, workers to restart, queued rounds whose deadline
 * can no longer be met. */
void fa_agent_core_tick(fa_agent_core *c, uint64_t now_ms);

/* The earliest time tick has something to do, or UINT64_MAX. */
uint64_t fa_agent_core_next_timer(const fa_agent_core *c);

/* Pops the next action into *a: 1, or 0 when there is none. */
int fa_agent_core_pop(fa_agent_core *c, fa_agent_action *a);

/* ---- services and offers ---- */

/* The listing of `service` came back with these offers (every federation
 * the service invites this region to): decides on each, and stops the
 * workers of this service's federations that are no longer listed.
 * Offers without an id are ignored (counted in *ignored, may be NULL). */
void fa_agent_core_listed(fa_agent_core *c, uint64_t now_ms, int service,
                          Fedagg__FederationOffer *const *offers, size_t n, size_t *ignored);

/* The listing of `service` failed: it is tried again after a back-off. */
void fa_agent_core_list_failed(fa_agent_core *c, uint64_t now_ms, int service);

/* The decision on fed was not taken by the service: posted again after the
 * next listing. */
void fa_agent_core_decision_failed(fa_agent_core *c, int fed);

/* ---- federation workers ---- */

/* The worker of fed was started (ok) or could not be (it is tried again
 * after a back-off). */
void fa_agent_core_started(fa_agent_core *c, uint64_t now_ms, int fed, int ok);

/* The worker of fed ended: `done` when by itself with success (exit 0: the
 * federation finished, or the worker stopped for good), else a failure.
 * Frees what it held of the device. */
void fa_agent_core_exited(fa_agent_core *c, uint64_t now_ms, int fed, int done);

/* Stops every worker (STOP actions): the agent is going away. */
void fa_agent_core_shutdown(fa_agent_core *c);

/* Workers that still run (started and not exited). */
size_t fa_agent_core_running(const fa_agent_core *c);

/* ---- the device queue ---- */

typedef enum fa_agent_device_answer {
    FA_AGENT_DEVICE_GRANTED = 0, /* train now */
    FA_AGENT_DEVICE_QUEUED = 1,  /* wait: a GRANT or SKIP action comes later */
    FA_AGENT_DEVICE_SKIP = 2,    /* skip this round: it would miss its deadline */
} fa_agent_device_answer;

/* The worker of fed asks for its device to train a round whose deadline
 * (the end of the phase its update is due in; 0 = none) is deadline_ms.
 * Asking again while holding it grants it again; while queued, updates the
 * deadline.  With FA_AGENT_DEVICE_SKIP, why (n bytes) says why. */
fa_agent_device_answer fa_agent_core_device_acquire(fa_agent_core *c, uint64_t now_ms, int fed,
                                                    uint64_t deadline_ms, char *why, size_t n);

/* The worker of fed is done with its device (its training took the time
 * since the grant: the estimate of its next one).  The next in the queue is
 * granted, or skipped when it can no longer meet its deadline. */
void fa_agent_core_device_release(fa_agent_core *c, uint64_t now_ms, int fed);

/* The worker of fed went away (its connection closed): its place in the
 * queue, or the device, is given up without a measurement. */
void fa_agent_core_detached(fa_agent_core *c, uint64_t now_ms, int fed);

/* The time a federation's training last took, ms (0: not measured yet). */
uint64_t fa_agent_core_train_ms(const fa_agent_core *c, int fed);

/* ---- the datasets' privacy budgets ---- */

/* The accountant of policy dataset ds (the edge opens it from disk; b
 * stays the edge's and must outlive the core). */
void fa_agent_core_set_accountant(fa_agent_core *c, int ds, fa_privacy_budget *b);

typedef enum fa_agent_privacy_op {
    FA_AGENT_PRIVACY_PREVIEW = 0,   /* would a round with spend fit? */
    FA_AGENT_PRIVACY_CHARGE = 1,    /* charge this update (round, version, digest) */
    FA_AGENT_PRIVACY_STATEMENT = 2, /* the statement of (round, attempt) */
} fa_agent_privacy_op;

typedef struct fa_agent_privacy_req {
    fa_agent_privacy_op op;
    int have_spend; /* PREVIEW without a spend: this federation's last one, or
                     * whether anything is left */
    fa_privacy_spend spend;
    uint64_t round, version;
    uint32_t attempt;
    uint8_t digest[32];
} fa_agent_privacy_req;

typedef struct fa_agent_privacy_res {
    /* 0, FA_ERR_RANGE (the dataset's budget would be exceeded), FA_ERR_INVAL
     * (the spend), FA_ERR_STATE (no release of that round), FA_ERR_NOTFOUND
     * (the federation trains on no dataset with a budget) */
    int rc;
    char msg[512];
    int charged; /* CHARGE: composed now (not a repeat) */
    int save;    /* the accountant of dataset `ds` must be on disk before answering */
    int ds;      /* the dataset (policy index) */
    double eps_round, eps_total; /* PREVIEW, CHARGE: the round alone, the total with it */
    double spent, budget, delta; /* the dataset's accountant after the call */
    uint64_t rounds;
    int have_last; /* this federation's last release */
    fa_privacy_release last;
    Fedagg__PrivacyStatement st; /* STATEMENT, CHARGE (rc 0): strings valid until the next call */
} fa_agent_privacy_res;

/* A privacy request of the worker of fed on its dataset's accountant.
 * Returns res->rc. */
int fa_agent_core_privacy(fa_agent_core *c, int fed, const fa_agent_privacy_req *req,
                          fa_agent_privacy_res *res);

/* The edge saved (rc 0) or failed to save the accountant of dataset ds
 * after a charge: until a save succeeds every answer asks for one. */
void fa_agent_core_privacy_saved(fa_agent_core *c, int ds, int rc);

/* ---- what the edge needs to know of a federation ---- */

/* The handle of (service, id), or -1. */
int fa_agent_core_find(const fa_agent_core *c, int service, const char *id);
const char *fa_agent_core_fed_id(const fa_agent_core *c, int fed);
int fa_agent_core_fed_service(const fa_agent_core *c, int fed);
/* Policy indexes of its trainer, dataset and device (-1 before a decision). */
int fa_agent_core_fed_trainer(const fa_agent_core *c, int fed);
int fa_agent_core_fed_dataset(const fa_agent_core *c, int fed);
int fa_agent_core_fed_device(const fa_agent_core *c, int fed);
/* "refused", "running", "restarting", "done", "stopping", "gone" */
const char *fa_agent_core_fed_state(const fa_agent_core *c, int fed);
/* Its worker's failures in a row (the back-off's exponent). */
unsigned fa_agent_core_fed_failures(const fa_agent_core *c, int fed);
/* The policy's devices: names (the default one when the policy lists none). */
size_t fa_agent_core_devices(const fa_agent_core *c);
const char *fa_agent_core_device_name(const fa_agent_core *c, int dev);

/* The reason the policy gives for refusing `offer` now, or NULL when it
 * accepts it (capacity aside): what the core decides with, for tests and
 * `fedagg` tools. */
const char *fa_agent_core_judge(const fa_agent_core *c, const Fedagg__FederationOffer *offer,
                                char *reason, size_t n);

#endif
