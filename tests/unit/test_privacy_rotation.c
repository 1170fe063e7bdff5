/* Randomized rotation, conditional randomized rounding and ring sizing
 * (privacy/rotation_internal.h): known Walsh-Hadamard outputs and the O(n^2)
 * definition, orthonormality and the exact inverse, the signs' determinism,
 * the rounding bound (never exceeded, retries as rare as beta says, bias
 * within its bound), the subgaussian tail the ring sizing rests on, and a
 * whole distributed discrete Gaussian round through the ring. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "privacy/accountant.h"
#include "privacy/dgauss_internal.h"
#include "privacy/rotation_internal.h"

typedef struct seeded {
    uint8_t key[32];
    uint64_t calls;
} seeded;

static int seeded_fill(void *ctx, void *buf, size_t len)
{
    seeded *s = ctx;
    uint8_t nonce[8];
    for (int i = 0; i < 8; i++)
        nonce[i] = (uint8_t)(s->calls >> (8 * i));
    s->calls++;
    crypto_stream_chacha20(buf, len, nonce, s->key);
    return 0;
}

static fa_privacy_rng seeded_rng(seeded *s, uint64_t seed)
{
    memset(s, 0, sizeof(*s));
    for (int i = 0; i < 8; i++)
        s->key[i] = (uint8_t)(seed >> (8 * i));
    s->key[31] = 0x7e;
    fa_privacy_rng r = {seeded_fill, s};
    return r;
}

/* floats uniform in [-1, 1) from a seeded source */
static void uniform(float *x, size_t n, uint64_t seed)
{
    seeded s;
    fa_privacy_rng rng = seeded_rng(&s, seed);
    fa_random r;
    assert_int_equal(fa_random_init(&r, &rng), 0);
    for (size_t i = 0; i < n; i++) {
        uint64_t u;
        assert_int_equal(fa_random_u64(&r, &u), 0);
        x[i] = (float)((double)(u >> 11) / 4503599627370496.0 - 1.0);
    }
}

static double norm2(const float *x, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (double)x[i] * (double)x[i];
    return sqrt(s);
}

static const uint8_t SEED[32] = {1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 16,
                                 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32};

/* ---- the transform ------------------------------------------------------------------ */

static void test_padded_dim(void **state)
{
    assert_int_equal(fa_rotation_padded_dim(0), 0);
    assert_int_equal(fa_rotation_padded_dim(1), 1);
    assert_int_equal(fa_rotation_padded_dim(2), 2);
    assert_int_equal(fa_rotation_padded_dim(3), 4);
    assert_int_equal(fa_rotation_padded_dim(1000), 1024);
    assert_int_equal(fa_rotation_padded_dim(1024), 1024);
    assert_int_equal(fa_rotation_padded_dim(1025), 2048);
    assert_int_equal(fa_rotation_padded_dim(SIZE_MAX), 0);
}

/* Small transforms by hand: H_2 (1, 0) = (1, 1)/sqrt 2; H_4 (1, 2, 3, 4) =
 * (10, -2, -4, 0)/2 with the Sylvester rows (++++), (+-+-), (++--), (+--+). */
static void test_wht_known(void **state)
{
    float a[2] = {1, 0}, b[4] = {1, 2, 3, 4}, c[8] = {1, 0, 0, 0, 0, 0, 0, 0}, one[1] = {3};
    assert_int_equal(fa_rotation_wht(a, 2), 0);
    assert_true(fabsf(a[0] - 0.70710678f) < 1e-7f && fabsf(a[1] - 0.70710678f) < 1e-7f);
    assert_int_equal(fa_rotation_wht(b, 4), 0);
    assert_true(b[0] == 5 && b[1] == -1 && b[2] == -2 && b[3] == 0); /* exact: n = 4^1 */
    assert_int_equal(fa_rotation_wht(c, 8), 0);
    for (int i = 0; i < 8; i++)
        assert_true(fabsf(c[i] - 0.35355339f) < 1e-7f);
    assert_int_equal(fa_rotation_wht(one, 1), 0);
    assert_true(one[0] == 3);
    assert_int_equal(fa_rotation_wht(b, 3), FA_ERR_INVAL);
    assert_int_equal(fa_rotation_wht(b, 0), FA_ERR_INVAL);
}

/* Against the definition H_ij = (-1)^popcount(i & j) / sqrt(n), at sizes
 * below, at and above the 2048-float block, with an odd number of stages
 * left for the passes over memory (2^13: one radix-4 pass; 2^14: radix-4 and
 * radix-2). */
static void test_wht_definition(void **state)
{
    static const size_t sizes[] = {16, 32, 2048, 4096, 8192, 16384};
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        size_t n = sizes[s];
        float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
        assert_non_null(x);
        assert_non_null(y);
        uniform(x, n, 100 + s);
        memcpy(y, x, n * sizeof(float));
        assert_int_equal(fa_rotation_wht(y, n), 0);
        /* a sample of rows (all rows for small n) */
        size_t step = n <= 32 ? 1 : n / 61 + 1;
        for (size_t i = 0; i < n; i += step) {
            double acc = 0;
            for (size_t j = 0; j < n; j++)
                acc += (__builtin_popcountll(i & j) & 1) ? -(double)x[j] : (double)x[j];
            acc /= sqrt((double)n);
            if (!(fabs(acc - y[i]) < 1e-5))
                fail_msg("n = %zu, row %zu: %.9g, definition %.9g", n, i, (double)y[i], acc);
        }
        free(x);
        free(y);
    }
}

/* H D is orthonormal: norms are kept and D H undoes it, to float rounding. */
static void test_rotation_orthonormal(void **state)
{
    static const size_t dims[] = {1, 3, 1000, 5000, 70000};
    for (size_t s = 0; s < sizeof(dims) / sizeof(dims[0]); s++) {
        size_t d = dims[s], n = fa_rotation_padded_dim(d);
        float *x = malloc(n * sizeof(float)), *x0 = malloc(d * sizeof(float));
        assert_non_null(x);
        assert_non_null(x0);
        uniform(x, d, 200 + s);
        memcpy(x0, x, d * sizeof(float));
        double nx = norm2(x0, d);
        for (size_t i = d; i < n; i++)
            x[i] = 123.0f; /* garbage in the padding is cleared */
        assert_int_equal(fa_rotation_forward(x, d, n, SEED, 7, NULL), 0);
        assert_true(fabs(norm2(x, n) - nx) <= 1e-6 * nx);
        if (n >= 1024) { /* the energy is spread out: no coordinate holds much */
            double mx = 0;
            for (size_t i = 0; i < n; i++)
                mx = fmax(mx, fabs(x[i]));
            assert_true(mx < 6 * nx / sqrt((double)n));
        }
        assert_int_equal(fa_rotation_inverse(x, n, SEED, 7, NULL), 0);
        for (size_t i = 0; i < d; i++)
            assert_true(fabsf(x[i] - x0[i]) < 1e-6f);
        for (size_t i = d; i < n; i++)
            assert_true(fabsf(x[i]) < 1e-6f);
        free(x);
        free(x0);
    }
    float y[4];
    fa_error err;
    assert_int_equal(fa_rotation_forward(y, 3, 8, SEED, 0, &err), FA_ERR_INVAL);
    assert_int_equal(fa_rotation_inverse(y, 3, SEED, 0, &err), FA_ERR_INVAL);
}

/* The signs: a deterministic function of (seed, stream, index) — chunking
 * does not matter — and about half of them negative. */
static void test_signs(void **state)
{
    enum { N = 10000 };
    static float a[N], b[N], c[N];
    for (int i = 0; i < N; i++)
        a[i] = b[i] = c[i] = 1.0f;
    assert_int_equal(fa_rotation_signs(a, N, SEED, 3), 0);
    assert_int_equal(fa_rotation_signs(b, 5000, SEED, 3), 0); /* a prefix: the same signs */
    for (int i = 0; i < 5000; i++)
        assert_true(a[i] == b[i]);
    int neg = 0, diff = 0;
    assert_int_equal(fa_rotation_signs(c, N, SEED, 4), 0);
    for (int i = 0; i < N; i++) {
        assert_true(a[i] == 1.0f || a[i] == -1.0f);
        neg += a[i] < 0;
        diff += a[i] != c[i];
    }
    assert_true(neg > N / 2 - 250 && neg < N / 2 + 250);   /* 5 sd */
    assert_true(diff > N / 2 - 250 && diff < N / 2 + 250); /* another stream: independent */
    /* the keystream: bit 0 of ChaCha20(seed, nonce 3) block 0 byte 0 */
    uint8_t ks[1], nonce[8] = {3, 0, 0, 0, 0, 0, 0, 0};
    crypto_stream_chacha20(ks, 1, nonce, SEED);
    assert_true((a[0] < 0) == (ks[0] & 1));
    /* coordinate 4096 starts the second chunk: keystream byte 512 */
    uint8_t ks2[513];
    crypto_stream_chacha20(ks2, 513, nonce, SEED);
    assert_true((a[4096] < 0) == (ks2[512] & 1));
    assert_true((a[4097] < 0) == ((ks2[512] >> 1) & 1));
}

/* ---- conditional randomized rounding ------------------------------------------------- */

static void test_rounded_bound(void **state)
{
    /* by hand: c = 10, n = 64, beta = e^-2: sqrt(100 + 16 + 2 (10 + 4)) = sqrt(144) */
    assert_true(fabs(fa_rotation_rounded_bound(10, 64, exp(-2)) - 12.0) < 1e-12);
    assert_true(fa_rotation_rounded_bound(10, 64, 0) == 18.0);
    /* tiny beta: the deterministic c + sqrt(n) is the smaller */
    assert_true(fa_rotation_rounded_bound(0.5, 4, 1e-300) == 2.5);
    assert_true(fa_rotation_rounded_bound(-1, 4, 0.1) < 0);
    assert_true(fa_rotation_rounded_bound(1, 0, 0.1) < 0);
    assert_true(fa_rotation_rounded_bound(1, 4, 1.0) < 0);
}

/* Inputs at the clipping norm with every fractional part 1/2 (the largest
 * rounding variance): every output meets the bound, the first draw fails no
 * more often than beta says, the mean is within the conditional bias bound,
 * and outputs are integers next to the inputs. */
static void test_round_bound_and_bias(void **state)
{
    enum { N = 256, TRIALS = 4000 };
    static const double beta = 0.3;
    float x[N];
    int32_t q[N];
    double mean[N] = {0};
    seeded s;
    fa_privacy_rng rng = seeded_rng(&s, 9);
    /* x = (k + 1/2) with ||x|| = c: take c = 40 spread over the coordinates */
    for (int i = 0; i < N; i++)
        x[i] = (float)((i % 2 ? 1 : -1) * 2.5);
    double c = norm2(x, N), bound = fa_rotation_rounded_bound(c, N, beta);
    assert_true(bound > c && bound < c + sqrt(N));
    uint64_t total_tries = 0, first_fail = 0;
    for (int t = 0; t < TRIALS; t++) {
        uint32_t tries;
        assert_int_equal(fa_rotation_round(x, N, bound, 0, &rng, q, &tries, NULL), 0);
        double ss = 0;
        for (int i = 0; i < N; i++) {
            assert_true(q[i] == (int32_t)floorf(x[i]) || q[i] == (int32_t)floorf(x[i]) + 1);
            ss += (double)q[i] * q[i];
            mean[i] += q[i];
        }
        assert_true(sqrt(ss) <= bound);
        total_tries += tries;
        first_fail += tries > 1;
    }
    /* P(first draw fails) <= beta, with 5 standard errors */
    double pf = (double)first_fail / TRIALS;
    assert_true(pf <= beta + 5 * sqrt(beta * (1 - beta) / TRIALS));
    assert_true((double)total_tries / TRIALS <= 1 / (1 - beta) + 0.1);
    /* the bias: ||E[q] - x|| <= beta sqrt(n) / (1 - beta), plus the standard
     * error of the mean of TRIALS draws (each coordinate variance 1/4) */
    double bias2 = 0;
    for (int i = 0; i < N; i++) {
        double m = mean[i] / TRIALS - x[i];
        bias2 += m * m;
        assert_true(fabs(m) <= beta / (1 - beta) + 5 * 0.5 / sqrt(TRIALS));
    }
    assert_true(sqrt(bias2) <= beta * sqrt(N) / (1 - beta) + 5 * sqrt(N * 0.25 / TRIALS));
}

/* Unconditional (beta = 0) rounding is unbiased, and the rounding of
 * integers and of negative values is right. */
static void test_round_unbiased(void **state)
{
    enum { N = 8, TRIALS = 40000 };
    float x[N] = {0.25f, -0.25f, 3.0f, -3.0f, 0.9f, -7.1f, 100.5f, 0.0f};
    int32_t q[N];
    double mean[N] = {0};
    seeded s;
    fa_privacy_rng rng = seeded_rng(&s, 10);
    double bound = fa_rotation_rounded_bound(norm2(x, N), N, 0);
    for (int t = 0; t < TRIALS; t++) {
        uint32_t tries;
        assert_int_equal(fa_rotation_round(x, N, bound, 1, &rng, q, &tries, NULL), 0);
        assert_int_equal(tries, 1);
        assert_int_equal(q[2], 3);
        assert_int_equal(q[3], -3);
        assert_int_equal(q[7], 0);
        for (int i = 0; i < N; i++)
            mean[i] += q[i];
    }
    for (int i = 0; i < N; i++) {
        double f = x[i] - floor(x[i]);
        assert_true(fabs(mean[i] / TRIALS - x[i]) <= 5 * sqrt(f * (1 - f) / TRIALS) + 1e-12);
    }
}

static void test_round_refusals(void **state)
{
    float x[3] = {1.5f, 2.5f, 3.5f};
    int32_t q[3];
    uint32_t tries;
    fa_error err;
    /* a bound the input cannot meet: refused after max_tries, named */
    assert_int_equal(fa_rotation_round(x, 3, 1.0, 20, NULL, q, &tries, &err), FA_ERR_RANGE);
    assert_int_equal(tries, 20);
    assert_non_null(strstr(err.msg, "L2 bound"));
    x[1] = INFINITY;
    assert_int_equal(fa_rotation_round(x, 3, 100, 0, NULL, q, NULL, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "x[1]"));
    x[1] = 3e9f;
    assert_int_equal(fa_rotation_round(x, 3, 1e10, 0, NULL, q, NULL, &err), FA_ERR_INVAL);
    x[1] = 0;
    assert_int_equal(fa_rotation_round(x, 3, NAN, 0, NULL, q, NULL, &err), FA_ERR_INVAL);
    assert_int_equal(fa_rotation_round(x, 3, 100, 0, NULL, q, NULL, NULL), 0); /* libsodium */
}

/* ---- the ring ---------------------------------------------------------------------------- */

static void test_ring_codec(void **state)
{
    int32_t x[6] = {0, 1, -1, 32767, -32768, 12345};
    uint32_t v[6];
    int64_t back[6];
    assert_int_equal(fa_rotation_to_ring(x, 6, 16, v), 0);
    assert_int_equal(v[2], 0xffff);
    assert_int_equal(v[4], 0x8000);
    assert_int_equal(fa_rotation_from_ring(v, 6, 16, back), 0);
    for (int i = 0; i < 6; i++)
        assert_int_equal(back[i], x[i]);
    assert_int_equal(fa_rotation_to_ring(x, 6, 32, v), 0);
    assert_int_equal(v[2], 0xffffffffu);
    assert_int_equal(fa_rotation_from_ring(v, 6, 32, back), 0);
    assert_int_equal(back[2], -1);
    assert_int_equal(fa_rotation_to_ring(x, 6, 0, v), FA_ERR_INVAL);
    assert_int_equal(fa_rotation_from_ring(v, 6, 33, back), FA_ERR_INVAL);
}

/* The tail bound the sizing uses: N_Z(0, s2) is s2-subgaussian,
 * E[exp(l X)] <= exp(l^2 s2 / 2), checked on the exact pmf. */
static void test_subgaussian(void **state)
{
    static const double s2s[] = {0.25, 1, 4, 30};
    static const double ls[] = {0.05, 0.3, 1, 2, 4};
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 5; b++) {
            double s2 = s2s[a], l = ls[b], z = 0, m = 0;
            for (long x = -2000; x <= 2000; x++) {
                z += exp(-(double)x * x / (2 * s2));
                m += exp(-(double)x * x / (2 * s2) + l * (double)x);
            }
            assert_true(m / z <= exp(l * l * s2 / 2) * (1 + 1e-12));
        }
}

static void test_ring_bits(void **state)
{
    /* by hand: n = 10, b = 16, sigma2 = 100, d = 2^20, beta 1e-9:
     * T = sqrt(2 * 10 * 100 * log(2^21 / 1e-9)) = sqrt(2000 * 35.2797) = 265.6;
     * 10 * 2^15 + 266 + 1 = 327947 <= 2^(k-1) first at k = 20 */
    assert_int_equal(fa_rotation_ring_bits(10, 16, 100, UINT64_C(1) << 20, 1e-9), 20);
    /* no noise: n 2^(b-1) + 1 <= 2^(k-1): n = 1, b = 8 -> 129 -> k = 9 */
    assert_int_equal(fa_rotation_ring_bits(1, 8, 0, 1, 0.5), 9);
    assert_int_equal(fa_rotation_ring_bits(2, 31, 0, 1, 0.5), 0); /* beyond 32 bits */
    assert_int_equal(fa_rotation_ring_bits(0, 8, 1, 1, 0.5), 0);
    assert_int_equal(fa_rotation_ring_bits(1, 8, 1, 1, 0), 0);
    assert_int_equal(fa_rotation_ring_bits(1, 8, 1, 0, 0.5), 0);

    /* The bound holds in a simulation: n regions at the extreme input plus
     * their noise, d coordinates, beta_wrap = 1e-6: no coordinate leaves the
     * centred range of k bits.  With one bit fewer the noise alone would not
     * fit, so k is not loose by more than a bit. */
    enum { REGIONS = 4, D = 20000 };
    const uint32_t b = 6;
    const double s2 = 400;
    uint32_t k = fa_rotation_ring_bits(REGIONS, b, s2, D, 1e-6);
    assert_true(k > 0);
    double tail = sqrt(2.0 * REGIONS * s2 * log(2.0 * D / 1e-6));
    assert_true(ldexp(1, (int)k - 2) < REGIONS * ldexp(1, (int)b - 1) + tail + 1);
    seeded s[REGIONS];
    fa_dgauss *g[REGIONS];
    for (int r = 0; r < REGIONS; r++) {
        fa_privacy_rng rng = seeded_rng(&s[r], 40 + (uint64_t)r);
        assert_int_equal(fa_dgauss_new(&g[r], 400, 1, &rng, NULL), 0);
    }
    static uint32_t sum[D];
    uint32_t v[D];
    int32_t top[D];
    int64_t dec[D];
    memset(sum, 0, sizeof(sum));
    for (int r = 0; r < REGIONS; r++) {
        for (int i = 0; i < D; i++)
            top[i] = (i % 2) ? (int32_t)1 << (b - 1) : -((int32_t)1 << (b - 1));
        assert_int_equal(fa_rotation_to_ring(top, D, k, v), 0);
        assert_int_equal(fa_dgauss_add_ring(g[r], v, D, k, NULL), 0);
        for (int i = 0; i < D; i++)
            sum[i] = (sum[i] + v[i]) & ((UINT32_C(1) << k) - 1);
    }
    assert_int_equal(fa_rotation_from_ring(sum, D, k, dec), 0);
    double ss = 0;
    for (int i = 0; i < D; i++) {
        int64_t signal = (i % 2 ? 1 : -1) * ((int64_t)REGIONS << (b - 1));
        int64_t noise = dec[i] - signal;
        assert_true(llabs(noise) < (int64_t)ceil(tail)); /* decoded exactly: no wrap */
        ss += (double)noise * (double)noise;
    }
    /* and the noise is what four shares of variance 400 sum to */
    assert_true(fabs(ss / D - REGIONS * s2) < 5 * REGIONS * s2 * sqrt(2.0 / D));
    for (int r = 0; r < REGIONS; r++)
        fa_dgauss_del(g[r]);
}

/* A whole round of the distributed discrete Gaussian, as regions and the
 * aggregator run it (secure aggregation replaced by the plain sum mod 2^k):
 * clip, rotate with the public seed, scale by 1/gamma, round conditionally,
 * add each region's N_Z(0, sigma2) share, sum in the ring, decode, unscale,
 * unrotate.  The result is the mean update to within the noise, and the
 * accountant charges the rounding bound. */
static void test_ddg_round(void **state)
{
    enum { REGIONS = 5, D = 3000 };
    const double clip = 1.0, gamma = 1.0 / 256, beta = exp(-0.5), sigma2 = 16.0;
    size_t n = fa_rotation_padded_dim(D);
    float *x = malloc(n * sizeof(float)), truth[D] = {0};
    int32_t *q = malloc(n * sizeof(int32_t));
    uint32_t *v = malloc(n * sizeof(uint32_t)), *sum = calloc(n, sizeof(uint32_t));
    int64_t *dec = malloc(n * sizeof(int64_t));
    assert_true(x && q && v && sum && dec);
    double bound = fa_rotation_rounded_bound(clip / gamma, n, beta);
    /* each coordinate of a rotated input is at most the bound in magnitude */
    uint32_t bits = (uint32_t)ceil(log2(floor(bound) + 1)) + 1;
    uint32_t k = fa_rotation_ring_bits(REGIONS, bits, sigma2, n, 1e-9);
    assert_true(k > 0 && k <= 32);
    for (int r = 0; r < REGIONS; r++) {
        uniform(x, D, 300 + (uint64_t)r);
        double nx = norm2(x, D);
        for (int i = 0; i < D; i++) {
            x[i] = (float)(x[i] * clip / nx); /* clipped to norm 1 */
            truth[i] += x[i];
        }
        assert_int_equal(fa_rotation_forward(x, D, n, SEED, 11, NULL), 0);
        for (size_t i = 0; i < n; i++)
            x[i] = (float)(x[i] / gamma);
        seeded s;
        fa_privacy_rng rng = seeded_rng(&s, 600 + (uint64_t)r);
        assert_int_equal(fa_rotation_round(x, n, bound, 0, &rng, q, NULL, NULL), 0);
        assert_int_equal(fa_rotation_to_ring(q, n, k, v), 0);
        fa_dgauss *g;
        assert_int_equal(fa_dgauss_new_f64(&g, sigma2, &rng, NULL), 0);
        assert_int_equal(fa_dgauss_add_ring(g, v, n, k, NULL), 0);
        fa_dgauss_del(g);
        for (size_t i = 0; i < n; i++)
            sum[i] = (sum[i] + v[i]) & (k == 32 ? UINT32_MAX : (UINT32_C(1) << k) - 1);
    }
    assert_int_equal(fa_rotation_from_ring(sum, n, k, dec), 0);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)((double)dec[i] * gamma);
    assert_int_equal(fa_rotation_inverse(x, n, SEED, 11, NULL), 0);
    /* error per coordinate: the noise (variance REGIONS sigma2 gamma^2, kept
     * by the orthonormal rotation) plus the rounding (< 1/4 gamma^2 each) */
    double err2 = 0, per = REGIONS * (sigma2 + 0.25) * gamma * gamma;
    for (int i = 0; i < D; i++)
        err2 += (x[i] - truth[i]) * (x[i] - truth[i]);
    assert_true(err2 / D < 1.2 * per);
    assert_true(err2 / D > 0.5 * REGIONS * sigma2 * gamma * gamma);
    /* the privacy of that round */
    fa_rdp_ddg_params p = {
        .l2_sens = bound, .l1_sens = 0, .sigma2 = sigma2, .n_regions = REGIONS, .dim = n};
    fa_rdp_accountant *acc;
    double eps;
    assert_int_equal(fa_rdp_accountant_new(&acc, NULL, 0, NULL), 0);
    assert_int_equal(fa_rdp_accountant_compose_ddg(acc, &p, 1, NULL), 0);
    assert_int_equal(
        fa_rdp_accountant_epsilon(acc, 1e-5, FA_RDP_CONVERSION_TIGHT, &eps, NULL, NULL), 0);
    assert_true(eps > 0 && isfinite(eps));
    fa_rdp_accountant_del(acc);
    free(x);
    free(q);
    free(v);
    free(sum);
    free(dec);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_padded_dim),
        cmocka_unit_test(test_wht_known),
        cmocka_unit_test(test_wht_definition),
        cmocka_unit_test(test_rotation_orthonormal),
        cmocka_unit_test(test_signs),
        cmocka_unit_test(test_rounded_bound),
        cmocka_unit_test(test_round_bound_and_bias),
        cmocka_unit_test(test_round_unbiased),
        cmocka_unit_test(test_round_refusals),
        cmocka_unit_test(test_ring_codec),
        cmocka_unit_test(test_subgaussian),
        cmocka_unit_test(test_ring_bits),
        cmocka_unit_test(test_ddg_round),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
