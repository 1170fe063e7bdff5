/* round_privacy.h - a federation worker's differential privacy, round by
 * round (docs/privacy.md, "The region's budget").
 *
 * The leader (rank 0) of a worker with privacy.target_epsilon > 0 asks
 * here, before it trains a round, whether the budget can pay for it (a
 * round that cannot is neither downloaded nor trained), and before the
 * masked upload of an update charges it (once per distinct update: a new
 * attempt with the same update costs nothing), with the charge on disk
 * before anything leaves; then it sends the attempt's statement.
 *
 * The budget is the worker's own accountant (worker/privacy_state.h,
 * state_dir/privacy-accountant), or, for a worker its region agent
 * started, the accountant of the policy dataset it trains on, which the
 * agent keeps for every federation on that dataset (worker/agent_link.h):
 * the same questions, asked over the agent's socket.
 *
 * Every decision is logged here ("privacy budget exhausted", "privacy
 * spent", with the numbers) and put in the metrics given; what the budget
 * says when it is exhausted (skip the round, or stop) is the config's
 * privacy.on_exhausted.
 */
#ifndef FA_WORKER_ROUND_PRIVACY_H
#define FA_WORKER_ROUND_PRIVACY_H

#include <stddef.h>
#include <stdint.h>

#include "common/fa_err.h"
#include "config.pb-c.h"
#include "fedagg.pb-c.h"
#include "model/train.h"
#include "worker/agent_link.h"
#include "worker/privacy_budget.h"
#include "worker/trainer_result.h"
#include "worker/worker_metrics.h"

typedef struct fa_round_privacy fa_round_privacy;

/* The built-in trainer's DP-SGD under privacy p, for a shard of `examples`
 * trained with t (its steps, or its epochs of ceil(1/q) steps) on `world`
 * ranks: the sampling rate q (p->sampling_rate, or the batch size over
 * the examples), the clip and noise into *dpo (its key is drawn per round
 * by the caller), and what one round costs into *spend.  Returns 0, or
 * FA_ERR_INVAL for DP-SGD over several ranks with a compressed all-reduce
 * (each rank's part would be compressed before rank 0's noise is in the
 * sum). */
int fa_round_privacy_dpsgd(const Fedagg__WorkerPrivacy *p, const fa_train_opts *t,
                           uint64_t examples, int world, int compressed, fa_train_dp *dpo,
                           fa_privacy_spend *spend, fa_error *err);

typedef struct fa_round_privacy_opts {
    const Fedagg__WorkerConfig *cfg; /* privacy, and where the worker's own accountant is */
    int external;                    /* an external trainer reports each round's spend */
    /* the built-in trainer's DP-SGD round (NULL: external, or "ddg") */
    const fa_privacy_spend *builtin;
    fa_agent_link *link;        /* the agent's accountant; NULL: the worker's own */
    fa_worker_metrics *metrics; /* privacy_* and round_failures_total are kept here */
} fa_round_privacy_opts;

/* What a check tells the leader. */
typedef enum fa_round_privacy_verdict {
    FA_PRIV_GO = 0,     /* go on */
    FA_PRIV_SKIP = 1,   /* this attempt goes without the region */
    FA_PRIV_STOP = 2,   /* the budget is spent and privacy.on_exhausted says stop */
    FA_PRIV_REPLAY = 3, /* the statement came too late: the federation moved on */
} fa_round_privacy_verdict;

/* Opens the budget (logs "differential privacy on" with what is spent).
 * Returns 0, or the error that stops the worker (an accountant that does
 * not open, one of another mechanism, no agent). */
int fa_round_privacy_new(fa_round_privacy **out, const fa_round_privacy_opts *o, fa_error *err);

/* NULL is a no-op. */
void fa_round_privacy_del(fa_round_privacy *p);

/* 1 when the budget cannot pay for the next round and on_exhausted says
 * stop (said in the log): the worker stops at once. */
int fa_round_privacy_stop_at_start(fa_round_privacy *p);

/* Before training the round of info: FA_PRIV_GO, SKIP or STOP. */
fa_round_privacy_verdict fa_round_privacy_gate(fa_round_privacy *p,
                                               const Fedagg__FederationInfo *info);

/* Before the masked upload of attempt info: charges the update (d floats,
 * trained from *delta_version; an external trainer's report xpriv) and
 * fills *st with the attempt's statement (valid until the next call) for
 * the caller to send.  FA_PRIV_GO, SKIP or STOP; an update that can never
 * be sent has *delta_version set to UINT64_MAX. */
fa_round_privacy_verdict
fa_round_privacy_charge(fa_round_privacy *p, const Fedagg__FederationInfo *info, const float *delta,
                        size_t d, uint64_t *delta_version, const fa_trainer_privacy *xpriv,
                        Fedagg__PrivacyStatement *st);

/* The statement of attempt (round, attempt), whose update was charged
 * (a restarted worker resuming it).  FA_PRIV_GO (*st filled) or SKIP. */
fa_round_privacy_verdict fa_round_privacy_statement(fa_round_privacy *p, uint64_t round,
                                                    uint32_t attempt, Fedagg__PrivacyStatement *st);

#endif
