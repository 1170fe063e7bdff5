/* rotation.c - randomized Walsh-Hadamard rotation, conditional randomized
 * rounding and ring sizing (see rotation_internal.h for the mathematics). */
#include "privacy/rotation_internal.h"

#include <math.h>
#include <string.h>

#include <sodium.h>

#define WHT_BLOCK 2048           /* floats: 8 KiB, several blocks fit in L1 */
#define SIGN_CHUNK 4096          /* coordinates per keystream chunk (512 bytes) */
#define ROUND_LIMIT 2147483647.0 /* |x| below this: floor(x) + 1 fits an int32 */

size_t fa_rotation_padded_dim(size_t d)
{
    size_t n = 1;
    if (d == 0)
        return 0;
    while (n < d) {
        if (n > SIZE_MAX / 2)
            return 0;
        n <<= 1;
    }
    return n;
}

/* ---- the Walsh-Hadamard transform ------------------------------------------------ */

/* Stages h = 1 and 2 at once: each group of 4 is H_4 times it. */
static void wht_radix4_first(float *restrict x, size_t n)
{
    for (size_t i = 0; i + 4 <= n; i += 4) {
        float a = x[i], b = x[i + 1], c = x[i + 2], d = x[i + 3];
        float s0 = a + b, d0 = a - b, s1 = c + d, d1 = c - d;
        x[i] = s0 + s1;
        x[i + 1] = d0 + d1;
        x[i + 2] = s0 - s1;
        x[i + 3] = d0 - d1;
    }
}

/* One stage of stride h over x[0..n): contiguous inner loops (vectorised). */
static void wht_stage(float *restrict x, size_t n, size_t h)
{
    for (size_t i = 0; i < n; i += 2 * h) {
        float *restrict p = x + i, *restrict q = x + i + h;
        for (size_t j = 0; j < h; j++) {
            float a = p[j], b = q[j];
            p[j] = a + b;
            q[j] = a - b;
        }
    }
}

/* Stages h and 2h in one pass: four rows of stride h at a time. */
static void wht_stage2(float *restrict x, size_t n, size_t h)
{
    for (size_t i = 0; i < n; i += 4 * h) {
        float *restrict p0 = x + i, *restrict p1 = p0 + h, *restrict p2 = p1 + h,
                        *restrict p3 = p2 + h;
        for (size_t j = 0; j < h; j++) {
            float a = p0[j], b = p1[j], c = p2[j], d = p3[j];
            float s0 = a + b, d0 = a - b, s1 = c + d, d1 = c - d;
            p0[j] = s0 + s1;
            p1[j] = d0 + d1;
            p2[j] = s0 - s1;
            p3[j] = d0 - d1;
        }
    }
}

/* Stages h = from, 2 from, ... < n, two per pass where possible. */
static void wht_stages(float *x, size_t n, size_t from)
{
    size_t h = from;
    while (h < n) {
        if (4 * h <= n) {
            wht_stage2(x, n, h);
            h *= 4;
        } else {
            wht_stage(x, n, h);
            h *= 2;
        }
    }
}

int fa_rotation_wht(float *x, size_t n)
{
    if (n == 0 || (n & (n - 1)) != 0)
        return FA_ERR_INVAL;
    if (n == 1)
        return 0;
    size_t b = n < WHT_BLOCK ? n : WHT_BLOCK;
    /* Every stage with h < b acts inside aligned blocks of b: finish each
     * block while it is in L1. */
    for (size_t i = 0; i < n; i += b) {
        if (b >= 4) {
            wht_radix4_first(x + i, b);
            wht_stages(x + i, b, 4);
        } else {
            wht_stage(x + i, b, 1);
        }
    }
    wht_stages(x, n, b);
    /* normalise: n^-1/2 (a power of two when log2 n is even: exact) */
    float s = (float)(1.0 / sqrt((double)n));
    for (size_t i = 0; i < n; i++)
        x[i] *= s;
    return 0;
}

/* ---- random signs from the public seed ---------------------------------------------- */

int fa_rotation_signs(float *x, size_t n, const uint8_t seed[FA_ROTATION_SEED_BYTES],
                      uint64_t stream)
{
    uint8_t nonce[crypto_stream_chacha20_NONCEBYTES], zero[SIGN_CHUNK / 8], ks[SIGN_CHUNK / 8];
    if (sodium_init() < 0)
        return FA_ERR_CRYPTO;
    for (int i = 0; i < 8; i++)
        nonce[i] = (uint8_t)(stream >> (8 * i));
    memset(zero, 0, sizeof(zero));
    for (size_t c = 0; c < n; c += SIGN_CHUNK) {
        size_t m = n - c < SIGN_CHUNK ? n - c : SIGN_CHUNK;
        /* chunk c / SIGN_CHUNK is keystream blocks 8 (c / SIGN_CHUNK) .. + 7 */
        if (crypto_stream_chacha20_xor_ic(ks, zero, (m + 7) / 8, nonce,
                                          (uint64_t)(c / SIGN_CHUNK) * (SIGN_CHUNK / 8 / 64),
                                          seed) != 0)
            return FA_ERR_CRYPTO;
        for (size_t j = 0; j < m; j++) {
            uint32_t u, flip = (uint32_t)((ks[j / 8] >> (j % 8)) & 1u) << 31;
            memcpy(&u, &x[c + j], 4);
            u ^= flip; /* the sign bit: exact */
            memcpy(&x[c + j], &u, 4);
        }
    }
    return 0;
}

int fa_rotation_forward(float *x, size_t d, size_t n, const uint8_t seed[FA_ROTATION_SEED_BYTES],
                        uint64_t stream, fa_error *err)
{
    if (d == 0 || n != fa_rotation_padded_dim(d))
        return fa_errorf(err, FA_ERR_INVAL, "rotation: %zu coordinates pad to %zu, not %zu", d,
                         fa_rotation_padded_dim(d), n);
    memset(x + d, 0, (n - d) * sizeof(float));
    if (fa_rotation_signs(x, n, seed, stream) != 0)
        return fa_errorf(err, FA_ERR_CRYPTO, "rotation: the sign keystream failed");
    return fa_rotation_wht(x, n);
}

int fa_rotation_inverse(float *x, size_t n, const uint8_t seed[FA_ROTATION_SEED_BYTES],
                        uint64_t stream, fa_error *err)
{
    if (fa_rotation_wht(x, n) != 0)
        return fa_errorf(err, FA_ERR_INVAL, "rotation: %zu is not a power of two", n);
    if (fa_rotation_signs(x, n, seed, stream) != 0)
        return fa_errorf(err, FA_ERR_CRYPTO, "rotation: the sign keystream failed");
    return 0;
}

/* ---- conditional randomized rounding ----------------------------------------------------- */

double fa_rotation_rounded_bound(double c, size_t n, double beta)
{
    if (!(c >= 0) || !isfinite(c) || n == 0 || !(beta >= 0 && beta < 1))
        return -1;
    double sd = sqrt((double)n), b1 = c + sd;
    if (beta == 0)
        return b1;
    double b2 = sqrt(c * c + (double)n / 4 + sqrt(2 * log(1 / beta)) * (c + sd / 2));
    return b2 < b1 ? b2 : b1;
}

int fa_rotation_round(const float *x, size_t n, double bound, uint32_t max_tries,
                      const fa_privacy_rng *rng, int32_t *out, uint32_t *tries, fa_error *err)
{
    fa_random r;
    uint64_t limit;
    int rc;
    if (!(bound >= 0))
        return fa_errorf(err, FA_ERR_INVAL, "rounding: bound %g is negative or NaN", bound);
    for (size_t i = 0; i < n; i++)
        if (!(fabs((double)x[i]) < ROUND_LIMIT))
            return fa_errorf(err, FA_ERR_INVAL,
                             "rounding: x[%zu] = %g is not finite or too large for 32 bits", i,
                             (double)x[i]);
    /* sum out^2 <= bound^2 in integers; bound^2 rounded down (its relative
     * rounding error is below 2^-53, so this never admits a larger norm) */
    double bb = bound * bound * (1 - 1e-15);
    limit = bb >= 18446744073709551615.0 ? UINT64_MAX : (uint64_t)bb;
    if (max_tries == 0)
        max_tries = FA_ROTATION_MAX_TRIES;
    if ((rc = fa_random_init(&r, rng)) != 0)
        return fa_errorf(err, rc, "rounding: libsodium failed to initialise");
    for (uint32_t t = 1; t <= max_tries; t++) {
        uint64_t sum = 0;
        size_t i;
        for (i = 0; i < n; i++) {
            double v = (double)x[i], f = floor(v);
            unsigned up;
            if ((rc = fa_random_bernoulli(&r, v - f, &up)) != 0) { /* v - f exact */
                fa_random_wipe(&r);
                return fa_errorf(err, rc, "rounding: the random source failed");
            }
            int64_t q = (int64_t)f + up;
            uint64_t sq = (uint64_t)(q * q);
            out[i] = (int32_t)q;
            sum = sum > UINT64_MAX - sq ? UINT64_MAX : sum + sq;
            if (sum > limit)
                break; /* this draw fails already */
        }
        if (i == n) {
            if (tries)
                *tries = t;
            fa_random_wipe(&r);
            return 0;
        }
    }
    fa_random_wipe(&r);
    if (tries)
        *tries = max_tries;
    return fa_errorf(err, FA_ERR_RANGE,
                     "rounding: no draw of %u met the L2 bound %g; is the input clipped to the "
                     "norm the bound was computed for?",
                     max_tries, bound);
}

/* ---- the ring ---------------------------------------------------------------------------- */

int fa_rotation_to_ring(const int32_t *x, size_t n, uint32_t ring_bits, uint32_t *out)
{
    if (ring_bits < 1 || ring_bits > 32)
        return FA_ERR_INVAL;
    uint32_t mask = ring_bits == 32 ? UINT32_MAX : (UINT32_C(1) << ring_bits) - 1;
    for (size_t i = 0; i < n; i++)
        out[i] = (uint32_t)x[i] & mask;
    return 0;
}

int fa_rotation_from_ring(const uint32_t *v, size_t n, uint32_t ring_bits, int64_t *out)
{
    if (ring_bits < 1 || ring_bits > 32)
        return FA_ERR_INVAL;
    uint64_t mod = UINT64_C(1) << ring_bits, half = mod >> 1, mask = mod - 1;
    for (size_t i = 0; i < n; i++) {
        uint64_t u = v[i] & mask;
        out[i] = u >= half ? (int64_t)u - (int64_t)mod : (int64_t)u;
    }
    return 0;
}

uint32_t fa_rotation_ring_bits(uint32_t n_regions, uint32_t input_bits, double sigma2, uint64_t dim,
                               double beta_wrap)
{
    if (n_regions == 0 || input_bits < 1 || input_bits > 31 || !(sigma2 >= 0) ||
        !isfinite(sigma2) || dim == 0 || !(beta_wrap > 0 && beta_wrap < 1))
        return 0;
    double tail = sqrt(2.0 * n_regions * sigma2 * log(2.0 * (double)dim / beta_wrap));
    /* need n 2^(b-1) + T <= 2^(k-1) - 1, T rounded up to an integer */
    double need = (double)n_regions * ldexp(1.0, (int)input_bits - 1) + ceil(tail) + 1;
    for (uint32_t k = 1; k <= 32; k++)
        if (ldexp(1.0, (int)k - 1) >= need)
            return k;
    return 0;
}
