/* A region's side of the distributed DP (worker/ddp.h) against the
 * aggregator's decode (privacy/ddg.h fa_ddg_decode, what aggregator/
 * fed_ddp.c runs): three regions encode their updates from the
 * FederationInfo the aggregator publishes, the ring sum decodes to the mean
 * of the clipped updates within the noise, and the noise variance of the
 * decoded sum is n sigma2 gamma^2 = (z c)^2; the noise is a function of
 * (identity key, round, model version, update) only, so a resumed attempt
 * encodes the same vector; published parameters that the region does not
 * derive are refused. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fedagg.pb-c.h"
#include "privacy/ddg.h"
#include "worker/ddp.h"

enum { R = 3, D = 5000 };

struct fed {
    Fedagg__FederationInfo info;
    Fedagg__QuantParams q;
    Fedagg__DdpParams ddp;
    char *regions[R];
    fa_ddg_params p;
};

/* What the aggregator publishes (aggregator/fed_ddp.c fa_fed_ddp_params_pb). */
static void publish(struct fed *f, double clip, double z)
{
    static char *names[R] = {"eu-west", "us-east", "ap-south"};
    fa_ddg_config c;
    memset(f, 0, sizeof(*f));
    memset(&c, 0, sizeof(c));
    c.clip = clip;
    c.noise_multiplier = z;
    c.min_regions = R;
    c.max_regions = R;
    c.bits = 16;
    c.beta = exp(-0.5);
    c.beta_wrap = 1e-9;
    c.dim = D;
    assert_int_equal(fa_ddg_derive(&f->p, &c, NULL), 0);
    fedagg__federation_info__init(&f->info);
    fedagg__quant_params__init(&f->q);
    fedagg__ddp_params__init(&f->ddp);
    f->ddp.clip = clip;
    f->ddp.noise_multiplier = z;
    f->ddp.min_regions = R;
    f->ddp.bits = 16;
    f->ddp.beta = c.beta;
    f->ddp.beta_wrap = c.beta_wrap;
    f->ddp.max_regions = R;
    f->ddp.granularity = f->p.gamma;
    f->ddp.sigma2 = f->p.sigma2;
    f->ddp.l2_bound = f->p.bound;
    f->ddp.padded_dim = f->p.padded;
    f->ddp.ring_bits = f->p.ring_bits;
    f->q.ring_bits = f->p.ring_bits;
    for (int i = 0; i < R; i++)
        f->regions[i] = names[i];
    f->info.federation_id = "fed";
    f->info.round = 7;
    f->info.model_version = 6;
    f->info.num_params = D;
    f->info.n_regions = R;
    f->info.regions = f->regions;
    f->info.quant = &f->q;
    f->info.ddp = &f->ddp;
}

static void seed_of(uint8_t s[32], int r)
{
    for (int i = 0; i < 32; i++)
        s[i] = (uint8_t)(r * 31 + i);
}

/* a deterministic update of norm `norm` */
static void update(float *x, int r, double norm)
{
    double ss = 0;
    for (int i = 0; i < D; i++) {
        x[i] = (float)sin(0.37 * i + 1.3 * r) * (float)(1 + (i % 7));
        ss += (double)x[i] * x[i];
    }
    for (int i = 0; i < D; i++)
        x[i] = (float)(x[i] * norm / sqrt(ss));
}

/* The three regions' round: squared error of the decoded sum against the
 * sum of the clipped updates, over the D coordinates. */
static double round_error(struct fed *f, float x[R][D], const double norms[R])
{
    const uint32_t mask = f->p.ring_bits == 32 ? UINT32_MAX : (UINT32_C(1) << f->p.ring_bits) - 1;
    uint32_t *sum = NULL, count = 0;
    uint8_t rot[32];
    size_t n = 0;
    float *mean;
    double err2 = 0;

    for (int r = 0; r < R; r++) {
        uint8_t seed[32];
        uint32_t *v;
        seed_of(seed, r);
        assert_int_equal(
            fa_ddp_encode_update(&f->info, seed, "fed", f->regions[r], x[r], D, &v, &n, NULL), 0);
        assert_int_equal(n, fa_ddp_vector_len(&f->info));
        if (!sum)
            sum = calloc(n, sizeof(*sum));
        assert_non_null(sum);
        for (size_t i = 0; i < n; i++)
            sum[i] = (sum[i] + v[i]) & mask;
        free(v);
    }
    mean = malloc((n - 1) * sizeof(*mean));
    assert_non_null(mean);
    fa_ddg_rotation_seed("fed", rot);
    assert_int_equal(fa_ddg_decode(&f->p, sum, rot, f->info.round, 0, mean, &count, NULL), 0);
    assert_int_equal(count, R);
    for (int i = 0; i < D; i++) {
        double want = 0;
        for (int r = 0; r < R; r++)
            want += x[r][i] * (norms[r] > f->p.cfg.clip ? f->p.cfg.clip / norms[r] : 1.0);
        double e = (double)mean[i] * R - want;
        err2 += e * e;
    }
    {
        /* the aggregator's divisor (its participants) instead of the sum's
         * count: the same decoding over twice the regions, exactly half */
        float *half = malloc((n - 1) * sizeof(*half));
        uint32_t count2 = 0;
        assert_non_null(half);
        assert_int_equal(fa_ddg_decode(&f->p, sum, rot, f->info.round, 2 * R, half, &count2, NULL),
                         0);
        assert_int_equal(count2, R);
        for (int i = 0; i < D; i++)
            assert_true(half[i] == mean[i] / 2);
        free(half);
    }
    free(mean);
    free(sum);
    return err2;
}

static void test_round_trip(void **state)
{
    (void)state;
    static float x[R][D];
    const double norms[R] = {0.4, 0.9, 5.0}; /* the third is clipped to 1 */
    struct fed f;
    publish(&f, 1.0, 0.05);
    for (int r = 0; r < R; r++)
        update(x[r], r, norms[r]);
    double err2 = round_error(&f, x, norms);
    /* (z c)^2 = 0.0025 a coordinate, 12.5 over D: the clipped sum is within
     * it; the unclipped one is 4 away (16 in the square) */
    double noise = R * f.p.sigma2 * f.p.gamma * f.p.gamma * D;
    printf("# sum error^2 %.4g over %d coordinates, noise %.4g expected (the unclipped sum is "
           "16 away)\n",
           err2, D, noise);
    assert_true(err2 < 1.3 * noise);
    assert_true(err2 > 0.7 * noise);
}

/* The decoded sum's noise variance: n sigma2 gamma^2 = (z c)^2. */
static void test_noise_variance(void **state)
{
    (void)state;
    static float x[R][D];
    const double norms[R] = {1.0, 1.0, 1.0};
    struct fed f;
    double total = 0;
    publish(&f, 2.0, 0.5);
    for (int r = 0; r < R; r++)
        update(x[r], r, norms[r]);
    /* rounds 7, 8, 9: other rotations and other noise */
    for (int t = 0; t < 3; t++) {
        f.info.round = 7 + (uint64_t)t;
        total += round_error(&f, x, norms);
    }
    double measured = total / (3.0 * D), expected = R * f.p.sigma2 * f.p.gamma * f.p.gamma;
    printf("# noise variance of the decoded sum %.6g, n sigma2 gamma^2 %.6g = (z c)^2 %.6g "
           "(ratio %.4f, 15000 samples)\n",
           measured, expected, 0.5 * 0.5 * 2.0 * 2.0, measured / expected);
    assert_true(fabs(expected - 1.0) < 1e-9);
    assert_true(measured > 0.95 * expected && measured < 1.05 * expected);
}

/* The noise key: the same inputs give the same ring vector (a resume);
 * another region, round, version or update another. */
static void test_same_vector_on_resume(void **state)
{
    (void)state;
    static float x[D];
    struct fed f;
    uint8_t seed[32], k0[32], k[32];
    uint32_t *a, *b;
    size_t na, nb;
    publish(&f, 1.0, 1.0);
    update(x, 0, 0.5);
    seed_of(seed, 0);
    assert_int_equal(fa_ddp_encode_update(&f.info, seed, "fed", "eu-west", x, D, &a, &na, NULL), 0);
    assert_int_equal(fa_ddp_encode_update(&f.info, seed, "fed", "eu-west", x, D, &b, &nb, NULL), 0);
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, na * sizeof(*a));
    free(b);
    f.info.attempt = 3; /* a new attempt of the same update: the same release */
    assert_int_equal(fa_ddp_encode_update(&f.info, seed, "fed", "eu-west", x, D, &b, &nb, NULL), 0);
    assert_memory_equal(a, b, na * sizeof(*a));
    free(b);
    free(a);
    assert_int_equal(fa_ddp_noise_key(seed, "fed", "eu-west", 7, 6, x, D, k0, NULL), 0);
    assert_int_equal(fa_ddp_noise_key(seed, "fed", "us-east", 7, 6, x, D, k, NULL), 0);
    assert_memory_not_equal(k0, k, 32);
    assert_int_equal(fa_ddp_noise_key(seed, "fed", "eu-west", 8, 6, x, D, k, NULL), 0);
    assert_memory_not_equal(k0, k, 32);
    assert_int_equal(fa_ddp_noise_key(seed, "fed", "eu-west", 7, 5, x, D, k, NULL), 0);
    assert_memory_not_equal(k0, k, 32);
    x[100] += 1e-6f;
    assert_int_equal(fa_ddp_noise_key(seed, "fed", "eu-west", 7, 6, x, D, k, NULL), 0);
    assert_memory_not_equal(k0, k, 32);
    seed[0] ^= 1;
    x[100] -= 1e-6f;
    assert_int_equal(fa_ddp_noise_key(seed, "fed", "eu-west", 7, 6, x, D, k, NULL), 0);
    assert_memory_not_equal(k0, k, 32);
}

/* An aggregator that publishes less noise (or another ring) than its
 * settings give is refused before anything is encoded. */
static void test_refuses_other_parameters(void **state)
{
    (void)state;
    struct fed f;
    fa_ddg_params p;
    fa_error e;
    publish(&f, 1.0, 1.0);
    assert_int_equal(fa_ddp_params(&p, &f.info, NULL), 0);
    assert_int_equal(fa_ddp_vector_len(&f.info), 8193);
    f.ddp.sigma2 *= 0.5;
    fa_error_clear(&e);
    assert_int_equal(fa_ddp_params(&p, &f.info, &e), FA_ERR_PROTOCOL);
    assert_non_null(strstr(e.msg, "this region derives"));
    publish(&f, 1.0, 1.0);
    f.q.ring_bits = f.p.ring_bits + 1;
    assert_int_equal(fa_ddp_params(&p, &f.info, NULL), FA_ERR_PROTOCOL);
    publish(&f, 1.0, 1.0);
    f.ddp.max_regions = 2;
    assert_int_equal(fa_ddp_params(&p, &f.info, NULL), FA_ERR_PROTOCOL);
    publish(&f, 1.0, 1.0);
    f.ddp.bits = 2;
    fa_error_clear(&e);
    assert_int_equal(fa_ddp_params(&p, &f.info, &e), FA_ERR_PROTOCOL);
    assert_non_null(strstr(e.msg, "distributed_dp.bits"));
    f.info.ddp = NULL;
    assert_int_equal(fa_ddp_vector_len(&f.info), D + 1);
    assert_int_equal(fa_ddp_params(&p, &f.info, NULL), FA_ERR_PROTOCOL);
}

/* The spend the region's budget charges: region level, min_regions' noise. */
static void test_spend(void **state)
{
    (void)state;
    struct fed f;
    fa_privacy_spend sp;
    publish(&f, 1.0, 1.0);
    fa_ddp_spend(&f.p, &sp);
    assert_string_equal(sp.mechanism, FA_PRIVACY_MECHANISM_DDG);
    assert_true(sp.ddg_l2_sens == f.p.bound && sp.ddg_sigma2 == f.p.sigma2);
    assert_int_equal(sp.ddg_regions, R);
    assert_int_equal(sp.ddg_dim, 8192);
    assert_int_equal(sp.steps, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_noise_variance),
        cmocka_unit_test(test_same_vector_on_resume),
        cmocka_unit_test(test_refuses_other_parameters),
        cmocka_unit_test(test_spend),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
