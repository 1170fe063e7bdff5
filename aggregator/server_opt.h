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
 * correction.
 *
 * The object holds the hyperparameters only.  The state vectors (m, v: d
 * floats each) are the caller's: the aggregator keeps them in the optimizer
 * state file beside each model version and steps chunk by chunk, reading
 * the previous version's state and writing the next version's, so that
 * neither the weights nor the state of a large model are ever held whole in
 * memory.  Every step is element-wise: a chunked step gives the same bits
 * as a step over the whole vector.
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

/* Most state vectors of any kind ("m", "v"). */
#define FA_SERVER_OPT_MAX_STATE 2

/* Creates an optimizer.  Returns 0, FA_ERR_INVAL (hyperparameter out of
 * range; message names it) or FA_ERR_NOMEM. */
int fa_server_opt_new(fa_server_opt **out, const struct fa_server_opt_params *p, fa_error *err);
void fa_server_opt_del(fa_server_opt *o);

/* The state vectors: count is 0 (FedAvg), 1 (FedAvgM: "m") or 2 (adaptive:
 * "m", "v"), each of d floats (the names are those of the state file's
 * tensors). */
size_t fa_server_opt_state_count(const fa_server_opt *o);
const char *fa_server_opt_state_name(const fa_server_opt *o, size_t i);

/* The initial value of n coordinates of state vector i (m = 0, v = τ²). */
void fa_server_opt_state_init(const fa_server_opt *o, size_t i, float *s, size_t n);

/* One server step over n coordinates, from the mean delta and the state
 * before it (state[i], n floats each, for the fa_server_opt_state_count
 * vectors): w (n floats) is updated in place and the state after it goes to
 * next[i].  Any of w and next[i] may be NULL when that output is not wanted
 * (the state alone, or the weights alone, of a chunk); next[i] must
 * overlap none of w, delta and state. */
void fa_server_opt_step(const fa_server_opt *o, size_t n, float *w, const float *delta,
                        const float *const state[FA_SERVER_OPT_MAX_STATE],
                        float *const next[FA_SERVER_OPT_MAX_STATE]);

/* Name of a kind ("fedadam"), or NULL for an unknown one. */
const char *fa_server_opt_kind_name(int kind);

/* "fedadam lr=0.01 beta1=0.9 beta2=0.99 tau=0.001": for logs and the audit record. */
void fa_server_opt_describe(const fa_server_opt *o, char *buf, size_t n);

#endif
