/* compress_topk.c - top-k sparsification with error feedback (Stich, Cordonnier
 * and Jaggi, "Sparsified SGD with Memory", NeurIPS 2018; Lin et al., "Deep
 * Gradient Compression", ICLR 2018).
 *
 * Each rank keeps the k largest-magnitude coordinates of m_i = g_i + e_i
 * over the whole block (ties broken by lower index), sends them as k
 * (uint32 index, float value) pairs through an all-gather, and every rank
 * adds all ranks' pairs, in rank order, into a zeroed block.  The rest stays
 * in e_i.  k = ceil(fraction n).
 */
#include "worker/compress_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct topk {
    size_t k;
    float *mag;    /* (n) magnitudes, scratch for the selection */
    uint8_t *send; /* k uint32 indices then k floats */
    uint8_t *recv; /* size x (8 k) */
    size_t recv_cap;
    size_t *lens;
    int lens_n;
    uint32_t *idx; /* (k) chosen indices, ascending */
} topk;

static int topk_init(fa_compress *c, fa_error *err)
{
    topk *t = calloc(1, sizeof(*t));
    double k;
    if (!t)
        return fa_errorf(err, FA_ERR_NOMEM, "topk: out of memory");
    c->impl = t;
    if (c->n >= UINT32_MAX)
        return fa_errorf(err, FA_ERR_RANGE,
                         "topk: a block of %zu floats does not fit 32-bit indices", c->n);
    k = ceil(c->cfg.topk_fraction * (double)c->n);
    t->k = k < 1 ? 1 : k > (double)c->n ? c->n : (size_t)k;
    t->mag = malloc(c->n * sizeof(float));
    t->send = malloc(t->k * 8);
    t->idx = malloc(t->k * sizeof(uint32_t));
    if (!t->mag || !t->send || !t->idx)
        return fa_errorf(err, FA_ERR_NOMEM, "topk: out of memory");
    return 0;
}

static void topk_free(fa_compress *c)
{
    topk *t = c->impl;
    free(t->mag);
    free(t->send);
    free(t->recv);
    free(t->lens);
    free(t->idx);
    free(t);
    c->impl = NULL;
}

static size_t topk_payload(const fa_compress *c) { return ((const topk *)c->impl)->k * 8; }

/* The k-th largest of a[0..n) (1 <= k <= n), by quickselect; reorders a. */
static float kth_largest(float *a, size_t n, size_t k)
{
    size_t lo = 0, hi = n - 1, want = k - 1;
    while (lo < hi) {
        /* median of three as pivot */
        size_t mid = lo + (hi - lo) / 2;
        float x = a[lo], y = a[mid], z = a[hi], pivot;
        pivot = x > y ? (y > z ? y : (x > z ? z : x)) : (x > z ? x : (y > z ? z : y));
        size_t i = lo, j = hi;
        for (;;) {
            while (a[i] > pivot)
                i++;
            while (a[j] < pivot)
                j--;
            if (i >= j)
                break;
            float tmp = a[i];
            a[i] = a[j];
            a[j] = tmp;
            i++;
            j--;
        }
        /* a[lo..j] >= pivot >= a[j+1..hi] (descending order) */
        if (want <= j)
            hi = j;
        else
            lo = j + 1;
    }
    return a[want];
}

static int topk_run(fa_compress *c, fa_comm *comm, float *grad, fa_error *err)
{
    topk *t = c->impl;
    size_t n = c->n, k = t->k, got = 0, above = 0;
    int p = fa_comm_size(comm), rc;
    float thr;

    fa_compress_add_error(c, grad); /* grad now holds m_i */

    for (size_t i = 0; i < n; i++) {
        float a = fabsf(grad[i]);
        t->mag[i] = isnan(a) ? INFINITY : a; /* a NaN is sent, so the sum shows it */
    }
    thr = kth_largest(t->mag, n, k);
    for (size_t i = 0; i < n; i++) {
        float a = fabsf(grad[i]);
        if (isnan(a) || a > thr)
            above++;
    }
    /* All coordinates above the threshold, then ties in index order. */
    {
        size_t ties_left = k - (above < k ? above : k);
        for (size_t i = 0; i < n && got < k; i++) {
            float a = fabsf(grad[i]);
            if (isnan(a) || a > thr)
                t->idx[got++] = (uint32_t)i;
            else if (a == thr && ties_left > 0) {
                t->idx[got++] = (uint32_t)i;
                ties_left--;
            }
        }
    }
    /* got == k (at least k magnitudes are >= thr); the pairs below are
     * laid out for got in any case. */
    for (size_t j = 0; j < got; j++) {
        float v = grad[t->idx[j]];
        memcpy(t->send + 4 * j, &t->idx[j], 4);
        memcpy(t->send + 4 * got + 4 * j, &v, 4);
    }

    if (t->recv_cap < (size_t)p * k * 8 || t->lens_n < p) {
        free(t->recv);
        free(t->lens);
        t->recv_cap = (size_t)p * k * 8;
        t->recv = malloc(t->recv_cap);
        t->lens = calloc((size_t)p, sizeof(size_t));
        t->lens_n = p;
        if (!t->recv || !t->lens) {
            t->recv_cap = 0;
            t->lens_n = 0;
            return fa_errorf(err, FA_ERR_NOMEM, "topk: out of memory");
        }
    }
    rc = fa_comm_allgatherv(comm, t->send, got * 8, t->recv, t->recv_cap, t->lens, err);
    if (rc != 0)
        return rc;

    /* Error feedback: everything but what was sent stays. */
    if (c->cfg.error_feedback) {
        memcpy(c->err, grad, n * sizeof(float));
        for (size_t j = 0; j < got; j++)
            c->err[t->idx[j]] = 0.0f;
    }
    memset(grad, 0, n * sizeof(float));
    {
        size_t off = 0;
        for (int r = 0; r < p; r++) {
            size_t len = t->lens[r], kr = len / 8;
            const uint8_t *b = t->recv + off;
            if (len % 8 != 0)
                return fa_errorf(err, FA_ERR_PROTOCOL, "topk: rank %d sent %zu bytes, not pairs",
                                 r, len);
            for (size_t j = 0; j < kr; j++) {
                uint32_t ix;
                float v;
                memcpy(&ix, b + 4 * j, 4);
                memcpy(&v, b + 4 * kr + 4 * j, 4);
                if (ix >= n)
                    return fa_errorf(err, FA_ERR_PROTOCOL,
                                     "topk: rank %d sent index %u outside the block of %zu", r, ix, n);
                grad[ix] += v;
            }
            off += len;
        }
    }
    return 0;
}

const fa_compress_ops fa_compress_topk_ops = {
    .init = topk_init,
    .run = topk_run,
    .reset = NULL,
    .free = topk_free,
    .payload = topk_payload,
};
