/* Unit tests of worker/local_round with ranks simulated in-process (fa_comm
 * LOCAL backend, one thread per rank): the same global batch on 1, 2 and 3
 * ranks gives the same delta; disagreements between ranks (another shard, no
 * global weights on the leader) fail on every rank instead of hanging; a
 * diverging run returns an error instead of a non-finite delta; options come
 * from the config.  The multi-process version is it_worker_mpi.sh. */
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

#include "config.pb-c.h"
#include "model/mlp.h"
#include "model/rng.h"
#include "worker/local_round.h"

#define MAXR 3
#define N_EX 300
#define DIM 30

static float xs[N_EX * DIM];
static uint8_t ys[N_EX];
static fa_mlp_config mc;
static fa_mlp_layout layout;

static int setup(void **state)
{
    const uint32_t hidden[1] = {16};
    fa_rng r;
    fa_rng_seed(&r, 4, 0);
    for (size_t i = 0; i < N_EX * DIM; i++)
        xs[i] = (float)fa_rng_normal(&r);
    for (size_t i = 0; i < N_EX; i++) /* a learnable rule: sign pattern of 2 features */
        ys[i] = (uint8_t)((xs[i * DIM] > 0) * 2 + (xs[i * DIM + 1] > 0));
    if (fa_mlp_config_make(&mc, DIM, hidden, 1, 4, NULL) != 0 ||
        fa_mlp_layout_init(&layout, &mc, NULL) != 0)
        return -1;
    return 0;
}

typedef struct job {
    fa_comm *comm;
    int kind;           /* compression */
    uint32_t n_ex;      /* this rank's shard size */
    int null_global;    /* rank 0 passes no global weights */
    float lr;
    const float *global;
    float *delta;       /* rank 0's output */
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
    fa_dataset d = {.n = j->n_ex, .dim = DIM, .x = xs, .y = ys};
    int rank = fa_comm_rank(j->comm);

    fa_mlp_opts_default(&mo);
    mo.backend = FA_MLP_CPU;
    mo.cpu_threads = 1;
    j->rc = fa_mlp_new(&m, &mc, &mo, &j->err);
    if (j->rc != 0)
        return NULL;
    fa_compress_config_default(&cc);
    cc.kind = j->kind;
    cc.powersgd_start_step = 2;
    cc.min_compress_numel = 64; /* fc1 (16 x 30) is compressed */
    j->rc = fa_local_round_new(&lr, j->comm, m, &cc, &j->err);
    if (j->rc == 0) {
        fa_train_opts_default(&to);
        to.steps = 10;
        to.batch_size = 48;
        to.sgd.lr = j->lr;
        to.seed = 9;
        j->rc = fa_local_round_run(lr, rank == 0 && !j->null_global ? j->global : NULL, &d, &to,
                                   rank == 0 ? j->delta : NULL, &j->res, &j->err);
    }
    fa_local_round_del(lr);
    fa_mlp_del(m);
    return NULL;
}

/* Runs R ranks; shard sizes per rank in n_ex (NULL: all N_EX). */
static void run_ranks(job *jobs, int R, int kind, const uint32_t *n_ex, int null_global, float lr,
                      const float *global, float *delta)
{
    fa_comm *c[MAXR];
    pthread_t th[MAXR];
    assert_int_equal(fa_comm_local_group_new(c, R, NULL), 0);
    for (int r = 0; r < R; r++) {
        memset(&jobs[r], 0, sizeof(jobs[r]));
        jobs[r].comm = c[r];
        jobs[r].kind = kind;
        jobs[r].n_ex = n_ex ? n_ex[r] : N_EX;
        jobs[r].null_global = null_global;
        jobs[r].lr = lr;
        jobs[r].global = global;
        jobs[r].delta = delta;
        assert_int_equal(pthread_create(&th[r], NULL, rank_main, &jobs[r]), 0);
    }
    for (int r = 0; r < R; r++)
        pthread_join(th[r], NULL);
    for (int r = 0; r < R; r++)
        fa_comm_del(c[r]);
}

static void test_same_delta_on_1_2_3_ranks(void **state)
{
    float *global = malloc(layout.n_params * sizeof(float));
    float *d1 = malloc(layout.n_params * sizeof(float)), *dr = malloc(layout.n_params * sizeof(float));
    job jobs[MAXR];
    double scale = 0, diff = 0;

    fa_mlp_init_he(&layout, global, 2);
    run_ranks(jobs, 1, FA_COMPRESS_NONE, NULL, 0, 0.1f, global, d1);
    assert_int_equal(jobs[0].rc, 0);
    assert_int_equal(jobs[0].res.steps, 10);
    assert_int_equal(jobs[0].res.num_examples, N_EX); /* 10 x 48 > 300 */
    assert_int_equal(jobs[0].res.payload_bytes, 10 * layout.n_params * 4);
    for (size_t i = 0; i < layout.n_params; i++)
        scale = fmax(scale, fabs(d1[i]));
    assert_true(scale > 1e-3); /* it trained */

    for (int R = 2; R <= 3; R++) {
        run_ranks(jobs, R, FA_COMPRESS_NONE, NULL, 0, 0.1f, global, dr);
        for (int r = 0; r < R; r++) {
            if (jobs[r].rc != 0)
                fail_msg("R=%d rank %d: %s", R, r, jobs[r].err.msg);
            /* all ranks report the same loss */
            assert_true(jobs[r].res.mean_loss == jobs[0].res.mean_loss);
        }
        diff = 0;
        for (size_t i = 0; i < layout.n_params; i++)
            diff = fmax(diff, fabs((double)d1[i] - dr[i]));
        if (diff > 1e-5 * scale)
            fail_msg("%d ranks: delta differs from 1 rank by %g (scale %g)", R, diff, scale);
    }

    /* compressed: runs, different but close, and sends less */
    run_ranks(jobs, 2, FA_COMPRESS_POWERSGD, NULL, 0, 0.1f, global, dr);
    assert_int_equal(jobs[0].rc, 0);
    assert_true(jobs[0].res.payload_bytes < 10 * layout.n_params * 4);
    free(global);
    free(d1);
    free(dr);
}

static void test_ranks_disagree(void **state)
{
    float *global = malloc(layout.n_params * sizeof(float));
    float *delta = malloc(layout.n_params * sizeof(float));
    const uint32_t sizes[3] = {N_EX, N_EX - 1, N_EX};
    job jobs[MAXR];

    fa_mlp_init_he(&layout, global, 2);
    for (size_t i = 0; i < layout.n_params; i++)
        delta[i] = 42.0f;
    /* rank 1 holds another shard: every rank fails, nobody hangs */
    run_ranks(jobs, 3, FA_COMPRESS_NONE, sizes, 0, 0.1f, global, delta);
    assert_int_equal(jobs[1].rc, FA_ERR_INVAL);
    assert_non_null(strstr(jobs[1].err.msg, "rank 1 has 299 examples"));
    assert_int_equal(jobs[0].rc, FA_ERR_STATE);
    assert_non_null(strstr(jobs[0].err.msg, "another rank"));
    assert_int_equal(jobs[2].rc, FA_ERR_STATE);
    assert_true(delta[0] == 42.0f); /* untouched */

    /* the leader has no global weights */
    run_ranks(jobs, 2, FA_COMPRESS_NONE, NULL, 1, 0.1f, global, delta);
    assert_int_equal(jobs[0].rc, FA_ERR_INVAL);
    assert_int_equal(jobs[1].rc, FA_ERR_STATE);
    free(global);
    free(delta);
}

static void test_divergence_is_an_error(void **state)
{
    float *global = malloc(layout.n_params * sizeof(float));
    float *delta = malloc(layout.n_params * sizeof(float));
    job jobs[MAXR];

    fa_mlp_init_he(&layout, global, 2);
    for (size_t i = 0; i < layout.n_params; i++)
        delta[i] = 42.0f;
    run_ranks(jobs, 2, FA_COMPRESS_NONE, NULL, 0, 1e30f, global, delta);
    for (int r = 0; r < 2; r++) {
        assert_int_equal(jobs[r].rc, FA_ERR_RANGE);
        assert_non_null(strstr(jobs[r].err.msg, "not finite"));
    }
    assert_true(delta[0] == 42.0f);
    free(global);
    free(delta);
}

static void test_train_opts_from_proto(void **state)
{
    Fedagg__BuiltinTrainer pb = FEDAGG__BUILTIN_TRAINER__INIT;
    fa_train_opts o;
    fa_error err;

    assert_int_equal(fa_local_round_train_opts_from_proto(&o, &pb, &err), 0);
    assert_int_equal(o.epochs, 1);
    assert_int_equal(o.steps, 0);
    assert_int_equal(o.batch_size, 64);
    assert_true(fabsf(o.sgd.lr - 0.05f) < 1e-7f);
    assert_true(fabsf(o.sgd.momentum - 0.9f) < 1e-7f);
    assert_int_equal(o.seed, 1);
    pb.batch_size = 0;
    assert_int_equal(fa_local_round_train_opts_from_proto(&o, &pb, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "trainer.builtin.batch_size"));
    pb.batch_size = 32;
    pb.momentum = 1.0;
    assert_int_equal(fa_local_round_train_opts_from_proto(&o, &pb, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "momentum"));
    pb.momentum = 0.5;
    pb.learning_rate = -1;
    assert_int_equal(fa_local_round_train_opts_from_proto(&o, &pb, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "learning_rate"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_delta_on_1_2_3_ranks),
        cmocka_unit_test(test_ranks_disagree),
        cmocka_unit_test(test_divergence_is_an_error),
        cmocka_unit_test(test_train_opts_from_proto),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
