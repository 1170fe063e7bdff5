/* compress_powersgd.c - rank-r PowerSGD with error feedback and warm start
 * (Vogels et al. 2019, Algorithms 1 and 2), per layer as PyTorch's
 * powerSGD_hook (torch/distributed/algorithms/ddp_comm_hooks/powerSGD_hook.py).
 *
 * One step, for each compressed matrix M_i (rows, cols) of this rank:
 *
 *   M_i = G_i + E_i                      error feedback
 *   P_i = M_i Q          (rows, r)       Q (cols, r): shared, warm-started
 *   P   = sum_i P_i                      all-reduce #1 (with the small tensors)
 *   P^  = orthonormal columns of P       Gram-Schmidt
 *   Q_i = M_i^T P^       (cols, r)
 *   Q   = sum_i Q_i                      all-reduce #2
 *   out = P^ Q^T = P^ P^^T sum_i M_i     (rows, cols), the same on every rank
 *   E_i = M_i - P^ Q_i^T                 what this rank's share dropped
 *
 * sum_i P^ Q_i^T = out, so the errors hold exactly what the result lacks.
 * When sum_i M_i has rank <= r, P spans its column space and out is exact.
 */
#include "worker/compress_internal.h"

#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A column of P whose Gram-Schmidt residual falls below this fraction of its
 * original norm lies in the span of the previous ones (rank deficiency: float
 * noise, not signal) and is set to zero instead of being normalised. */
#define PSGD_DEPENDENT_REL 1e-5

typedef struct psgd_mat {
    size_t offset, rows, cols, r;
    size_t p_off; /* its P in pbuf */
    size_t q_off; /* its Q in qbuf / qlocal / q */
} psgd_mat;

typedef struct psgd_range {
    size_t offset, len;
} psgd_range;

typedef struct psgd {
    psgd_mat *mats;
    size_t n_mats;
    psgd_range *small; /* uncompressed ranges of the block */
    size_t n_small;
    size_t small_numel;
    size_t p_numel; /* small_numel + sum rows r */
    size_t q_numel; /* sum cols r */
    float *pbuf;    /* (p_numel) [small values | P of each matrix] */
    float *qbuf;    /* (q_numel) Q_i, then the all-reduced Q */
    float *qlocal;  /* (q_numel) this rank's Q_i before the all-reduce */
    float *q;       /* (q_numel) warm-start Q */
    int have_q;
    fa_rng qrng;    /* the shared stream of Q draws: same seed on every rank */
} psgd;

static int add_small(psgd *s, size_t offset, size_t len)
{
    if (len == 0)
        return 0;
    if (s->n_small > 0 && s->small[s->n_small - 1].offset + s->small[s->n_small - 1].len == offset) {
        s->small[s->n_small - 1].len += len;
    } else {
        s->small[s->n_small].offset = offset;
        s->small[s->n_small].len = len;
        s->n_small++;
    }
    s->small_numel += len;
    return 0;
}

static int psgd_init(fa_compress *c, fa_error *err)
{
    psgd *s = calloc(1, sizeof(*s));
    size_t pos = 0;

    if (!s)
        return fa_errorf(err, FA_ERR_NOMEM, "powersgd: out of memory");
    c->impl = s;
    s->mats = calloc(c->n_tensors + 1, sizeof(*s->mats));
    s->small = calloc(2 * c->n_tensors + 2, sizeof(*s->small));
    if (!s->mats || !s->small)
        return fa_errorf(err, FA_ERR_NOMEM, "powersgd: out of memory");
    for (size_t i = 0; i < c->n_tensors; i++) {
        const fa_compress_tensor *t = &c->tensors[i];
        size_t numel = t->rows * t->cols;
        size_t r = c->cfg.powersgd_rank;
        if (r > t->rows)
            r = t->rows;
        if (r > t->cols)
            r = t->cols;
        add_small(s, pos, t->offset - pos); /* a gap before the tensor */
        pos = t->offset + numel;
        /* PyTorch's rule: compress a matrix only when it is big enough and
         * rank r shrinks it at least 2x (min_compression_rate 2). */
        if (numel < c->cfg.min_compress_numel || t->rows < 2 || t->cols < 2 ||
            numel / 2 < (t->rows + t->cols) * r || t->rows > INT_MAX || t->cols > INT_MAX) {
            add_small(s, t->offset, numel);
            continue;
        }
        s->mats[s->n_mats] = (psgd_mat){.offset = t->offset, .rows = t->rows, .cols = t->cols,
                                        .r = r, .q_off = s->q_numel};
        s->q_numel += t->cols * r;
        s->n_mats++;
    }
    add_small(s, pos, c->n - pos);
    s->p_numel = s->small_numel;
    for (size_t j = 0; j < s->n_mats; j++) {
        s->mats[j].p_off = s->p_numel;
        s->p_numel += s->mats[j].rows * s->mats[j].r;
    }
    s->pbuf = malloc((s->p_numel ? s->p_numel : 1) * sizeof(float));
    s->qbuf = malloc((s->q_numel ? s->q_numel : 1) * sizeof(float));
    s->qlocal = malloc((s->q_numel ? s->q_numel : 1) * sizeof(float));
    s->q = malloc((s->q_numel ? s->q_numel : 1) * sizeof(float));
    if (!s->pbuf || !s->qbuf || !s->qlocal || !s->q)
        return fa_errorf(err, FA_ERR_NOMEM, "powersgd: out of memory");
    fa_rng_seed(&s->qrng, c->cfg.seed, 0x50534744ULL); /* "PSGD" */
    return 0;
}

static void psgd_free(fa_compress *c)
{
    psgd *s = c->impl;
    free(s->mats);
    free(s->small);
    free(s->pbuf);
    free(s->qbuf);
    free(s->qlocal);
    free(s->q);
    free(s);
    c->impl = NULL;
}

static void psgd_reset(fa_compress *c)
{
    psgd *s = c->impl;
    s->have_q = 0;
}

static size_t psgd_payload(const fa_compress *c)
{
    const psgd *s = c->impl;
    return (s->p_numel + s->q_numel) * sizeof(float);
}

/* Q ~ N(0, 1), drawn from the shared stream: every rank draws the same. */
static void draw_q(psgd *s, float *q, size_t n)
{
    for (size_t i = 0; i < n; i++)
        q[i] = (float)fa_rng_normal(&s->qrng);
}

/* Warm start keeps last step's Q; a column that is all zero (a step whose
 * gradient was zero) would stay zero forever, so it is drawn afresh. */
static void refresh_dead_columns(psgd *s, const psgd_mat *m)
{
    float *q = s->q + m->q_off;
    for (size_t k = 0; k < m->r; k++) {
        double ss = 0;
        for (size_t i = 0; i < m->cols; i++)
            ss += (double)q[i * m->r + k] * q[i * m->r + k];
        if (ss == 0.0 || !isfinite(ss))
            for (size_t i = 0; i < m->cols; i++)
                q[i * m->r + k] = (float)fa_rng_normal(&s->qrng);
    }
}

/* Modified Gram-Schmidt on the r columns of P (rows, r), row-major, in
 * double precision.  Dependent columns become zero. */
static void orthonormalise(float *p, size_t rows, size_t r)
{
    for (size_t k = 0; k < r; k++) {
        double orig = 0, norm = 0;
        for (size_t i = 0; i < rows; i++)
            orig += (double)p[i * r + k] * p[i * r + k];
        for (size_t j = 0; j < k; j++) {
            double dot = 0;
            for (size_t i = 0; i < rows; i++)
                dot += (double)p[i * r + k] * p[i * r + j];
            for (size_t i = 0; i < rows; i++)
                p[i * r + k] = (float)(p[i * r + k] - dot * p[i * r + j]);
        }
        for (size_t i = 0; i < rows; i++)
            norm += (double)p[i * r + k] * p[i * r + k];
        norm = sqrt(norm);
        orig = sqrt(orig);
        if (!(norm > PSGD_DEPENDENT_REL * orig) || !isfinite(norm)) {
            for (size_t i = 0; i < rows; i++)
                p[i * r + k] = 0.0f;
        } else {
            for (size_t i = 0; i < rows; i++)
                p[i * r + k] = (float)(p[i * r + k] / norm);
        }
    }
}

static int psgd_run(fa_compress *c, fa_comm *comm, float *grad, fa_error *err)
{
    psgd *s = c->impl;
    int rc;

    /* Before the start step: plain all-reduce, error memory untouched. */
    if (c->step < c->cfg.powersgd_start_step || s->n_mats == 0)
        return fa_comm_allreduce_sum_f32(comm, grad, c->n, err);

    fa_compress_add_error(c, grad); /* grad now holds M_i */

    if (!s->have_q || !c->cfg.warm_start) {
        draw_q(s, s->q, s->q_numel);
        s->have_q = 1;
    } else {
        for (size_t j = 0; j < s->n_mats; j++)
            refresh_dead_columns(s, &s->mats[j]);
    }

    /* Message #1: the small tensors as they are, then P_i = M_i Q. */
    {
        size_t o = 0;
        for (size_t k = 0; k < s->n_small; k++) {
            memcpy(s->pbuf + o, grad + s->small[k].offset, s->small[k].len * sizeof(float));
            o += s->small[k].len;
        }
    }
    for (size_t j = 0; j < s->n_mats; j++) {
        const psgd_mat *m = &s->mats[j];
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m->rows, (int)m->r,
                    (int)m->cols, 1.0f, grad + m->offset, (int)m->cols, s->q + m->q_off, (int)m->r,
                    0.0f, s->pbuf + m->p_off, (int)m->r);
    }
    rc = fa_comm_allreduce_sum_f32(comm, s->pbuf, s->p_numel, err);
    if (rc != 0)
        return rc;

    /* The small tensors are final: exact sums, nothing dropped. */
    {
        size_t o = 0;
        for (size_t k = 0; k < s->n_small; k++) {
            memcpy(grad + s->small[k].offset, s->pbuf + o, s->small[k].len * sizeof(float));
            if (c->cfg.error_feedback)
                memset(c->err + s->small[k].offset, 0, s->small[k].len * sizeof(float));
            o += s->small[k].len;
        }
    }

    /* Message #2: Q_i = M_i^T P^. */
    for (size_t j = 0; j < s->n_mats; j++) {
        const psgd_mat *m = &s->mats[j];
        orthonormalise(s->pbuf + m->p_off, m->rows, m->r);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)m->cols, (int)m->r,
                    (int)m->rows, 1.0f, grad + m->offset, (int)m->cols, s->pbuf + m->p_off,
                    (int)m->r, 0.0f, s->qbuf + m->q_off, (int)m->r);
    }
    memcpy(s->qlocal, s->qbuf, s->q_numel * sizeof(float));
    rc = fa_comm_allreduce_sum_f32(comm, s->qbuf, s->q_numel, err);
    if (rc != 0)
        return rc;

    for (size_t j = 0; j < s->n_mats; j++) {
        const psgd_mat *m = &s->mats[j];
        float *mi = grad + m->offset;
        const float *p = s->pbuf + m->p_off;
        if (c->cfg.error_feedback) {
            /* E_i = M_i - P^ Q_i^T */
            float *e = c->err + m->offset;
            memcpy(e, mi, m->rows * m->cols * sizeof(float));
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m->rows, (int)m->cols,
                        (int)m->r, -1.0f, p, (int)m->r, s->qlocal + m->q_off, (int)m->r, 1.0f, e,
                        (int)m->cols);
        }
        /* out = P^ Q^T */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m->rows, (int)m->cols,
                    (int)m->r, 1.0f, p, (int)m->r, s->qbuf + m->q_off, (int)m->r, 0.0f, mi,
                    (int)m->cols);
    }
    /* Warm start: the next step's power iteration starts from this Q. */
    memcpy(s->q, s->qbuf, s->q_numel * sizeof(float));
    return 0;
}

/* Q only matters with warm start (otherwise every step draws a fresh one),
 * but its stream always does. */
static size_t psgd_state_parts(fa_compress *c, fa_compress_part *parts)
{
    psgd *s = c->impl;
    parts[0] = (fa_compress_part){"powersgd.have_q", &s->have_q, sizeof(s->have_q)};
    parts[1] = (fa_compress_part){"powersgd.qrng", s->qrng.s, sizeof(s->qrng.s)};
    parts[2] = (fa_compress_part){"powersgd.q", s->q, s->q_numel * sizeof(float)};
    return 3;
}

const fa_compress_ops fa_compress_powersgd_ops = {
    .init = psgd_init,
    .run = psgd_run,
    .reset = psgd_reset,
    .free = psgd_free,
    .payload = psgd_payload,
    .state_parts = psgd_state_parts,
};
