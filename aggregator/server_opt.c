/* server_opt.c - server optimizers.  See server_opt.h. */
#include "aggregator/server_opt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

struct fa_server_opt {
    struct fa_server_opt_params p;
};

static int is_adaptive(int kind)
{
    return kind == FA_SERVER_OPT_FEDADAM || kind == FA_SERVER_OPT_FEDYOGI ||
           kind == FA_SERVER_OPT_FEDADAGRAD;
}

const char *fa_server_opt_kind_name(int kind)
{
    switch (kind) {
    case FA_SERVER_OPT_FEDAVG: return "fedavg";
    case FA_SERVER_OPT_FEDAVGM: return "fedavgm";
    case FA_SERVER_OPT_FEDADAM: return "fedadam";
    case FA_SERVER_OPT_FEDYOGI: return "fedyogi";
    case FA_SERVER_OPT_FEDADAGRAD: return "fedadagrad";
    default: return NULL;
    }
}

int fa_server_opt_new(fa_server_opt **out, const struct fa_server_opt_params *p, fa_error *err)
{
    fa_server_opt *o;

    *out = NULL;
    if (!fa_server_opt_kind_name(p->kind))
        return fa_errorf(err, FA_ERR_INVAL, "server optimizer: unknown kind %d", p->kind);
    if (!(p->learning_rate > 0 && isfinite(p->learning_rate)))
        return fa_errorf(err, FA_ERR_INVAL, "server optimizer: learning_rate must be > 0, not %g",
                         p->learning_rate);
    if (p->kind == FA_SERVER_OPT_FEDAVGM && !(p->momentum >= 0 && p->momentum < 1))
        return fa_errorf(err, FA_ERR_INVAL, "server optimizer: momentum must be in [0, 1), not %g",
                         p->momentum);
    if (is_adaptive(p->kind)) {
        if (!(p->beta1 >= 0 && p->beta1 < 1))
            return fa_errorf(err, FA_ERR_INVAL, "server optimizer: beta1 must be in [0, 1), not %g",
                             p->beta1);
        if (!(p->beta2 >= 0 && p->beta2 < 1))
            return fa_errorf(err, FA_ERR_INVAL, "server optimizer: beta2 must be in [0, 1), not %g",
                             p->beta2);
        if (!(p->tau > 0 && isfinite(p->tau)))
            return fa_errorf(err, FA_ERR_INVAL, "server optimizer: tau must be > 0, not %g",
                             p->tau);
    }
    o = calloc(1, sizeof(*o));
    if (!o)
        return fa_errorf(err, FA_ERR_NOMEM, "server optimizer: out of memory");
    o->p = *p;
    *out = o;
    return 0;
}

void fa_server_opt_del(fa_server_opt *o)
{
    free(o);
}

size_t fa_server_opt_state_count(const fa_server_opt *o)
{
    return is_adaptive(o->p.kind) ? 2 : o->p.kind == FA_SERVER_OPT_FEDAVGM ? 1 : 0;
}

const char *fa_server_opt_state_name(const fa_server_opt *o, size_t i)
{
    if (i >= fa_server_opt_state_count(o))
        return NULL;
    return i == 0 ? "m" : "v";
}

void fa_server_opt_state_init(const fa_server_opt *o, size_t i, float *s, size_t n)
{
    const float v0 = i == 1 ? (float)(o->p.tau * o->p.tau) : 0.0f;
    for (size_t k = 0; k < n; k++)
        s[k] = v0;
}

/* Coordinates per block of the kernels: loops of a fixed count vectorise
 * without a scalar epilogue of their own (CMakeLists.txt builds this file
 * with -O3 -fno-math-errno: sqrtf never sees a negative here, v >= 0). */
#define BLOCK 16

/* One coordinate of the adaptive step (kind a constant at every call). */
static inline void adaptive_one(int kind, size_t i, float *restrict w, const float *restrict delta,
                                const float *restrict m, const float *restrict v,
                                float *restrict m2, float *restrict v2, int want_w, int want_m,
                                int want_v, float b1, float b2, float tau, float lr)
{
    const float g = delta[i], g2 = g * g;
    const float mi = b1 * m[i] + (1.0f - b1) * g;
    float vi;
    if (kind == FA_SERVER_OPT_FEDADAM) {
        vi = b2 * v[i] + (1.0f - b2) * g2;
    } else if (kind == FA_SERVER_OPT_FEDYOGI) {
        const float sg = v[i] > g2 ? 1.0f : v[i] < g2 ? -1.0f : 0.0f;
        vi = v[i] - (1.0f - b2) * g2 * sg;
    } else { /* FedAdagrad */
        vi = v[i] + g2;
    }
    if (want_m)
        m2[i] = mi;
    if (want_v)
        v2[i] = vi;
    if (want_w)
        w[i] += lr * mi / (sqrtf(vi) + tau);
}

static inline void adaptive(const fa_server_opt *o, int kind, size_t n, float *restrict w,
                            const float *restrict delta, const float *restrict m,
                            const float *restrict v, float *restrict m2, float *restrict v2,
                            int want_w, int want_m, int want_v)
{
    const float b1 = (float)o->p.beta1, b2 = (float)o->p.beta2, tau = (float)o->p.tau;
    const float lr = (float)o->p.learning_rate;
    size_t i = 0;

    for (; i + BLOCK <= n; i += BLOCK)
        for (size_t j = i; j < i + BLOCK; j++)
            adaptive_one(kind, j, w, delta, m, v, m2, v2, want_w, want_m, want_v, b1, b2, tau, lr);
    for (; i < n; i++)
        adaptive_one(kind, i, w, delta, m, v, m2, v2, want_w, want_m, want_v, b1, b2, tau, lr);
}

/* The adaptive step of kind, one variant per wanted output (each loop
 * compiles without branches on them). */
static inline void adaptive_kind(const fa_server_opt *o, int kind, size_t n, float *w,
                                 const float *delta, const float *m, const float *v, float *m2,
                                 float *v2)
{
    if (w && !m2 && !v2)
        adaptive(o, kind, n, w, delta, m, v, NULL, NULL, 1, 0, 0);
    else if (!w && m2 && !v2)
        adaptive(o, kind, n, NULL, delta, m, v, m2, NULL, 0, 1, 0);
    else if (!w && !m2 && v2)
        adaptive(o, kind, n, NULL, delta, m, v, NULL, v2, 0, 0, 1);
    else if (w && m2 && v2)
        adaptive(o, kind, n, w, delta, m, v, m2, v2, 1, 1, 1);
    else
        adaptive(o, kind, n, w, delta, m, v, m2, v2, w != NULL, m2 != NULL, v2 != NULL);
}

void fa_server_opt_step(const fa_server_opt *o, size_t n, float *w, const float *delta,
                        const float *const state[FA_SERVER_OPT_MAX_STATE],
                        float *const next[FA_SERVER_OPT_MAX_STATE])
{
    const float lr = (float)o->p.learning_rate;
    float *m2 = next ? next[0] : NULL, *v2 = next ? next[1] : NULL;

    switch (o->p.kind) {
    case FA_SERVER_OPT_FEDAVG:
        if (w)
            for (size_t i = 0; i < n; i++)
                w[i] += lr * delta[i];
        break;
    case FA_SERVER_OPT_FEDAVGM: {
        const float mu = (float)o->p.momentum, *m = state[0];
        for (size_t i = 0; i < n; i++) {
            const float mi = mu * m[i] + delta[i];
            if (m2)
                m2[i] = mi;
            if (w)
                w[i] += lr * mi;
        }
        break;
    }
    case FA_SERVER_OPT_FEDADAM:
        adaptive_kind(o, FA_SERVER_OPT_FEDADAM, n, w, delta, state[0], state[1], m2, v2);
        break;
    case FA_SERVER_OPT_FEDYOGI:
        adaptive_kind(o, FA_SERVER_OPT_FEDYOGI, n, w, delta, state[0], state[1], m2, v2);
        break;
    default:
        adaptive_kind(o, FA_SERVER_OPT_FEDADAGRAD, n, w, delta, state[0], state[1], m2, v2);
        break;
    }
}

void fa_server_opt_describe(const fa_server_opt *o, char *buf, size_t n)
{
    const char *name = fa_server_opt_kind_name(o->p.kind);
    switch (o->p.kind) {
    case FA_SERVER_OPT_FEDAVG: snprintf(buf, n, "%s lr=%g", name, o->p.learning_rate); break;
    case FA_SERVER_OPT_FEDAVGM:
        snprintf(buf, n, "%s lr=%g momentum=%g", name, o->p.learning_rate, o->p.momentum);
        break;
    default:
        snprintf(buf, n, "%s lr=%g beta1=%g beta2=%g tau=%g", name, o->p.learning_rate, o->p.beta1,
                 o->p.beta2, o->p.tau);
        break;
    }
}
