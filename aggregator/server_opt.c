#include "aggregator/server_opt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

struct fa_server_opt {
    struct fa_server_opt_params p;
    size_t d;
    uint64_t steps;
    float *m; /* (d) first moment / momentum; NULL for FedAvg */
    float *v; /* (d) second moment; NULL unless adaptive */
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

int fa_server_opt_new(fa_server_opt **out, const struct fa_server_opt_params *p, size_t d,
                      fa_error *err)
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
    o->d = d;
    if (p->kind != FA_SERVER_OPT_FEDAVG) {
        o->m = calloc(d ? d : 1, sizeof(float));
        if (!o->m)
            goto nomem;
    }
    if (is_adaptive(p->kind)) {
        float tau2 = (float)(p->tau * p->tau);
        o->v = malloc((d ? d : 1) * sizeof(float));
        if (!o->v)
            goto nomem;
        for (size_t i = 0; i < d; i++)
            o->v[i] = tau2;
    }
    *out = o;
    return 0;
nomem:
    fa_server_opt_del(o);
    return fa_errorf(err, FA_ERR_NOMEM, "server optimizer: out of memory for %zu parameters", d);
}

void fa_server_opt_del(fa_server_opt *o)
{
    if (!o)
        return;
    free(o->m);
    free(o->v);
    free(o);
}

/* One step reading the state from m, v and writing it to m2, v2 (the same
 * arrays, or others). */
static void step(const fa_server_opt *o, float *restrict w, const float *restrict delta,
                 const float *m, const float *v, float *m2, float *v2)
{
    const size_t d = o->d;
    const float lr = (float)o->p.learning_rate;

    switch (o->p.kind) {
    case FA_SERVER_OPT_FEDAVG:
        for (size_t i = 0; i < d; i++)
            w[i] += lr * delta[i];
        break;
    case FA_SERVER_OPT_FEDAVGM: {
        const float mu = (float)o->p.momentum;
        for (size_t i = 0; i < d; i++) {
            const float mi = mu * m[i] + delta[i];
            m2[i] = mi;
            w[i] += lr * mi;
        }
        break;
    }
    default: {
        const float b1 = (float)o->p.beta1, b2 = (float)o->p.beta2, tau = (float)o->p.tau;
        for (size_t i = 0; i < d; i++) {
            const float g = delta[i], g2 = g * g;
            const float mi = b1 * m[i] + (1.0f - b1) * g;
            float vi;
            if (o->p.kind == FA_SERVER_OPT_FEDADAM) {
                vi = b2 * v[i] + (1.0f - b2) * g2;
            } else if (o->p.kind == FA_SERVER_OPT_FEDYOGI) {
                const float s = v[i] > g2 ? 1.0f : v[i] < g2 ? -1.0f : 0.0f;
                vi = v[i] - (1.0f - b2) * g2 * s;
            } else { /* FedAdagrad */
                vi = v[i] + g2;
            }
            m2[i] = mi;
            v2[i] = vi;
            w[i] += lr * mi / (sqrtf(vi) + tau);
        }
        break;
    }
    }
}

void fa_server_opt_step(fa_server_opt *o, float *restrict w, const float *restrict delta)
{
    step(o, w, delta, o->m, o->v, o->m, o->v);
    o->steps++;
}

void fa_server_opt_step_to(const fa_server_opt *o, float *restrict w, const float *restrict delta,
                           float *const next[2])
{
    step(o, w, delta, o->m, o->v, next[0], next[1]);
}

void fa_server_opt_adopt(fa_server_opt *o, float *next[2])
{
    float *m = o->m, *v = o->v;
    if (o->m) {
        o->m = next[0];
        next[0] = m;
    }
    if (o->v) {
        o->v = next[1];
        next[1] = v;
    }
    o->steps++;
}

uint64_t fa_server_opt_steps(const fa_server_opt *o)
{
    return o->steps;
}

void fa_server_opt_set_steps(fa_server_opt *o, uint64_t steps)
{
    o->steps = steps;
}

size_t fa_server_opt_state_count(const fa_server_opt *o)
{
    return o->v ? 2 : o->m ? 1 : 0;
}

const char *fa_server_opt_state_name(const fa_server_opt *o, size_t i)
{
    if (i >= fa_server_opt_state_count(o))
        return NULL;
    return i == 0 ? "m" : "v";
}

float *fa_server_opt_state(fa_server_opt *o, size_t i)
{
    if (i >= fa_server_opt_state_count(o))
        return NULL;
    return i == 0 ? o->m : o->v;
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
