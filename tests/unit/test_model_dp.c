/* Unit tests of DP-SGD in the built-in trainer (model/train.h, mlp.h):
 * the ghost norms against the norms of explicitly computed per-example
 * gradients (a backward pass of one example at a time); the clipped sum
 * against the naive clipped sum, whole and in accumulated pieces; the noise
 * stream's mean, variance, tails and independence (fixed keys: test mode);
 * the Poisson sampling rate, its variance and each example's frequency;
 * the loop: noise added once per step whatever the number of ranks (two
 * threads summing through the hook: the summed gradient's noise variance
 * is (sigma C / q n)^2, not twice that), no noise and no clipping is plain
 * full-batch SGD, a batch larger than max_batch is summed in pieces, a run
 * resumed with the same key is bit for bit the whole run, another key gives
 * another run; bad parameters are refused. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/mlp.h"
#include "model/rng.h"
#include "model/train.h"

#define DIM 12
#define CLASSES 4
#define N 600
static float X[N * DIM];
static uint8_t Y[N];
static fa_dataset D = {N, DIM, X, Y};

static int setup(void **state)
{
    fa_rng r;
    fa_rng_seed(&r, 77, 0);
    for (uint32_t i = 0; i < N; i++) {
        Y[i] = (uint8_t)(i % CLASSES);
        /* a spread of norms: some examples far out, so that clipping bites on some only */
        double s = 0.3 + 3.0 * fa_rng_uniform(&r);
        for (int k = 0; k < DIM; k++)
            X[i * DIM + k] = (float)(s * (fa_rng_normal(&r) + (k % CLASSES == Y[i] ? 1.0 : 0.0)));
    }
    return 0;
}

static fa_mlp *new_cpu(uint32_t max_batch)
{
    uint32_t hidden[2] = {16, 8};
    fa_mlp_config c;
    fa_mlp_opts o;
    fa_mlp *m;
    fa_error err;
    fa_mlp_config_make(&c, DIM, hidden, 2, CLASSES, NULL);
    fa_mlp_opts_default(&o);
    o.backend = FA_MLP_CPU;
    o.max_batch = max_batch;
    o.cpu_threads = 1;
    if (fa_mlp_new(&m, &c, &o, &err) != 0)
        fail_msg("fa_mlp_new: %s", err.msg);
    return m;
}

static void key_of(uint8_t key[FA_TRAIN_DP_KEY_BYTES], uint8_t v)
{
    for (int i = 0; i < FA_TRAIN_DP_KEY_BYTES; i++)
        key[i] = (uint8_t)(v + 13 * i);
}

static double l2(const float *v, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (double)v[i] * v[i];
    return sqrt(s);
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* Per-example gradients the slow way: one example per backward pass. */
static void naive_grads(fa_mlp *m, uint32_t n, float *g /* (n, np) */)
{
    size_t np = fa_mlp_layout_of(m)->n_params;
    fa_error err;
    for (uint32_t i = 0; i < n; i++) {
        assert_int_equal(fa_mlp_forward_backward(m, X + (size_t)i * DIM, Y + i, 1, 1, NULL, &err),
                         0);
        assert_int_equal(fa_mlp_grads_to_host(m, g + i * np, &err), 0);
    }
}

static void test_ghost_norms_and_clipped_sum(void **state)
{
    enum { B = 48 };
    fa_mlp *m = new_cpu(64);
    size_t np = fa_mlp_layout_of(m)->n_params;
    float *params = malloc(np * 4), *g = malloc((size_t)B * np * 4), *want = calloc(np, 4),
          *got = malloc(np * 4), norms[B];
    const float scale = 1.0f / 40.0f;
    float clip, sorted[B];
    double worst = 0;
    int clipped = 0;
    fa_mlp_stats st, st_plain;
    fa_error err;

    fa_mlp_init_he(fa_mlp_layout_of(m), params, 3);
    assert_int_equal(fa_mlp_set_params(m, params, &err), 0);
    naive_grads(m, B, g);
    /* clip at the median norm: half the examples are clipped */
    for (uint32_t i = 0; i < B; i++)
        sorted[i] = (float)l2(g + i * np, np);
    qsort(sorted, B, sizeof(float), cmp_float);
    clip = sorted[B / 2];

    /* the norms */
    assert_int_equal(fa_mlp_forward_backward_clipped(m, X, Y, B, clip, scale, 0, norms, &st, &err),
                     0);
    for (uint32_t i = 0; i < B; i++) {
        double n_naive = l2(g + i * np, np);
        double rel = fabs(norms[i] - n_naive) / n_naive;
        worst = rel > worst ? rel : worst;
        if (rel > 1e-5)
            fail_msg("example %u: ghost norm %.9g, per-example gradient's norm %.9g", i,
                     (double)norms[i], n_naive);
        clipped += n_naive > clip;
    }
    print_message("ghost norms: worst relative difference %.2e; %d of %d examples clipped\n", worst,
                  clipped, B);
    assert_true(clipped > 5 && clipped < B - 5); /* both cases are exercised */

    /* the clipped sum */
    for (uint32_t i = 0; i < B; i++) {
        double n_i = l2(g + i * np, np), f = n_i > clip ? clip / n_i : 1.0;
        for (size_t k = 0; k < np; k++)
            want[k] += (float)(scale * f * g[i * np + k]);
    }
    assert_int_equal(fa_mlp_grads_to_host(m, got, &err), 0);
    for (size_t k = 0; k < np; k++)
        if (fabs(got[k] - want[k]) > 1e-6 + 1e-4 * fabs(want[k]))
            fail_msg("parameter %zu: clipped sum %.9g, naive %.9g", k, (double)got[k],
                     (double)want[k]);

    /* the same statistics as the plain pass */
    assert_int_equal(fa_mlp_forward_backward(m, X, Y, B, B, &st_plain, &err), 0);
    assert_int_equal(st.n, B);
    assert_int_equal(st.correct, st_plain.correct);
    assert_true(fabs(st.loss_sum - st_plain.loss_sum) < 1e-4 * st_plain.loss_sum);

    /* in two accumulated pieces: the same sum */
    assert_int_equal(fa_mlp_forward_backward_clipped(m, X, Y, 20, clip, scale, 0, NULL, NULL, &err),
                     0);
    assert_int_equal(fa_mlp_forward_backward_clipped(m, X + 20 * DIM, Y + 20, B - 20, clip, scale,
                                                     1, NULL, NULL, &err),
                     0);
    assert_int_equal(fa_mlp_grads_to_host(m, got, &err), 0);
    for (size_t k = 0; k < np; k++)
        assert_true(fabs(got[k] - want[k]) <= 1e-6 + 1e-4 * fabs(want[k]));

    /* a huge clip is the plain (scaled) sum; an empty batch zeroes, or keeps with accumulate */
    assert_int_equal(
        fa_mlp_forward_backward_clipped(m, X, Y, B, 1e30f, 1.0f / B, 0, NULL, NULL, &err), 0);
    assert_int_equal(fa_mlp_grads_to_host(m, got, &err), 0);
    assert_int_equal(fa_mlp_forward_backward(m, X, Y, B, B, NULL, &err), 0);
    assert_int_equal(fa_mlp_grads_to_host(m, want, &err), 0);
    for (size_t k = 0; k < np; k++)
        assert_true(fabs(got[k] - want[k]) <= 1e-7 + 1e-5 * fabs(want[k]));
    assert_int_equal(fa_mlp_forward_backward_clipped(m, X, Y, 0, clip, 1.0f, 1, NULL, NULL, &err),
                     0);
    assert_int_equal(fa_mlp_grads_to_host(m, got, &err), 0);
    assert_memory_equal(got, want, np * 4);
    assert_int_equal(fa_mlp_forward_backward_clipped(m, X, Y, 0, clip, 1.0f, 0, NULL, NULL, &err),
                     0);
    assert_int_equal(fa_mlp_grads_to_host(m, got, &err), 0);
    for (size_t k = 0; k < np; k++)
        assert_true(got[k] == 0.0f);

    /* refusals */
    assert_int_equal(fa_mlp_forward_backward_clipped(m, X, Y, B, 0.0f, 1.0f, 0, NULL, NULL, &err),
                     FA_ERR_INVAL);
    assert_int_equal(fa_mlp_forward_backward_clipped(m, X, Y, B, NAN, 1.0f, 0, NULL, NULL, &err),
                     FA_ERR_INVAL);
    assert_int_equal(fa_mlp_forward_backward_clipped(m, X, Y, 65, 1.0f, 1.0f, 0, NULL, NULL, &err),
                     FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "exceeds max_batch 64"));

    /* fa_mlp_grads_add_host adds */
    for (size_t k = 0; k < np; k++)
        want[k] = (float)k * 0.5f;
    assert_int_equal(fa_mlp_grads_add_host(m, want, &err), 0);
    assert_int_equal(fa_mlp_grads_add_host(m, want, &err), 0);
    assert_int_equal(fa_mlp_grads_to_host(m, got, &err), 0);
    for (size_t k = 0; k < np; k++)
        assert_true(got[k] == (float)k);
    free(params);
    free(g);
    free(want);
    free(got);
    fa_mlp_del(m);
}

/* Fixed keys: the statistics below are of one known stream each. */
static void test_noise_stream(void **state)
{
    enum { LEN = 1000001 }; /* odd: the last value of a pair is used alone */
    const double sd = 2.5;
    float *z = malloc(LEN * 4), *z2 = malloc(LEN * 4);
    uint8_t key[FA_TRAIN_DP_KEY_BYTES], other[FA_TRAIN_DP_KEY_BYTES];
    double sum = 0, sum2 = 0, sum4 = 0, cross = 0;
    size_t beyond2 = 0, beyond4 = 0;

    key_of(key, 1);
    key_of(other, 2);
    fa_train_dp_noise(key, 7, z, LEN, sd);
    for (size_t i = 0; i < LEN; i++) {
        double v = z[i];
        assert_true(isfinite(v));
        sum += v;
        sum2 += v * v;
        sum4 += v * v * v * v;
        beyond2 += fabs(v) > 2 * sd;
        beyond4 += fabs(v) > 4 * sd;
    }
    double mean = sum / LEN, var = sum2 / LEN - mean * mean, kurt = sum4 / LEN / (var * var);
    print_message("noise: mean %.5f, variance %.5f (want %.5f), kurtosis %.4f, P(|z|>2sd) %.5f, "
                  "P(|z|>4sd) %.2e\n",
                  mean, var, sd * sd, kurt, (double)beyond2 / LEN, (double)beyond4 / LEN);
    /* standard errors: mean sd/sqrt(n) = 0.0025; variance sd^2 sqrt(2/n) = 0.0088 */
    assert_true(fabs(mean) < 5 * sd / sqrt(LEN));
    assert_true(fabs(var - sd * sd) < 5 * sd * sd * sqrt(2.0 / LEN));
    assert_true(fabs(kurt - 3.0) < 0.05);
    assert_true(fabs((double)beyond2 / LEN - 0.0455003) < 0.001);
    assert_true((double)beyond4 / LEN > 2e-5 && (double)beyond4 / LEN < 1.5e-4); /* 6.3e-5 */
    /* the tail beyond the ziggurat's R = 3.44 sd: P = 5.76e-4 */
    size_t tail = 0;
    for (size_t i = 0; i < LEN; i++)
        tail += fabs(z[i]) > 3.442619855899 * sd;
    assert_true(fabs((double)tail / LEN - 5.76e-4) < 5 * sqrt(5.76e-4 / LEN));

    /* deterministic in (key, step); another step or key: independent */
    fa_train_dp_noise(key, 7, z2, LEN, sd);
    assert_memory_equal(z, z2, (size_t)LEN * 4);
    fa_train_dp_noise(key, 8, z2, LEN, sd);
    for (size_t i = 0; i < LEN; i++)
        cross += (double)z[i] * z2[i];
    assert_true(fabs(cross / LEN / (sd * sd)) < 5 / sqrt(LEN));
    fa_train_dp_noise(other, 7, z2, LEN, sd);
    cross = 0;
    for (size_t i = 0; i < LEN; i++)
        cross += (double)z[i] * z2[i];
    assert_true(fabs(cross / LEN / (sd * sd)) < 5 / sqrt(LEN));
    /* neighbours within the stream are uncorrelated (Box-Muller pairs included) */
    cross = 0;
    for (size_t i = 0; i + 1 < LEN; i++)
        cross += (double)z[i] * z[i + 1];
    assert_true(fabs(cross / LEN / (sd * sd)) < 5 / sqrt(LEN));
    /* a prefix is the same stream */
    fa_train_dp_noise(key, 7, z2, 1001, sd);
    assert_memory_equal(z, z2, 1001 * 4);
    free(z);
    free(z2);
}

static void test_poisson_sampling(void **state)
{
    enum { STEPS = 4000, M = 2000 };
    const double q = 0.03;
    uint32_t *idx = malloc(M * sizeof(uint32_t)), *hits = calloc(M, sizeof(uint32_t));
    uint8_t key[FA_TRAIN_DP_KEY_BYTES];
    double s = 0, s2 = 0, both = 0;
    uint32_t prev0 = 0;

    key_of(key, 9);
    for (uint64_t t = 0; t < STEPS; t++) {
        uint32_t k = fa_train_dp_sample(key, t, M, q, idx);
        int has0 = 0;
        for (uint32_t j = 0; j < k; j++) {
            if (j)
                assert_true(idx[j] > idx[j - 1]); /* ascending, no repeats */
            assert_true(idx[j] < M);
            hits[idx[j]]++;
            has0 |= idx[j] == 0;
        }
        both += has0 && prev0; /* example 0 in two consecutive batches */
        prev0 = (uint32_t)has0;
        s += k;
        s2 += (double)k * k;
    }
    double mean = s / STEPS, var = s2 / STEPS - mean * mean;
    double want = q * M, want_var = M * q * (1 - q);
    print_message("Poisson batches: mean %.3f (want %.1f), variance %.2f (want %.2f)\n", mean, want,
                  var, want_var);
    assert_true(fabs(mean - want) < 5 * sqrt(want_var / STEPS));
    assert_true(fabs(var / want_var - 1) < 0.15); /* 5 se of a variance over 4000 samples */
    /* every example at rate q: the frequencies spread as Binomial(STEPS, q) */
    double chi2 = 0;
    for (uint32_t i = 0; i < M; i++) {
        double e = STEPS * q;
        chi2 += (hits[i] - e) * (hits[i] - e) / (e * (1 - q));
    }
    /* chi2 with ~M degrees of freedom: M +- 5 sqrt(2M) */
    print_message("per-example frequencies: chi2 %.1f over %d examples\n", chi2, M);
    assert_true(fabs(chi2 - M) < 5 * sqrt(2.0 * M));
    /* independent steps: P(in both t and t+1) = q^2 */
    assert_true(fabs(both / STEPS - q * q) < 5 * sqrt(q * q / STEPS));
    /* deterministic; q = 1 takes everything */
    uint32_t k1 = fa_train_dp_sample(key, 5, M, q, idx), first = idx[0];
    assert_int_equal(fa_train_dp_sample(key, 5, M, q, idx), k1);
    assert_int_equal(idx[0], first);
    assert_int_equal(fa_train_dp_sample(key, 5, M, 1.0, idx), M);
    assert_int_equal(idx[M - 1], M - 1);
    assert_int_equal(fa_train_dp_steps_per_pass(q), 34);
    assert_int_equal(fa_train_dp_steps_per_pass(1.0), 1);
    assert_int_equal(fa_train_dp_steps_per_pass(0.25), 4);
    free(idx);
    free(hits);
}

/* ---- the loop ---- */

static void dp_default(fa_train_dp *dp, uint8_t keyv)
{
    memset(dp, 0, sizeof(*dp));
    dp->sampling_rate = 0.1;
    dp->clip = 1.0;
    dp->noise_multiplier = 1.1;
    key_of(dp->key, keyv);
}

static void test_no_noise_no_clip_is_full_batch_sgd(void **state)
{
    fa_mlp *m = new_cpu(256); /* the batch of N = 600 goes in three pieces */
    size_t np = fa_mlp_layout_of(m)->n_params;
    float *global = malloc(np * 4), *a = malloc(np * 4), *b = malloc(np * 4);
    fa_train_opts o;
    fa_train_dp dp;
    fa_train_result res;
    fa_error err;

    fa_mlp_init_he(fa_mlp_layout_of(m), global, 4);
    dp_default(&dp, 3);
    dp.sampling_rate = 1.0;
    dp.clip = 1e30;
    dp.noise_multiplier = 0.0;
    fa_train_opts_default(&o);
    o.epochs = 0;
    o.steps = 5;
    o.dp = &dp;
    assert_int_equal(fa_train_local_round(m, global, &D, &o, a, &res, &err), 0);
    assert_int_equal(res.steps, 5);
    assert_int_equal(res.samples, 5 * N);
    assert_int_equal(res.clipped, 0);
    /* plain SGD with one batch of everything, in a network that takes it whole */
    fa_mlp *big = new_cpu(N);
    o.dp = NULL;
    o.batch_size = N;
    assert_int_equal(fa_train_local_round(big, global, &D, &o, b, &res, &err), 0);
    for (size_t i = 0; i < np; i++)
        if (fabs(a[i] - b[i]) > 1e-6 + 1e-4 * fabs(b[i]))
            fail_msg("parameter %zu: DP-SGD without noise or clipping %.9g, SGD %.9g", i,
                     (double)a[i], (double)b[i]);
    free(global);
    free(a);
    free(b);
    fa_mlp_del(m);
    fa_mlp_del(big);
}

/* Two ranks as threads, the hook summing their blocks (as an all-reduce)
 * and keeping the first step's sum. */
struct group {
    pthread_barrier_t barrier;
    float *slot[2];
    float *first_sum; /* the all-reduced gradient of step 0 */
    size_t np;
};

struct rank_arg {
    struct group *g;
    uint32_t rank, world;
    const fa_train_dp *dp;
    const float *global;
    float *out;
    int rc;
    fa_error err;
};

static int sum_hook(void *user, fa_mlp *m, float *grads, size_t n, int on_device, uint64_t step,
                    fa_error *err)
{
    struct rank_arg *a = user;
    struct group *g = a->g;
    if (a->world == 1) {
        if (step == 0)
            memcpy(g->first_sum, grads, n * 4);
        return 0;
    }
    memcpy(g->slot[a->rank], grads, n * 4);
    pthread_barrier_wait(&g->barrier);
    for (size_t i = 0; i < n; i++)
        grads[i] = g->slot[0][i] + g->slot[1][i];
    if (a->rank == 0 && step == 0)
        memcpy(g->first_sum, grads, n * 4);
    pthread_barrier_wait(&g->barrier);
    return 0;
}

static void *rank_main(void *p)
{
    struct rank_arg *a = p;
    fa_mlp *m = new_cpu(64);
    fa_train_opts o;
    fa_train_dp dp = *a->dp;

    fa_train_opts_default(&o);
    o.epochs = 0;
    o.steps = 1;
    o.rank = a->rank;
    o.world = a->world;
    o.allreduce = sum_hook;
    o.allreduce_user = a;
    o.dp = &dp;
    a->rc = fa_train_local_round(m, a->global, &D, &o, a->out, NULL, &a->err);
    fa_mlp_del(m);
    return NULL;
}

/* The all-reduced gradient of step 0 over `world` ranks. */
static void first_grad(uint32_t world, const fa_train_dp *dp, const float *global, size_t np,
                       float *sum)
{
    struct group g = {.np = np, .first_sum = sum};
    struct rank_arg args[2];
    pthread_t th[2];
    float *out[2] = {malloc(np * 4), malloc(np * 4)};

    pthread_barrier_init(&g.barrier, NULL, world);
    for (uint32_t r = 0; r < world; r++) {
        g.slot[r] = malloc(np * 4);
        args[r] = (struct rank_arg){
            .g = &g, .rank = r, .world = world, .dp = dp, .global = global, .out = out[r]};
        pthread_create(&th[r], NULL, rank_main, &args[r]);
    }
    for (uint32_t r = 0; r < world; r++) {
        pthread_join(th[r], NULL);
        if (args[r].rc != 0)
            fail_msg("rank %u: %s", r, args[r].err.msg);
        free(g.slot[r]);
    }
    pthread_barrier_destroy(&g.barrier);
    free(out[0]);
    free(out[1]);
}

static void test_noise_once_over_ranks(void **state)
{
    enum { KEYS = 8 };
    fa_mlp *m = new_cpu(64);
    size_t np = fa_mlp_layout_of(m)->n_params;
    float *global = malloc(np * 4), *clean1 = malloc(np * 4), *noisy1 = malloc(np * 4),
          *clean2 = malloc(np * 4), *noisy2 = malloc(np * 4);
    fa_train_dp dp, quiet;
    double v1 = 0, v2 = 0, dclean = 0;

    fa_mlp_init_he(fa_mlp_layout_of(m), global, 8);
    fa_mlp_del(m);
    for (uint8_t k = 0; k < KEYS; k++) {
        dp_default(&dp, (uint8_t)(20 + k));
        dp.noise_multiplier = 4.0; /* the noise dominates the clipped sum */
        quiet = dp;
        quiet.noise_multiplier = 0.0;
        /* The same key: the same Poisson batch with and without noise. */
        first_grad(1, &quiet, global, np, clean1);
        first_grad(1, &dp, global, np, noisy1);
        first_grad(2, &quiet, global, np, clean2);
        first_grad(2, &dp, global, np, noisy2);
        for (size_t i = 0; i < np; i++) {
            double e1 = noisy1[i] - clean1[i], e2 = noisy2[i] - clean2[i];
            v1 += e1 * e1;
            v2 += e2 * e2;
            dclean = fmax(dclean, fabs(clean2[i] - clean1[i]));
        }
    }
    v1 /= (double)np * KEYS;
    v2 /= (double)np * KEYS;
    /* want (sigma C / (q n))^2 = (4 / 60)^2 */
    const double want = pow(dp.noise_multiplier * dp.clip / (dp.sampling_rate * N), 2);
    print_message("noise variance of the summed gradient: 1 rank %.4e, 2 ranks %.4e, want %.4e "
                  "(%zu coordinates); clean sums differ by %.1e\n",
                  v1, v2, want, np * KEYS, dclean);
    /* 3040 values: relative standard error sqrt(2/3040) = 0.026; noise added
     * by both ranks would be 2.0 */
    assert_true(fabs(v1 / want - 1) < 0.13);
    assert_true(fabs(v2 / want - 1) < 0.13);
    assert_true(dclean < 1e-5); /* the ranks split the same batch */
    free(global);
    free(clean1);
    free(noisy1);
    free(clean2);
    free(noisy2);
}

struct saver {
    uint64_t at;
    fa_train_pos pos;
    float *params, *mom;
};

static int save_and_stop(void *user, fa_mlp *m, const fa_train_pos *pos, uint64_t total,
                         fa_error *err)
{
    struct saver *s = user;
    if (pos->step != s->at)
        return FA_TRAIN_GO_ON;
    s->pos = *pos;
    if (fa_mlp_get_params(m, s->params, err) != 0 || fa_mlp_get_momentum(m, s->mom, err) != 0)
        return FA_ERR_STATE;
    return FA_TRAIN_STOP;
}

static void test_resume_same_key_and_learning(void **state)
{
    fa_mlp *m = new_cpu(32); /* batches of ~60 in pieces of 32 */
    size_t np = fa_mlp_layout_of(m)->n_params;
    float *global = malloc(np * 4), *want = malloc(np * 4), *got = malloc(np * 4);
    struct saver sv = {.at = 13, .params = malloc(np * 4), .mom = malloc(np * 4)};
    fa_train_opts o;
    fa_train_dp dp;
    fa_train_result rw, rg;
    fa_mlp_eval before, after;
    fa_error err;

    fa_mlp_init_he(fa_mlp_layout_of(m), global, 6);
    assert_int_equal(fa_mlp_set_params(m, global, &err), 0);
    assert_int_equal(fa_mlp_evaluate(m, &D, &before, &err), 0);
    dp_default(&dp, 7);
    fa_train_opts_default(&o);
    o.epochs = 3; /* 3 passes of ceil(1/q) = 10 steps */
    o.sgd.lr = 0.1f;
    o.dp = &dp;
    assert_int_equal(fa_train_local_round(m, global, &D, &o, want, &rw, &err), 0);
    assert_int_equal(rw.steps, 30);
    assert_true(rw.samples > 30 * 60 * 0.8 && rw.samples < 30 * 60 * 1.2);
    assert_true(rw.clipped > 0);
    assert_int_equal(fa_mlp_evaluate(m, &D, &after, &err), 0);
    print_message("DP-SGD (sigma 1.1, q 0.1, C 1): accuracy %.3f -> %.3f, %llu of %llu example "
                  "gradients clipped\n",
                  before.accuracy, after.accuracy, (unsigned long long)rw.clipped,
                  (unsigned long long)rw.samples);
    assert_true(after.accuracy > before.accuracy + 0.1);

    /* stopped at 13 and resumed in another network with the same key: bit for bit */
    fa_mlp *a = new_cpu(32), *b = new_cpu(32);
    o.boundary = save_and_stop;
    o.boundary_user = &sv;
    assert_int_equal(fa_train_local_round(a, global, &D, &o, got, &rg, &err), FA_ERR_CANCELLED);
    assert_int_equal(fa_mlp_set_params(b, sv.params, &err), 0);
    assert_int_equal(fa_mlp_set_momentum(b, sv.mom, &err), 0);
    o.boundary = NULL;
    o.resume = &sv.pos;
    assert_int_equal(fa_train_local_round(b, global, &D, &o, got, &rg, &err), 0);
    assert_memory_equal(want, got, np * 4);
    assert_int_equal(rg.samples, rw.samples);
    assert_true(rg.mean_loss == rw.mean_loss);

    /* another key: another run (other batches, other noise) */
    o.resume = NULL;
    key_of(dp.key, 8);
    assert_int_equal(fa_train_local_round(m, global, &D, &o, got, &rg, &err), 0);
    assert_memory_not_equal(want, got, np * 4);

    /* refusals */
    fa_train_dp bad = dp;
    o.dp = &bad;
    bad.sampling_rate = 0.0;
    assert_int_equal(fa_train_run(m, &D, &o, NULL, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "sampling rate"));
    bad = dp;
    bad.sampling_rate = 1.5;
    assert_int_equal(fa_train_run(m, &D, &o, NULL, &err), FA_ERR_INVAL);
    bad = dp;
    bad.clip = -1;
    assert_int_equal(fa_train_run(m, &D, &o, NULL, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "clip"));
    bad = dp;
    bad.noise_multiplier = INFINITY;
    assert_int_equal(fa_train_run(m, &D, &o, NULL, &err), FA_ERR_INVAL);
    bad = dp;
    bad.noise_rank = 1;
    assert_int_equal(fa_train_run(m, &D, &o, NULL, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "noise rank 1 of 1"));
    free(sv.params);
    free(sv.mom);
    free(global);
    free(want);
    free(got);
    fa_mlp_del(m);
    fa_mlp_del(a);
    fa_mlp_del(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ghost_norms_and_clipped_sum),
        cmocka_unit_test(test_noise_stream),
        cmocka_unit_test(test_poisson_sampling),
        cmocka_unit_test(test_no_noise_no_clip_is_full_batch_sgd),
        cmocka_unit_test(test_noise_once_over_ranks),
        cmocka_unit_test(test_resume_same_key_and_learning),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
