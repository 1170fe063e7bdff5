/* One round of the distributed discrete Gaussian (privacy/ddg.h): the
 * derived parameters and the refusals naming their field; regions' encodings
 * summed in the ring and decoded to the mean of their clipped updates; the
 * noise variance of the decoded sum measured against n sigma2 gamma^2 (the
 * z c of the config); the deterministic source replaying a ring vector. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "privacy/ddg.h"
#include "privacy/random_internal.h"
#include "privacy/rotation_internal.h"

static fa_ddg_config base_config(uint64_t d)
{
    fa_ddg_config c;
    memset(&c, 0, sizeof(c));
    c.clip = 1.0;
    c.noise_multiplier = 1.0;
    c.min_regions = 3;
    c.max_regions = 5;
    c.bits = 16;
    c.beta = exp(-0.5);
    c.beta_wrap = 1e-9;
    c.dim = d;
    return c;
}

static void key_of(uint8_t key[32], uint64_t v)
{
    memset(key, 0, 32);
    for (int i = 0; i < 8; i++)
        key[i] = (uint8_t)(v >> (8 * i));
    key[31] = 0xd9;
}

/* floats uniform in [-1, 1) from a seeded stream */
static void uniform(float *x, size_t n, uint64_t seed)
{
    uint8_t key[32];
    fa_ddg_stream s;
    fa_random r;
    key_of(key, seed ^ 0x5555);
    fa_ddg_stream_init(&s, key);
    fa_privacy_rng rng = fa_ddg_stream_rng(&s);
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
        s += (double)x[i] * x[i];
    return sqrt(s);
}

static void test_derive(void **state)
{
    (void)state;
    fa_ddg_config c = base_config(1000);
    fa_ddg_params p;
    assert_int_equal(fa_ddg_derive(&p, &c, NULL), 0);
    assert_int_equal(p.padded, 1024);
    assert_int_equal(fa_ddg_vector_len(&p), 1025);
    /* c' is the largest scaled clip whose bound fits 2^15 */
    assert_true(p.bound <= 32768.0);
    assert_true(fa_rotation_rounded_bound(p.scaled_clip * (1 + 1e-9) + 1e-6, 1024, c.beta) >
                32768.0);
    assert_true(p.scaled_clip > 32768.0 - sqrt(1024.0));
    assert_true(fabs(p.gamma - 1.0 / p.scaled_clip) < 1e-18);
    assert_true(fabs(p.sigma2 - p.scaled_clip * p.scaled_clip / 3) <= 1e-12 * p.sigma2);
    /* n sigma2 gamma^2 = (z c)^2: the config's noise, in model units */
    assert_true(fabs(3 * p.sigma2 * p.gamma * p.gamma - 1.0) < 1e-12);
    assert_int_equal(p.ring_bits, fa_rotation_ring_bits(5, 16, p.sigma2, 1024, 1e-9));
    assert_true(p.ring_bits > 16 && p.ring_bits <= 32);
    printf("# d=1000 P=%llu gamma=%.6g B=%.2f sigma2=%.6g ring_bits=%u\n",
           (unsigned long long)p.padded, p.gamma, p.bound, p.sigma2, p.ring_bits);
}

static void expect_refused(fa_ddg_config c, const char *field)
{
    fa_ddg_params p;
    fa_error e;
    fa_error_clear(&e);
    assert_int_equal(fa_ddg_derive(&p, &c, &e), FA_ERR_INVAL);
    if (!strstr(e.msg, field)) {
        fprintf(stderr, "message \"%s\" does not name %s\n", e.msg, field);
        fail();
    }
}

static void test_refusals(void **state)
{
    (void)state;
    fa_ddg_config c;
    c = base_config(1000), c.clip = 0, expect_refused(c, "distributed_dp.clip");
    c = base_config(1000), c.clip = NAN, expect_refused(c, "distributed_dp.clip");
    c = base_config(1000), c.noise_multiplier = -1,
    expect_refused(c, "distributed_dp.noise_multiplier");
    c = base_config(1000), c.min_regions = 6, expect_refused(c, "distributed_dp.min_regions");
    c = base_config(1000), c.min_regions = 0, expect_refused(c, "distributed_dp.min_regions");
    c = base_config(1000), c.bits = 3, expect_refused(c, "distributed_dp.bits");
    c = base_config(1000), c.bits = 31, expect_refused(c, "distributed_dp.bits");
    c = base_config(1000), c.beta = 1, expect_refused(c, "distributed_dp.beta");
    c = base_config(1000), c.beta_wrap = 0.5, expect_refused(c, "distributed_dp.beta_wrap");
    /* 2^20 coordinates: the rounding alone is about 1024, more than 2^(8-1) */
    c = base_config((uint64_t)1 << 20), c.bits = 8, expect_refused(c, "distributed_dp.bits");
    /* noise below one integer step per region */
    c = base_config(1000), c.noise_multiplier = 1e-6,
    expect_refused(c, "distributed_dp.noise_multiplier");
    /* 30-bit inputs of 5 regions cannot fit 32 bits */
    c = base_config(1000), c.bits = 30, expect_refused(c, "32 bits");
}

/* R regions' encodings summed mod 2^k, decoded: the mean of the clipped
 * updates plus the noise; err2 gets the squared error of the sum (count *
 * mean - sum of clipped) over the d coordinates. */
static void one_round(const fa_ddg_params *p, int R, float **x, uint64_t round, uint64_t seed,
                      double *err2, double *max_err_mean, uint32_t *count)
{
    const size_t d = (size_t)p->cfg.dim, n = (size_t)p->padded;
    const uint32_t mask = p->ring_bits == 32 ? UINT32_MAX : (UINT32_C(1) << p->ring_bits) - 1;
    uint8_t rot[32], key[32];
    uint32_t *v = malloc((n + 1) * sizeof(*v)), *sum = calloc(n + 1, sizeof(*sum));
    float *dec = malloc(n * sizeof(*dec));
    double *want = calloc(d, sizeof(*want));
    assert_non_null(v);
    assert_non_null(sum);
    assert_non_null(dec);
    assert_non_null(want);
    fa_ddg_rotation_seed("test-federation", rot);
    for (int r = 0; r < R; r++) {
        fa_ddg_stream s;
        fa_ddg_encode_stats st;
        key_of(key, seed * 100 + (uint64_t)r);
        fa_ddg_stream_init(&s, key);
        fa_privacy_rng rng = fa_ddg_stream_rng(&s);
        assert_int_equal(fa_ddg_encode(p, x[r], rot, round, &rng, v, &st, NULL), 0);
        fa_ddg_stream_wipe(&s);
        for (size_t i = 0; i <= n; i++)
            sum[i] = (sum[i] + v[i]) & mask;
        for (size_t i = 0; i < d; i++)
            want[i] += (double)x[r][i] * st.l2_scale;
    }
    assert_int_equal(fa_ddg_decode(p, sum, rot, round, 0, dec, count, NULL), 0);
    *err2 = 0;
    *max_err_mean = 0;
    for (size_t i = 0; i < d; i++) {
        double e = (double)dec[i] * *count - want[i];
        *err2 += e * e;
        if (fabs(e / *count) > *max_err_mean)
            *max_err_mean = fabs(e / *count);
    }
    free(v);
    free(sum);
    free(dec);
    free(want);
}

/* Five regions, one of them 6 times beyond the clip, at little noise: the
 * decoded mean is the mean of the clipped updates to within the noise's
 * few standard deviations; the raw mean is far from it. */
static void test_round_trip_mean(void **state)
{
    (void)state;
    enum { R = 5, D = 3000 };
    fa_ddg_config c = base_config(D);
    fa_ddg_params p;
    float *x[R];
    double err2, maxe;
    uint32_t count;
    c.noise_multiplier = 0.02;
    c.min_regions = R;
    c.max_regions = R;
    assert_int_equal(fa_ddg_derive(&p, &c, NULL), 0);
    for (int r = 0; r < R; r++) {
        x[r] = malloc(D * sizeof(float));
        assert_non_null(x[r]);
        uniform(x[r], D, 10 + (uint64_t)r);
        /* norms 0.5 .. 0.9 of the clip, and region 4 at 6 x the clip */
        double want = r == 4 ? 6.0 : 0.5 + 0.1 * r, have = norm2(x[r], D);
        for (int i = 0; i < D; i++)
            x[r][i] = (float)(x[r][i] * want / have);
    }
    one_round(&p, R, x, 7, 1, &err2, &maxe, &count);
    assert_int_equal(count, R);
    /* the mean's noise per coordinate: sqrt(R (sigma2 + 1/4)) gamma / R */
    double sd = sqrt(R * (p.sigma2 + 0.25)) * p.gamma / R;
    printf("# mean: max |error| %.3g over %d coordinates, noise sd %.3g (%.2f sd)\n", maxe, D, sd,
           maxe / sd);
    assert_true(maxe < 6 * sd);
    /* clipped: the raw mean is 5/R = 1 away (region 4's excess of 5 clips),
     * the decoded one within the noise's sqrt(D) sd = 0.22 of the clipped */
    double dist = sqrt(err2) / R;
    printf("# mean: ||decoded - clipped mean|| %.4g (noise %.4g), the raw mean is 1 away\n", dist,
           sqrt((double)D) * sd);
    assert_true(dist < 1.5 * sqrt((double)D) * sd);
    assert_true(dist < 0.3);
    for (int r = 0; r < R; r++)
        free(x[r]);
}

/* The noise variance of the decoded sum, measured over 3 rounds of 4096
 * coordinates: n sigma2 gamma^2 = (z c)^2 when n regions take part, plus
 * the rounding's at most 1/4 gamma^2 a region.  12288 samples: the
 * estimator's relative sd is about 1.3%; 6% is 4.6 sds.  With 3 regions of
 * a config charged for 5 the variance is 3/5 of it (the dropout case). */
static void test_noise_variance(void **state)
{
    (void)state;
    enum { R = 5, D = 4096, ROUNDS = 3 };
    fa_ddg_config c = base_config(D);
    fa_ddg_params p;
    float *x[R];
    uint32_t count;
    c.noise_multiplier = 0.5;
    c.clip = 2.0;
    c.min_regions = R;
    c.max_regions = R;
    assert_int_equal(fa_ddg_derive(&p, &c, NULL), 0);
    for (int r = 0; r < R; r++) {
        x[r] = malloc(D * sizeof(float));
        assert_non_null(x[r]);
        uniform(x[r], D, 20 + (uint64_t)r);
    }
    for (int regions = R; regions >= 3; regions -= 2) {
        double total = 0, err2, maxe;
        for (int t = 0; t < ROUNDS; t++) {
            one_round(&p, regions, x, 100 + (uint64_t)t, 50 + (uint64_t)t, &err2, &maxe, &count);
            assert_int_equal(count, (uint32_t)regions);
            total += err2;
        }
        double measured = total / (ROUNDS * D);
        double expected = regions * p.sigma2 * p.gamma * p.gamma;
        double rounding = regions * 0.25 * p.gamma * p.gamma;
        printf("# %d regions (charged for %d): noise variance of the decoded sum %.6g, expected "
               "n sigma2 gamma^2 = %.6g (ratio %.4f; (z c)^2 = %.6g); rounding adds at most "
               "%.3g\n",
               regions, R, measured, expected, measured / expected,
               c.noise_multiplier * c.noise_multiplier * c.clip * c.clip, rounding);
        assert_true(measured > 0.94 * expected);
        assert_true(measured < 1.06 * (expected + rounding));
    }
    for (int r = 0; r < R; r++)
        free(x[r]);
}

/* The same key replays the same ring vector (a resumed attempt); another
 * key draws other noise; a non-finite update is refused. */
static void test_deterministic(void **state)
{
    (void)state;
    enum { D = 500 };
    fa_ddg_config c = base_config(D);
    fa_ddg_params p;
    float x[D];
    uint8_t rot[32], key[32];
    uint32_t a[513], b[513];
    fa_ddg_stream s;
    fa_privacy_rng rng;
    fa_error e;
    assert_int_equal(fa_ddg_derive(&p, &c, NULL), 0);
    uniform(x, D, 3);
    fa_ddg_rotation_seed("f", rot);
    key_of(key, 1);
    fa_ddg_stream_init(&s, key);
    rng = fa_ddg_stream_rng(&s);
    assert_int_equal(fa_ddg_encode(&p, x, rot, 1, &rng, a, NULL, NULL), 0);
    fa_ddg_stream_init(&s, key);
    rng = fa_ddg_stream_rng(&s);
    assert_int_equal(fa_ddg_encode(&p, x, rot, 1, &rng, b, NULL, NULL), 0);
    assert_memory_equal(a, b, sizeof(a));
    key_of(key, 2);
    fa_ddg_stream_init(&s, key);
    rng = fa_ddg_stream_rng(&s);
    assert_int_equal(fa_ddg_encode(&p, x, rot, 1, &rng, b, NULL, NULL), 0);
    assert_memory_not_equal(a, b, sizeof(a));
    assert_int_equal(a[512], 1);
    /* the stream read in odd pieces gives the same bytes as in one */
    {
        uint8_t one[300], parts[300];
        fa_ddg_stream_init(&s, key);
        rng = fa_ddg_stream_rng(&s);
        assert_int_equal(rng.fill(rng.ctx, one, 300), 0);
        fa_ddg_stream_init(&s, key);
        assert_int_equal(rng.fill(rng.ctx, parts, 7), 0);
        assert_int_equal(rng.fill(rng.ctx, parts + 7, 100), 0);
        assert_int_equal(rng.fill(rng.ctx, parts + 107, 193), 0);
        assert_memory_equal(one, parts, 300);
    }
    x[17] = NAN;
    fa_error_clear(&e);
    assert_int_equal(fa_ddg_encode(&p, x, rot, 1, NULL, a, NULL, &e), FA_ERR_INVAL);
    assert_non_null(strstr(e.msg, "coordinate 17"));
    fa_ddg_stream_wipe(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_derive),          cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_round_trip_mean), cmocka_unit_test(test_noise_variance),
        cmocka_unit_test(test_deterministic),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
