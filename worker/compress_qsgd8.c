/* compress_qsgd8.c - 8-bit stochastic quantisation with a shared scale
 * (Alistarh et al., "QSGD", NeurIPS 2017, with s = 127 levels per sign and
 * the max-norm scaling of their experiments), with error feedback.
 *
 *   s   = max over ranks of max_j |m_ij|          all-reduce (max) of 1 float
 *   q_ij = floor(127 m_ij / s + u_ij), u ~ U[0,1)  in [-127, 127], unbiased
 *   out_j = s / 127 * sum_i q_ij                   all-gather of n int8
 *   e_i  = m_i - s / 127 q_i
 *
 * The integers are summed exactly before scaling, so every rank gets the same
 * bits.  The scale is shared, so no rank can overflow another's range.
 */
#include "worker/compress_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct qsgd8 {
    int8_t *q;     /* (n) this rank's levels */
    int8_t *recv;  /* size x n */
    size_t recv_cap;
    size_t *lens;
    int lens_n;
    int32_t *acc;  /* (n) integer sums */
} qsgd8;

static int qsgd8_init(fa_compress *c, fa_error *err)
{
    qsgd8 *t = calloc(1, sizeof(*t));
    if (!t)
        return fa_errorf(err, FA_ERR_NOMEM, "qsgd8: out of memory");
    c->impl = t;
    t->q = malloc(c->n);
    t->acc = malloc(c->n * sizeof(int32_t));
    if (!t->q || !t->acc)
        return fa_errorf(err, FA_ERR_NOMEM, "qsgd8: out of memory");
    return 0;
}

static void qsgd8_free(fa_compress *c)
{
    qsgd8 *t = c->impl;
    free(t->q);
    free(t->recv);
    free(t->lens);
    free(t->acc);
    free(t);
    c->impl = NULL;
}

static size_t qsgd8_payload(const fa_compress *c) { return c->n + sizeof(float); }

static int qsgd8_run(fa_compress *c, fa_comm *comm, float *grad, fa_error *err)
{
    qsgd8 *t = c->impl;
    size_t n = c->n;
    int p = fa_comm_size(comm), rc;
    float amax = 0.0f, inv, step;

    fa_compress_add_error(c, grad); /* grad now holds m_i */

    for (size_t j = 0; j < n; j++) {
        float a = fabsf(grad[j]);
        amax = a > amax ? a : amax;
        if (isnan(a)) {
            /* Infinity survives any max reduction (NaN may not), so every
             * rank sees the trouble in the shared scale. */
            amax = INFINITY;
            break;
        }
    }
    rc = fa_comm_allreduce_max_f32(comm, &amax, 1, err);
    if (rc != 0)
        return rc;
    /* Every rank sees the same amax, so every rank takes the same branch. */
    if (!isfinite(amax))
        return fa_errorf(err, FA_ERR_RANGE,
                         "qsgd8: a gradient holds NaN or infinity (training diverged?)");
    if (amax == 0.0f) {
        /* All zero everywhere: the sum is zero and nothing is dropped. */
        memset(grad, 0, n * sizeof(float));
        return 0;
    }
    inv = 127.0f / amax;
    step = amax / 127.0f;
    for (size_t j = 0; j < n; j += 2) {
        /* two 24-bit uniforms per 64 random bits */
        uint64_t bits = fa_rng_u64(&c->rng);
        float u[2] = {(float)(bits >> 40) * 0x1p-24f, (float)((bits >> 8) & 0xffffff) * 0x1p-24f};
        for (size_t h = 0; h < 2 && j + h < n; h++) {
            float v = floorf(grad[j + h] * inv + u[h]);
            v = v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v;
            t->q[j + h] = (int8_t)v;
        }
    }
    if (t->recv_cap < (size_t)p * n || t->lens_n < p) {
        free(t->recv);
        free(t->lens);
        t->recv_cap = (size_t)p * n;
        t->recv = malloc(t->recv_cap);
        t->lens = calloc((size_t)p, sizeof(size_t));
        t->lens_n = p;
        if (!t->recv || !t->lens) {
            t->recv_cap = 0;
            t->lens_n = 0;
            return fa_errorf(err, FA_ERR_NOMEM, "qsgd8: out of memory");
        }
    }
    rc = fa_comm_allgatherv(comm, t->q, n, t->recv, t->recv_cap, t->lens, err);
    if (rc != 0)
        return rc;
    for (int r = 0; r < p; r++)
        if (t->lens[r] != n)
            return fa_errorf(err, FA_ERR_PROTOCOL, "qsgd8: rank %d sent %zu levels, not %zu", r,
                             t->lens[r], n);

    if (c->cfg.error_feedback)
        for (size_t j = 0; j < n; j++)
            c->err[j] = grad[j] - step * (float)t->q[j];
    memset(t->acc, 0, n * sizeof(int32_t));
    for (int r = 0; r < p; r++) {
        const int8_t *restrict b = t->recv + (size_t)r * n;
        int32_t *restrict acc = t->acc;
        for (size_t j = 0; j < n; j++)
            acc[j] += b[j];
    }
    for (size_t j = 0; j < n; j++)
        grad[j] = step * (float)t->acc[j];
    return 0;
}

const fa_compress_ops fa_compress_qsgd8_ops = {
    .init = qsgd8_init,
    .run = qsgd8_run,
    .reset = NULL,
    .free = qsgd8_free,
    .payload = qsgd8_payload,
};
