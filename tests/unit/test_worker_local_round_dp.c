/* Unit tests of DP-SGD through worker/local_round, ranks simulated
 * in-process (fa_comm LOCAL, one thread per rank, the code path MPI ranks
 * take): rank 0's key reaches every rank (the same Poisson batches: without
 * noise 1 and 2 ranks give the same update), the noise is added once for
 * the region (the update's noise variance over 2 ranks is that of 1 rank,
 * (lr sigma C / q n)^2 for one step, not twice), compression over several
 * ranks is refused on every rank, and ranks that disagree on DP-SGD fail
 * together.  The same noise measurement over real MPI ranks (1, 2 and 4) is
 * `fa-worker-mpi-check dp` in it_worker_mpi.sh. */
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
#include "worker/local_round.h"

#define MAXR 2
#define N_EX 400
#define DIM 20

static float xs[N_EX * DIM];
static uint8_t ys[N_EX];
static fa_mlp_config mc;
static fa_mlp_layout layout;
static float *global;

static int setup(void **state)
{
    const uint32_t hidden[1] = {64};
    fa_rng r;
    fa_rng_seed(&r, 5, 0);
    for (size_t i = 0; i < N_EX * DIM; i++)
        xs[i] = (float)fa_rng_normal(&r);
    for (size_t i = 0; i < N_EX; i++)
        ys[i] = (uint8_t)((xs[i * DIM] > 0) * 2 + (xs[i * DIM + 1] > 0));
    if (fa_mlp_config_make(&mc, DIM, hidden, 1, 4, NULL) != 0 ||
        fa_mlp_layout_init(&layout, &mc, NULL) != 0)
        return -1;
    global = malloc(layout.n_params * sizeof(float));
    fa_mlp_init_he(&layout, global, 3);
    return 0;
}

static int teardown(void **state)
{
    free(global);
    return 0;
}

typedef struct job {
    fa_comm *comm;
    int kind;
    double sigma;
    double q; /* this rank's sampling rate (a disagreement test) */
    uint8_t keyv;
    float *delta;
    int rc;
    fa_error err;
    fa_local_round_result res;
} job;

static void *rank_main(void *p)
{
    job *j = p;
    fa_mlp_opts mo;
    fa_mlp *m = NULL;
    fa_local_round *lr = NULL;
    fa_compress_config cc;
    fa_train_opts to;
    fa_train_dp dp;
    fa_dataset d = {.n = N_EX, .dim = DIM, .x = xs, .y = ys};
    int rank = fa_comm_rank(j->comm);

    fa_mlp_opts_default(&mo);
    mo.backend = FA_MLP_CPU;
    mo.cpu_threads = 1;
    j->rc = fa_mlp_new(&m, &mc, &mo, &j->err);
    if (j->rc != 0)
        return NULL;
    fa_compress_config_default(&cc);
    cc.kind = j->kind;
    j->rc = fa_local_round_new(&lr, j->comm, m, &cc, &j->err);
    if (j->rc == 0) {
        fa_train_opts_default(&to);
        to.steps = 1;
        to.sgd.lr = 1.0f;
        to.sgd.momentum = 0.0f;
        memset(&dp, 0, sizeof(dp));
        dp.sampling_rate = j->q;
        dp.clip = 0.5;
        dp.noise_multiplier = j->sigma;
        /* only rank 0's key counts: the others' are overwritten */
        for (int i = 0; i < FA_TRAIN_DP_KEY_BYTES; i++)
            dp.key[i] = rank == 0 ? (uint8_t)(j->keyv + i) : (uint8_t)(0xa5 ^ rank);
        to.dp = &dp;
        j->rc = fa_local_round_run(lr, rank == 0 ? global : NULL, &d, &to,
                                   rank == 0 ? j->delta : NULL, &j->res, &j->err);
    }
    fa_local_round_del(lr);
    fa_mlp_del(m);
    return NULL;
}

static void run_ranks(job *jobs, int R, int kind, double sigma, uint8_t keyv, float *delta,
                      const double *q)
{
    fa_comm *c[MAXR];
    pthread_t th[MAXR];
    assert_int_equal(fa_comm_local_group_new(c, R, NULL), 0);
    for (int r = 0; r < R; r++) {
        memset(&jobs[r], 0, sizeof(jobs[r]));
        jobs[r] = (job){.comm = c[r],
                        .kind = kind,
                        .sigma = sigma,
                        .q = q ? q[r] : 0.1,
                        .keyv = keyv,
                        .delta = delta};
        assert_int_equal(pthread_create(&th[r], NULL, rank_main, &jobs[r]), 0);
    }
    for (int r = 0; r < R; r++)
        pthread_join(th[r], NULL);
    for (int r = 0; r < R; r++)
        fa_comm_del(c[r]);
}

static void run_ok(int R, double sigma, uint8_t keyv, float *delta)
{
    job jobs[MAXR];
    run_ranks(jobs, R, FA_COMPRESS_NONE, sigma, keyv, delta, NULL);
    for (int r = 0; r < R; r++)
        if (jobs[r].rc != 0)
            fail_msg("%d ranks, rank %d: %s", R, r, jobs[r].err.msg);
}

static void test_noise_once_for_the_region(void **state)
{
    enum { KEYS = 6 };
    const size_t np = layout.n_params;
    float *clean1 = malloc(np * 4), *noisy1 = malloc(np * 4), *clean2 = malloc(np * 4),
          *noisy2 = malloc(np * 4);
    const double sigma = 3.0;
    double v1 = 0, v2 = 0, dclean = 0, cnorm = 0;

    for (uint8_t k = 0; k < KEYS; k++) {
        run_ok(1, 0.0, (uint8_t)(40 + k), clean1);
        run_ok(1, sigma, (uint8_t)(40 + k), noisy1);
        run_ok(2, 0.0, (uint8_t)(40 + k), clean2);
        run_ok(2, sigma, (uint8_t)(40 + k), noisy2);
        for (size_t i = 0; i < np; i++) {
            double e1 = noisy1[i] - clean1[i], e2 = noisy2[i] - clean2[i];
            v1 += e1 * e1;
            v2 += e2 * e2;
            dclean = fmax(dclean, fabs(clean2[i] - clean1[i]));
            cnorm = fmax(cnorm, fabs(clean1[i]));
        }
    }
    v1 /= (double)np * KEYS;
    v2 /= (double)np * KEYS;
    /* one step of lr 1: delta = -(clipped sum + noise) / (q n) */
    const double want = pow(sigma * 0.5 / (0.1 * N_EX), 2);
    print_message("update noise variance: 1 rank %.4e, 2 ranks %.4e, want %.4e (%zu values); "
                  "noise-free updates of 1 and 2 ranks differ by %.1e (max %.1e)\n",
                  v1, v2, want, np * KEYS, dclean, cnorm);
    /* relative standard error sqrt(2 / 8736) = 0.015; twice the noise: 2.0 */
    assert_true(fabs(v1 / want - 1) < 0.08);
    assert_true(fabs(v2 / want - 1) < 0.08);
    assert_true(dclean < 1e-5 && cnorm > 1e-3); /* every rank had rank 0's key */
    free(clean1);
    free(noisy1);
    free(clean2);
    free(noisy2);
}

static void test_refusals_on_every_rank(void **state)
{
    const size_t np = layout.n_params;
    float *delta = malloc(np * 4);
    job jobs[MAXR];
    const double q[2] = {0.1, 0.2};

    run_ranks(jobs, 2, FA_COMPRESS_TOPK, 1.0, 1, delta, NULL);
    for (int r = 0; r < 2; r++) {
        assert_int_equal(jobs[r].rc, FA_ERR_INVAL);
        if (r == 0)
            assert_non_null(strstr(jobs[r].err.msg, "needs compression NONE"));
    }
    /* one rank: compression is post-processing of the noisy gradient */
    run_ranks(jobs, 1, FA_COMPRESS_TOPK, 1.0, 1, delta, NULL);
    assert_int_equal(jobs[0].rc, 0);
    assert_true(jobs[0].res.samples > 0 && jobs[0].res.steps == 1);
    /* ranks with another sampling rate */
    run_ranks(jobs, 2, FA_COMPRESS_NONE, 1.0, 1, delta, q);
    for (int r = 0; r < 2; r++)
        assert_int_equal(jobs[r].rc, r == 1 ? FA_ERR_INVAL : FA_ERR_STATE);
    assert_non_null(strstr(jobs[1].err.msg, "disagree on DP-SGD"));
    free(delta);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_noise_once_for_the_region),
        cmocka_unit_test(test_refusals_on_every_rank),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
