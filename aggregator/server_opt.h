/* server_opt.h - server optimizers applied to the securely averaged delta.
 *
 * Reddi et al., "Adaptive Federated Optimization", ICLR 2021, Algorithm 2,
 * with FedAvgM from Hsu et al. 2019.  With Δ the weighted mean of the
 * regions' deltas (w_local - w_global) at step t:
 *
 *   FedAvg:      x += lr * Δ
 *   FedAvgM:     m = momentum * m + Δ;                      x += lr * m
 *   FedAdagrad:  m = β1 m + (1-β1) Δ;  v = v + Δ²;          x += lr * m / (√v + τ)
 *   FedAdam:     m = β1 m + (1-β1) Δ;  v = β2 v + (1-β2) Δ²; x += lr * m / (√v + τ)
 *   FedYogi:     m = β1 m + (1-β1) Δ;  v = v - (1-β2) Δ² sign(v - Δ²); x += lr * m / (√v + τ)
 *
 * v starts at τ² (the paper's v_{-1} >= τ²), m at 0, as in the paper; no bias
 * correction.  The state vectors are part of the aggregator's checkpoint: the
 * caller saves them beside each model version and restores them on restart.
 */
#ifndef FA_SERVER_OPT_H
#define FA_SERVER_OPT_H

#include <stddef.h>
#include <stdint.h>

#include "common/fa_err.h"

enum fa_server_opt_kind {
    FA_SERVER_OPT_FEDAVG = 0, /* values equal config.proto's ServerOptimizerKind */
    FA_SERVER_OPT_FEDAVGM = 1,
    FA_SERVER_OPT_FEDADAM = 2,
    FA_SERVER_OPT_FEDYOGI = 3,
    FA_SERVER_OPT_FEDADAGRAD = 4,
};

struct fa_server_opt_params {
    int kind;             /* enum fa_server_opt_kind */
    double learning_rate; /* η > 0 */
    double momentum;      /* FedAvgM, in [0, 1) */
    double beta1;         /* adaptive, in [0, 1) */
    double beta2;         /* adaptive, in [0, 1) */
    double tau;           /* adaptive, > 0 */
};

typedef struct fa_server_opt fa_server_opt;

/* Creates an optimizer over d parameters with zeroed state (v = τ²).
 * Returns 0, FA_ERR_INVAL (hyperparameter out of range; message names it)
 * or FA_ERR_NOMEM. */
int fa_server_opt_new(fa_server_opt **out, const struct fa_server_opt_params *p, size_t d,
                      fa_error *err);
void fa_server_opt_del(fa_server_opt *o);

/* One server step: updates w (d floats) in place from the mean delta. */
void fa_server_opt_step(fa_server_opt *o, float *restrict w, const float *restrict delta);

/* The same step, leaving the optimizer as it was (for a caller that may
 * have to undo it): w is updated in place, and the new state goes to
 * next[i] (d floats each, malloc'ed, for the fa_server_opt_state_count
 * states; NULL beyond).  fa_server_opt_adopt then makes next the state
 * (the optimizer owns those arrays from then on) and counts the step,
 * handing the old state arrays back in next (the caller's now: to reuse
 * next time, or free). */
void fa_server_opt_step_to(const fa_server_opt *o, float *restrict w, const float *restrict delta,
                           float *const next[2]);
void fa_server_opt_adopt(fa_server_opt *o, float *next[2]);

/* Steps taken so far (restored with the state). */
uint64_t fa_server_opt_steps(const fa_server_opt *o);

/* The state vectors, for checkpointing: count is 0 (FedAvg), 1 (FedAvgM: "m")
 * or 2 (adaptive: "m", "v"); each has d floats and may be overwritten to
 * restore a checkpoint. */
size_t fa_server_opt_state_count(const fa_server_opt *o);
const char *fa_server_opt_state_name(const fa_server_opt *o, size_t i);
float *fa_server_opt_state(fa_server_opt *o, size_t i);
void fa_server_opt_set_steps(fa_server_opt *o, uint64_t steps);

/* Name of a kind ("fedadam"), or NULL for an unknown one. */
const char *fa_server_opt_kind_name(int kind);

/* "fedadam lr=0.01 beta1=0.9 beta2=0.99 tau=0.001": for logs and the audit record. */
void fa_server_opt_describe(const fa_server_opt *o, char *buf, size_t n);

#endif
