/* codec_internal.h - the fixed-point codec from floats into the ring
 * Z_{2^k} (ring_internal.h), internal to crypto/.
 *
 * A value v in [-c, c] becomes q = floor(v * s + u) with s =
 * (2^(b-1) - 1) / c and u uniform in [0, 1) from a seeded generator, so
 * E[q] = v * s (unbiased) and |q| <= 2^(b-1) - 1.  Stored as the k-bit two's
 * complement of q, the sum of n such values needs b + ceil(log2 n) bits.
 */
#ifndef FA_CRYPTO_CODEC_INTERNAL_H
#define FA_CRYPTO_CODEC_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "crypto/ring_internal.h"

/* Quantiser of one input vector: t = clamp(x * pre, -limit, limit) * mul,
 * q = floor(t + u).  pre is the L2 clip factor (1 without L2 clipping), limit
 * the quantiser's range clip_value, mul = weight * qmax / limit. */
typedef struct fa_codec {
    double pre;
    double limit;
    double mul;
    int32_t qmax; /* 2^(b-1) - 1 */
} fa_codec;

/* out[i] = ring(q(x[i])), with rnd[i] the uniform 32-bit draws. */
void fa_codec_encode(const fa_codec *c, const float *restrict x, size_t n,
                     const uint32_t *restrict rnd, uint32_t *restrict out);

/* floor(scaled + u) clamped to [-qmax, qmax], for one value already in
 * quantiser units (the weight coordinate). */
int32_t fa_codec_round(double scaled, uint32_t rnd, int32_t qmax);

/* sqrt(sum x[i]^2) in double. */
double fa_codec_l2_norm(const float *x, size_t n);

/* The same in pieces, for a caller that makes another pass over each
 * piece while it is in cache: fa_codec_l2 a = {{0}, 0}, then
 * fa_codec_l2_add for consecutive pieces, every one but the last a
 * multiple of 16 long; fa_codec_l2_done(&a) is then fa_codec_l2_norm of
 * the whole, bit for bit (the same lanes, the same order of additions). */
typedef struct fa_codec_l2 {
    double lane[16];
    double tail;
} fa_codec_l2;
void fa_codec_l2_add(fa_codec_l2 *a, const float *x, size_t n);
double fa_codec_l2_done(const fa_codec_l2 *a);

#endif
