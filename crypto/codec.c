/* codec.c - the fixed-point codec into the ring: clip, scale, stochastic
 * rounding.  See codec_internal.h. */
#include "crypto/codec_internal.h"

#include <math.h>

int32_t fa_codec_round(double scaled, uint32_t rnd, int32_t qmax)
{
    /* floor by truncation of a positive number: offset by qmax + 1 */
    const double off = (double)qmax + 1.0;
    double t = scaled + (double)(int32_t)(rnd >> 1) * 0x1p-31 + off;
    int32_t q;
    if (t < 0)
        t = 0;
    if (t > 2.0 * off)
        t = 2.0 * off;
    q = (int32_t)t - (int32_t)off;
    return q < -qmax ? -qmax : (q > qmax ? qmax : q);
}

static inline __attribute__((always_inline)) uint32_t
encode_one(float x, uint32_t rnd, double pre, double lim, double mul, double off, int32_t qmax)
{
    double v = (double)x * pre;
    v = v < -lim ? -lim : v;
    v = v > lim ? lim : v;
    /* v * mul is in [-qmax, qmax] up to rounding, u in [0, 1); adding
     * qmax + 1 makes the sum positive so truncation is floor. */
    double t = v * mul + (double)(int32_t)(rnd >> 1) * 0x1p-31 + off;
    int32_t q = (int32_t)t - (int32_t)off;
    q = q < -qmax ? -qmax : q;
    q = q > qmax ? qmax : q;
    return (uint32_t)q;
}

FA_CLONES
void fa_codec_encode(const fa_codec *c, const float *restrict x, size_t n,
                     const uint32_t *restrict rnd, uint32_t *restrict out)
{
    const double pre = c->pre, lim = c->limit, mul = c->mul;
    const double off = (double)c->qmax + 1.0;
    const int32_t qmax = c->qmax;
    size_t i = 0;
    for (; i + FA_CHUNK <= n; i += FA_CHUNK)
        for (size_t j = 0; j < FA_CHUNK; j++)
            out[i + j] = encode_one(x[i + j], rnd[i + j], pre, lim, mul, off, qmax);
    for (; i < n; i++)
        out[i] = encode_one(x[i], rnd[i], pre, lim, mul, off, qmax);
}

FA_CLONES
void fa_codec_l2_add(fa_codec_l2 *a, const float *x, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (size_t j = 0; j < 16; j++)
            a->lane[j] += (double)x[i + j] * x[i + j];
    for (; i < n; i++)
        a->tail += (double)x[i] * x[i];
}

double fa_codec_l2_done(const fa_codec_l2 *a)
{
    double s = a->tail;
    for (size_t j = 0; j < 16; j++)
        s += a->lane[j];
    return sqrt(s);
}

double fa_codec_l2_norm(const float *x, size_t n)
{
    fa_codec_l2 a = {{0}, 0};
    fa_codec_l2_add(&a, x, n);
    return fa_codec_l2_done(&a);
}
