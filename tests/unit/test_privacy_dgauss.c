/* The exact discrete Gaussian sampler (privacy/dgauss_internal.h): goodness of fit
 * against the exact pmf (chi-squared with a fixed seed, so every run draws
 * the same samples and the verdict is deterministic), the same test refusing
 * a wrong sigma and a rounded continuous Gaussian, mean and variance, the
 * building blocks, determinism, the sum of n regions' shares, and the ring. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "privacy/bignum_internal.h"
#include "privacy/dgauss_internal.h"

/* ---- a seeded source: ChaCha20 keystream, one nonce per fill call ---------- */

typedef struct seeded {
    uint8_t key[32];
    uint64_t calls;
    uint64_t fail_after; /* 0 = never fail */
} seeded;

static int seeded_fill(void *ctx, void *buf, size_t len)
{
    seeded *s = ctx;
    uint8_t nonce[8];
    if (s->fail_after && s->calls >= s->fail_after)
        return FA_ERR_CRYPTO;
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
    s->key[31] = 0xd9;
    fa_privacy_rng r = {seeded_fill, s};
    return r;
}

/* ---- the chi-squared distribution -------------------------------------------- */

/* Q(a, x), the regularised upper incomplete gamma function: the series of
 * P for x < a + 1, the continued fraction of Q (modified Lentz) otherwise. */
static double gamma_q(double a, double x)
{
    double lfront = -x + a * log(x) - lgamma(a);
    if (x <= 0)
        return 1.0;
    if (x < a + 1) {
        double ap = a, del = 1.0 / a, sum = del;
        for (int n = 0; n < 100000 && fabs(del) > fabs(sum) * 1e-16; n++) {
            ap += 1;
            del *= x / ap;
            sum += del;
        }
        return 1.0 - sum * exp(lfront);
    }
    double b = x + 1 - a, c = 1e300, d = 1.0 / b, h = d;
    for (int i = 1; i < 100000; i++) {
        double an = -i * (i - a);
        b += 2;
        d = an * d + b;
        if (fabs(d) < 1e-300)
            d = 1e-300;
        c = b + an / c;
        if (fabs(c) < 1e-300)
            c = 1e-300;
        d = 1.0 / d;
        double del = d * c;
        h *= del;
        if (fabs(del - 1) < 1e-16)
            break;
    }
    return exp(lfront) * h;
}

/* p-value of a chi-squared statistic with df degrees of freedom */
static double chi2_p(double stat, double df)
{
    return gamma_q(df / 2, stat / 2);
}

/* the critical values of any chi-squared table, at the 5% level */
static void test_chi2_pvalue(void **state)
{
    assert_true(fabs(chi2_p(3.841, 1) - 0.05) < 1e-4);
    assert_true(fabs(chi2_p(18.307, 10) - 0.05) < 1e-4);
    assert_true(fabs(chi2_p(124.342, 100) - 0.05) < 1e-4);
    assert_true(fabs(chi2_p(6.635, 1) - 0.01) < 1e-4);
}

/* Pearson's chi-squared of integer samples against a pmf on Z given by its
 * unnormalised weights w(x) (normalised here by summing w over |x| <= lim,
 * beyond which the mass is negligible).  Bins: each x with expected count >=
 * 5 on its own, the two tails pooled.  Returns the p-value. */
typedef double (*weight_fn)(double x, double param);

static double gauss_w(double x, double s2)
{
    return exp(-x * x / (2 * s2));
}

static double laplace_w(double x, double t)
{
    return exp(-fabs(x) / t);
}

static double chi2_fit(const int64_t *y, size_t n, weight_fn w, double param, long lim,
                       int *bins_out)
{
    double z = 0;
    for (long x = -lim; x <= lim; x++)
        z += w((double)x, param);
    long l = 0; /* largest l with n p(l) >= 5 */
    while (l < lim && n * w((double)(l + 1), param) / z >= 5)
        l++;
    size_t nb = (size_t)(2 * l + 1);
    double *obs = calloc(nb, sizeof(double));
    assert_non_null(obs);
    for (size_t i = 0; i < n; i++) {
        long v = y[i] < -l ? -l : y[i] > l ? l : (long)y[i];
        obs[v + l] += 1;
    }
    double stat = 0;
    for (long x = -l; x <= l; x++) {
        double p = w((double)x, param) / z;
        if (x == -l || x == l) /* the tail: P(X <= -l) = P(X >= l) */
            for (long u = l + 1; u <= lim; u++)
                p += w((double)u, param) / z;
        double e = n * p, d = obs[x + l] - e;
        stat += d * d / e;
    }
    free(obs);
    if (bins_out)
        *bins_out = (int)nb;
    return chi2_p(stat, (double)nb - 1);
}

static int64_t *draw(uint64_t num, uint64_t den, uint64_t seed, size_t n)
{
    seeded s;
    fa_privacy_rng rng = seeded_rng(&s, seed);
    fa_dgauss *g;
    int64_t *y = malloc(n * sizeof(int64_t));
    assert_non_null(y);
    assert_int_equal(fa_dgauss_new(&g, num, den, &rng, NULL), 0);
    assert_int_equal(fa_dgauss_samples(g, y, n), 0);
    fa_dgauss_del(g);
    return y;
}

#define N_FIT 200000

/* sigma^2 as exact fractions: 1/4 (sigma 0.5, t = 1), 3/2, 81/4, a double's
 * value (1234.5678 = m / 2^42) and 10^6/3 (t = 578). */
static const struct {
    uint64_t num, den;
} fit_cases[] = {
    {1, 4}, {3, 2}, {81, 4}, {5429686605511341, UINT64_C(1) << 42}, {1000000, 3},
};

static void test_goodness_of_fit(void **state)
{
    for (size_t c = 0; c < sizeof(fit_cases) / sizeof(fit_cases[0]); c++) {
        double s2 = (double)fit_cases[c].num / (double)fit_cases[c].den;
        long lim = (long)(40 * sqrt(s2)) + 10;
        int bins;
        int64_t *y = draw(fit_cases[c].num, fit_cases[c].den, 1000 + c, N_FIT);
        double p = chi2_fit(y, N_FIT, gauss_w, s2, lim, &bins);
        if (!(p > 1e-4))
            fail_msg("sigma^2 = %g: chi-squared p = %g over %d bins", s2, p, bins);
        /* mean and variance against the exact ones (the variance of the
         * discrete Gaussian, by summing the pmf), to 5 standard errors */
        double z = 0, var = 0, m = 0, v = 0;
        for (long x = -lim; x <= lim; x++) {
            z += gauss_w((double)x, s2);
            var += (double)x * (double)x * gauss_w((double)x, s2);
        }
        var /= z;
        for (size_t i = 0; i < N_FIT; i++) {
            m += (double)y[i];
            v += (double)y[i] * (double)y[i];
        }
        m /= N_FIT;
        v = v / N_FIT - m * m;
        if (!(fabs(m) < 5 * sqrt(var / N_FIT)))
            fail_msg("sigma^2 = %g: mean %g", s2, m);
        if (!(fabs(v - var) < 5 * var * sqrt(2.0 / N_FIT)))
            fail_msg("sigma^2 = %g: variance %g, exact %g", s2, v, var);
        if (s2 >= 1) /* the deficit of dgauss_internal.h, below double precision here */
            assert_true(var <= s2 * (1 + 1e-12) && var > s2 * (1 - 1e-6));
        free(y);
    }
}

/* The test can fail: the same statistic refuses samples drawn with sigma^2
 * 5% too large or too small, and a continuous Gaussian rounded to the
 * nearest integer (the textbook shortcut, variance sigma^2 + 1/12). */
static void test_goodness_of_fit_refuses(void **state)
{
    static const double s2 = 1.5;
    int64_t *y = draw(63, 40, 7, N_FIT); /* 1.575 = 1.05 * 1.5 */
    double p = chi2_fit(y, N_FIT, gauss_w, s2, 60, NULL);
    if (!(p < 1e-4))
        fail_msg("sigma^2 1.575 passed as 1.5: p = %g", p);
    free(y);
    y = draw(57, 40, 8, N_FIT); /* 1.425 */
    p = chi2_fit(y, N_FIT, gauss_w, s2, 60, NULL);
    assert_true(p < 1e-4);
    free(y);
    /* and with many bins (about 250 here) */
    y = draw(1050, 1, 9, N_FIT);
    p = chi2_fit(y, N_FIT, gauss_w, 1000.0, 1300, NULL);
    if (!(p < 1e-4))
        fail_msg("sigma^2 1050 passed as 1000: p = %g", p);
    free(y);

    seeded s;
    fa_privacy_rng rng = seeded_rng(&s, 10);
    fa_random r;
    assert_int_equal(fa_random_init(&r, &rng), 0);
    y = malloc(N_FIT * sizeof(int64_t));
    assert_non_null(y);
    for (size_t i = 0; i < N_FIT; i += 2) { /* Box-Muller */
        uint64_t a, b;
        assert_int_equal(fa_random_u64(&r, &a), 0);
        assert_int_equal(fa_random_u64(&r, &b), 0);
        double u1 = ((double)(a >> 11) + 1) / 9007199254740993.0,
               u2 = (double)(b >> 11) / 9007199254740992.0;
        double rad = sqrt(-2 * log(u1) * s2);
        y[i] = (int64_t)llround(rad * cos(2 * M_PI * u2));
        y[i + 1] = (int64_t)llround(rad * sin(2 * M_PI * u2));
    }
    p = chi2_fit(y, N_FIT, gauss_w, s2, 60, NULL);
    if (!(p < 1e-4))
        fail_msg("a rounded continuous Gaussian passed: p = %g", p);
    free(y);
}

/* The 384-bit arithmetic under the sampler, against 64-bit arithmetic and
 * by hand. */
static void test_bignum(void **state)
{
    fa_bn a, b, r;
    uint64_t q;
    seeded s;
    fa_privacy_rng rng = seeded_rng(&s, 6);
    fa_random rnd;
    assert_int_equal(fa_random_init(&rnd, &rng), 0);
    /* (2^64 - 1)^2 = 2^128 - 2^65 + 1 */
    fa_bn_set_u64(&a, UINT64_MAX);
    assert_int_equal(fa_bn_mul(&r, &a, &a), 0);
    assert_true(r.w[0] == 1 && r.w[1] == 0 && r.w[2] == 0xfffffffeu && r.w[3] == 0xffffffffu);
    assert_int_equal(fa_bn_bitlen(&r), 128);
    /* (2^128)^2 fits, (2^128)^4 = 2^512 does not */
    assert_int_equal(fa_bn_mul(&b, &r, &r), 0);
    assert_int_equal(fa_bn_bitlen(&b), 256);
    assert_int_equal(fa_bn_mul(&b, &b, &b), FA_ERR_RANGE);
    /* divmod of a big product by one of its factors */
    fa_bn_set_u64(&b, 1000003);
    assert_int_equal(fa_bn_mul(&r, &r, &b), 0);
    fa_bn_divmod(&r, &b, &q, &a);
    assert_true(q == UINT64_MAX && fa_bn_is_zero(&a)); /* quotient saturates */
    for (int i = 0; i < 2000; i++) {
        uint64_t x, y;
        assert_int_equal(fa_random_u64(&rnd, &x), 0);
        assert_int_equal(fa_random_u64(&rnd, &y), 0);
        y >>= (unsigned)(i % 60);
        if (y == 0)
            y = 1;
        fa_bn_set_u64(&a, x);
        fa_bn_set_u64(&b, y);
        fa_bn_divmod(&a, &b, &q, &r);
        assert_true(q == x / y && r.w[0] == (uint32_t)(x % y) &&
                    r.w[1] == (uint32_t)((x % y) >> 32));
        assert_int_equal(fa_bn_cmp(&a, &b), x < y ? -1 : x > y ? 1 : 0);
        fa_bn_absdiff(&r, &a, &b);
        uint64_t d = x > y ? x - y : y - x;
        assert_true(r.w[0] == (uint32_t)d && r.w[1] == (uint32_t)(d >> 32));
    }
    /* uniform below 3 * 2^100: every draw below, the top third reached */
    fa_bn_set_u64(&a, 3);
    fa_bn_set_u64(&b, UINT64_C(1) << 50);
    assert_int_equal(fa_bn_mul(&a, &a, &b), 0);
    assert_int_equal(fa_bn_mul(&a, &a, &b), 0);
    int top = 0;
    for (int i = 0; i < 3000; i++) {
        assert_int_equal(fa_bn_random_below(&rnd, &a, &r), 0);
        assert_true(fa_bn_cmp(&r, &a) < 0);
        top += fa_bn_bitlen(&r) == 102 && (r.w[3] >> 5) == 1; /* in [2^101, 3 * 2^100) */
    }
    assert_true(top > 1000 - 150 && top < 1000 + 150);
}

static void test_bernoulli_exp(void **state)
{
    /* gamma = num/den; the last one needs the big-number path (den > 2^32) */
    static const uint64_t g[][2] = {
        {0, 1}, {1, 3}, {1, 1}, {5, 2}, {7, 1}, {(UINT64_C(1) << 40) + 3, UINT64_C(1) << 41},
    };
    enum { N = 200000 };
    seeded s;
    fa_privacy_rng rng = seeded_rng(&s, 3);
    fa_dgauss *d;
    assert_int_equal(fa_dgauss_new(&d, 1, 1, &rng, NULL), 0);
    for (size_t c = 0; c < sizeof(g) / sizeof(g[0]); c++) {
        double p = exp(-(double)g[c][0] / (double)g[c][1]), k = 0;
        unsigned b;
        for (int i = 0; i < N; i++) {
            assert_int_equal(fa_dgauss_bernoulli_exp(d, g[c][0], g[c][1], &b), 0);
            k += b;
        }
        if (!(fabs(k / N - p) <= 5 * sqrt(p * (1 - p) / N)))
            fail_msg("Bernoulli(exp(-%llu/%llu)): frequency %g, want %g",
                     (unsigned long long)g[c][0], (unsigned long long)g[c][1], k / N, p);
    }
    unsigned b;
    assert_int_equal(fa_dgauss_bernoulli_exp(d, 1, 0, &b), FA_ERR_INVAL);
    fa_dgauss_del(d);
}

static void test_laplace(void **state)
{
    seeded s;
    fa_privacy_rng rng = seeded_rng(&s, 4);
    fa_dgauss *d;
    int64_t *y = malloc(N_FIT * sizeof(int64_t));
    assert_non_null(y);
    assert_int_equal(fa_dgauss_new(&d, 1, 1, &rng, NULL), 0);
    for (int t = 1; t <= 7; t += 6) {
        for (size_t i = 0; i < N_FIT; i++)
            assert_int_equal(fa_dgauss_laplace(d, (uint64_t)t, &y[i]), 0);
        double p = chi2_fit(y, N_FIT, laplace_w, t, 80 * t, NULL);
        if (!(p > 1e-4))
            fail_msg("discrete Laplace t = %d: p = %g", t, p);
        /* and the wrong scale is refused */
        assert_true(chi2_fit(y, N_FIT, laplace_w, t * 1.05, 80 * t, NULL) < 1e-4);
    }
    assert_int_equal(fa_dgauss_laplace(d, 0, &y[0]), FA_ERR_INVAL);
    fa_dgauss_del(d);
    free(y);
}

static void test_determinism(void **state)
{
    enum { N = 2000 };
    int64_t a[N], b[N], c[N];
    int64_t *ya = draw(81, 4, 42, N), *yb = draw(81, 4, 42, N), *yc = draw(81, 4, 43, N);
    memcpy(a, ya, sizeof(a));
    memcpy(b, yb, sizeof(b));
    memcpy(c, yc, sizeof(c));
    assert_memory_equal(a, b, sizeof(a));
    assert_memory_not_equal(a, c, sizeof(a));
    free(ya);
    free(yb);
    free(yc);
    /* libsodium's source (rng NULL) draws too */
    fa_dgauss *g;
    int64_t y;
    assert_int_equal(fa_dgauss_new(&g, 3, 2, NULL, NULL), 0);
    for (int i = 0; i < 100; i++) {
        assert_int_equal(fa_dgauss_sample(g, &y), 0);
        assert_true(y > -100 && y < 100);
    }
    fa_dgauss_del(g);
}

/* Each of n = 10 regions adds N_Z(0, sigma^2 / n) with sigma^2 = 25: the
 * sum's variance is n times each share's, within 2e-17 of sigma^2 (the
 * discrete Gaussian's deficit at 5/2, see dgauss_internal.h), measured to 5 standard
 * errors. */
static void test_sum_of_shares(void **state)
{
    enum { REGIONS = 10, TRIALS = 40000 };
    fa_dgauss *g[REGIONS];
    seeded s[REGIONS];
    double m = 0, v = 0;
    for (int r = 0; r < REGIONS; r++) {
        fa_privacy_rng rng = seeded_rng(&s[r], 500 + (uint64_t)r);
        assert_int_equal(fa_dgauss_new(&g[r], 25, REGIONS, &rng, NULL), 0);
    }
    uint64_t num, den;
    fa_dgauss_sigma2(g[0], &num, &den);
    assert_true(num == 5 && den == 2); /* reduced */
    for (int t = 0; t < TRIALS; t++) {
        int64_t sum = 0, y;
        for (int r = 0; r < REGIONS; r++) {
            assert_int_equal(fa_dgauss_sample(g[r], &y), 0);
            sum += y;
        }
        m += (double)sum;
        v += (double)sum * (double)sum;
    }
    m /= TRIALS;
    v = v / TRIALS - m * m;
    if (!(fabs(v - 25.0) < 5 * 25.0 * sqrt(2.0 / TRIALS)))
        fail_msg("variance of the sum of %d shares: %g, want 25", REGIONS, v);
    assert_true(fabs(m) < 5 * sqrt(25.0 / TRIALS));
    for (int r = 0; r < REGIONS; r++)
        fa_dgauss_del(g[r]);
}

static void test_add_ring(void **state)
{
    enum { N = 1000 };
    uint32_t v[N], w[N];
    int64_t y[N];
    seeded s1, s2;
    fa_privacy_rng r1 = seeded_rng(&s1, 77), r2 = seeded_rng(&s2, 77);
    fa_dgauss *g1, *g2;
    fa_error err;
    static const int bits[] = {1, 17, 32};
    for (int b = 0; b < 3; b++) {
        int k = bits[b];
        assert_int_equal(fa_dgauss_new(&g1, 400, 1, &r1, NULL), 0);
        assert_int_equal(fa_dgauss_new(&g2, 400, 1, &r2, NULL), 0);
        uint32_t mask = k == 32 ? UINT32_MAX : (UINT32_C(1) << k) - 1;
        for (int i = 0; i < N; i++)
            v[i] = w[i] = 0xfedcba98u * (uint32_t)i;
        assert_int_equal(fa_dgauss_add_ring(g1, v, N, (uint32_t)k, NULL), 0);
        assert_int_equal(fa_dgauss_samples(g2, y, N), 0);
        for (int i = 0; i < N; i++) {
            uint32_t want = (uint32_t)(((int64_t)(w[i] & mask) + y[i]) & (int64_t)mask);
            assert_int_equal(v[i], want);
            assert_int_equal(v[i] & ~mask, 0);
        }
        fa_dgauss_del(g1);
        fa_dgauss_del(g2);
    }
    assert_int_equal(fa_dgauss_new(&g1, 1, 1, NULL, NULL), 0);
    assert_int_equal(fa_dgauss_add_ring(g1, v, N, 0, &err), FA_ERR_INVAL);
    assert_int_equal(fa_dgauss_add_ring(g1, v, N, 33, &err), FA_ERR_INVAL);
    fa_dgauss_del(g1);
}

static void test_sigma2_forms(void **state)
{
    fa_dgauss *g;
    uint64_t num, den;
    fa_error err;
    assert_int_equal(fa_dgauss_new_f64(&g, 0.1, NULL, NULL), 0);
    fa_dgauss_sigma2(g, &num, &den);
    assert_true(num == UINT64_C(3602879701896397) && den == UINT64_C(1) << 55);
    fa_dgauss_del(g);
    assert_int_equal(fa_dgauss_new_f64(&g, 1234.5678, NULL, NULL), 0);
    fa_dgauss_sigma2(g, &num, &den);
    assert_true(num == fit_cases[3].num && den == fit_cases[3].den);
    assert_true((double)num / (double)den == 1234.5678);
    fa_dgauss_del(g);
    assert_int_equal(fa_dgauss_new_f64(&g, 1e6, NULL, NULL), 0);
    fa_dgauss_sigma2(g, &num, &den);
    assert_true(num == 1000000 && den == 1);
    fa_dgauss_del(g);
    assert_int_equal(fa_dgauss_new(&g, 6, 4, NULL, NULL), 0);
    fa_dgauss_sigma2(g, &num, &den);
    assert_true(num == 3 && den == 2);
    fa_dgauss_del(g);
    assert_int_equal(fa_dgauss_new_f64(&g, 0x1p70, NULL, &err), FA_ERR_RANGE);
    assert_int_equal(fa_dgauss_new_f64(&g, 1e-30, NULL, &err), FA_ERR_RANGE);
    assert_non_null(strstr(err.msg, "num/den"));
    assert_int_equal(fa_dgauss_new_f64(&g, -1.0, NULL, &err), FA_ERR_INVAL);
    assert_int_equal(fa_dgauss_new_f64(&g, NAN, NULL, &err), FA_ERR_INVAL);
    assert_int_equal(fa_dgauss_new(&g, 0, 1, NULL, &err), FA_ERR_INVAL);
    assert_int_equal(fa_dgauss_new(&g, 1, 0, NULL, &err), FA_ERR_INVAL);
    assert_int_equal(fa_dgauss_new(&g, UINT64_C(1) << 63, 1, NULL, &err), FA_ERR_INVAL);
    /* the largest sigma^2 still works */
    assert_int_equal(fa_dgauss_new(&g, (UINT64_C(1) << 63) - 1, 1, NULL, NULL), 0);
    int64_t y;
    for (int i = 0; i < 100; i++)
        assert_int_equal(fa_dgauss_sample(g, &y), 0);
    fa_dgauss_del(g);
    fa_dgauss_del(NULL);
}

/* A failing source: the error comes back, nothing is made up. */
static void test_source_failure(void **state)
{
    seeded s;
    fa_privacy_rng rng = seeded_rng(&s, 5);
    fa_dgauss *g;
    uint32_t v[4096] = {0};
    int64_t y;
    fa_error err;
    s.fail_after = 3;
    assert_int_equal(fa_dgauss_new(&g, 1000, 1, &rng, NULL), 0);
    assert_int_equal(fa_dgauss_add_ring(g, v, 4096, 20, &err), FA_ERR_CRYPTO);
    assert_non_null(strstr(err.msg, "coordinate"));
    assert_int_equal(fa_dgauss_sample(g, &y), FA_ERR_CRYPTO);
    fa_dgauss_del(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chi2_pvalue),
        cmocka_unit_test(test_goodness_of_fit),
        cmocka_unit_test(test_goodness_of_fit_refuses),
        cmocka_unit_test(test_bignum),
        cmocka_unit_test(test_bernoulli_exp),
        cmocka_unit_test(test_laplace),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_sum_of_shares),
        cmocka_unit_test(test_add_ring),
        cmocka_unit_test(test_sigma2_forms),
        cmocka_unit_test(test_source_failure),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
