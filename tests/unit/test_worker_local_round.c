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
#include <unistd.h>

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
static char ckdir[] = "/tmp/fa_test_local_round.XXXXXX"; /* the saved rounds */
static float g_a[4096], g_b[4096]; /* the global models of rounds 1 and 2 (preemption) */

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
        fa_mlp_layout_init(&layout, &mc, NULL) != 0 || layout.n_params > 4096 || !mkdtemp(ckdir))
        return -1;
    fa_mlp_init_he(&layout, g_a, 21);
    fa_mlp_init_he(&layout, g_b, 22);
    return 0;
}

static int teardown(void **state)
{
    char path[300];
    for (int r = 0; r < MAXR; r++) {
        snprintf(path, sizeof(path), "%s/local-round.%d", ckdir, r);
        unlink(path);
    }
    rmdir(ckdir);
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

/* ---------------------------------------------------------------------- */
/* Preemption: a round stopped at step k on one rank, saved, the "process"  */
/* gone (new network, new compressor), restarted: the same delta, bit for   */
/* bit, as a round never stopped.                                            */
/* ---------------------------------------------------------------------- */

#define STEPS 10

typedef struct pjob {
    fa_comm *comm;
    int kind;
    int stop_rank;      /* the rank whose stop flag is raised; -1: none */
    uint64_t stop_at;   /* after this many steps of round 2 */
    uint64_t keep_at;   /* periodic mode: the file as it was at this step is kept, as if
                           the process had been SIGKILLed there; UINT64_MAX: none */
    double every_s;     /* periodic saves (on a clock that ticks 1 s per reading) */
    int unwritable;     /* the file's directory does not exist */
    uint64_t version_b; /* round 2's model version on the restart (2: the same) */
    float *delta;       /* rank 0: round 2's delta */
    volatile sig_atomic_t stop;
    double clock;
    char path[256];
    int rc, rc_first;
    fa_error err, err_first;
    fa_local_round_result res, res_first;
} pjob;

static double tick(void *user)
{
    pjob *j = user;
    return j->clock += 1.0;
}

static int copy_file(const char *from, const char *to)
{
    FILE *a = fopen(from, "rb"), *b = a ? fopen(to, "wb") : NULL;
    char buf[65536];
    size_t n;
    int ok = a && b;
    while (ok && (n = fread(buf, 1, sizeof(buf), a)) > 0)
        ok = fwrite(buf, 1, n, b) == n;
    if (a)
        fclose(a);
    if (b && fclose(b) != 0)
        ok = 0;
    return ok ? 0 : -1;
}

static void on_boundary(void *user, uint64_t step)
{
    pjob *j = user;
    char kept[300];
    if (step == j->stop_at && fa_comm_rank(j->comm) == j->stop_rank)
        j->stop = 1;
    if (step == j->keep_at) {
        snprintf(kept, sizeof(kept), "%s.kept", j->path);
        if (copy_file(j->path, kept) != 0)
            j->rc = -1;
    }
}

static int new_worker(pjob *j, fa_mlp **m, fa_local_round **lr)
{
    fa_mlp_opts mo;
    fa_compress_config cc;
    fa_mlp_opts_default(&mo);
    mo.backend = FA_MLP_CPU;
    mo.cpu_threads = 1;
    fa_compress_config_default(&cc);
    cc.kind = j->kind;
    cc.powersgd_start_step = 4; /* compressed from the middle of round 1 on */
    cc.min_compress_numel = 64;
    if ((j->rc = fa_mlp_new(m, &mc, &mo, &j->err)) != 0)
        return j->rc;
    return j->rc = fa_local_round_new(lr, j->comm, *m, &cc, &j->err);
}

static int run_round(pjob *j, fa_local_round *lr, uint64_t round, uint64_t version, int hooks,
                     float *delta, fa_local_round_result *res)
{
    fa_dataset d = {.n = N_EX, .dim = DIM, .x = xs, .y = ys};
    int rank = fa_comm_rank(j->comm);
    fa_local_round_ckpt ck = {
        .path = j->path, .stop = &j->stop, .round = round, .version = version};
    fa_train_opts to;

    fa_train_opts_default(&to);
    to.steps = STEPS;
    to.batch_size = 48;
    to.sgd.lr = 0.1f;
    to.sgd.weight_decay = 1e-4f;
    to.seed = 9 + round;
    memset(ck.model_sha256, (int)version, 32);
    if (hooks) {
        ck.on_boundary = on_boundary;
        ck.on_boundary_user = j;
        ck.every_s = j->every_s;
        ck.now = tick;
        ck.now_user = j;
    }
    return fa_local_round_run_resumable(lr, rank == 0 ? (round == 1 ? g_a : g_b) : NULL, &d, &to,
                                        &ck, rank == 0 ? delta : NULL, res, &j->err);
}

static void *preempt_rank(void *p)
{
    pjob *j = p;
    fa_mlp *m = NULL;
    fa_local_round *lr = NULL;
    float *scratch = malloc(layout.n_params * sizeof(float));

    snprintf(j->path, sizeof(j->path), "%s%s/local-round.%d", ckdir,
             j->unwritable ? "/missing" : "", fa_comm_rank(j->comm));
    if (new_worker(j, &m, &lr) != 0)
        goto out;
    /* Round 1 leaves state in the compressor (error memory, PowerSGD's Q,
     * the step count) that round 2 depends on. */
    if ((j->rc = run_round(j, lr, 1, 1, 0, scratch, &j->res)) != 0)
        goto out;
    j->rc_first = run_round(j, lr, 2, 2, 1, j->delta, &j->res_first);
    j->err_first = j->err;
    if (j->rc_first == 0 && j->keep_at == UINT64_MAX)
        goto out; /* never stopped */
    if (j->rc_first != 0 && j->rc_first != FA_ERR_CANCELLED) {
        j->rc = j->rc_first;
        goto out;
    }
    if (j->keep_at != UINT64_MAX) { /* "SIGKILLed" at keep_at: its last periodic save */
        char kept[300];
        snprintf(kept, sizeof(kept), "%s.kept", j->path);
        if (rename(kept, j->path) != 0) {
            j->rc = -1;
            goto out;
        }
    }
    /* The restarted worker: nothing survives but the file. */
    fa_local_round_del(lr);
    fa_mlp_del(m);
    lr = NULL;
    m = NULL;
    j->stop = 0;
    if (new_worker(j, &m, &lr) != 0)
        goto out;
    j->rc = run_round(j, lr, 2, j->version_b, 0, j->delta, &j->res);
out:
    fa_local_round_del(lr);
    fa_mlp_del(m);
    free(scratch);
    return NULL;
}

static void run_preempt(pjob *jobs, int R, int kind, int stop_rank, uint64_t stop_at,
                        uint64_t keep_at, double every_s, uint64_t version_b, float *delta)
{
    fa_comm *c[MAXR];
    pthread_t th[MAXR];
    assert_int_equal(fa_comm_local_group_new(c, R, NULL), 0);
    for (int r = 0; r < R; r++) {
        memset(&jobs[r], 0, sizeof(jobs[r]));
        jobs[r].comm = c[r];
        jobs[r].kind = kind;
        jobs[r].stop_rank = stop_rank;
        jobs[r].stop_at = stop_at;
        jobs[r].keep_at = keep_at;
        jobs[r].every_s = every_s;
        jobs[r].version_b = version_b;
        jobs[r].delta = delta;
        assert_int_equal(pthread_create(&th[r], NULL, preempt_rank, &jobs[r]), 0);
    }
    for (int r = 0; r < R; r++)
        pthread_join(th[r], NULL);
    for (int r = 0; r < R; r++) {
        fa_comm_del(c[r]);
        if (jobs[r].rc != 0)
            fail_msg("rank %d of %d: %d %s", r, R, jobs[r].rc, jobs[r].err.msg);
    }
}

static int file_exists(const char *path)
{
    return access(path, F_OK) == 0;
}

/* The save fails (no such directory): the stop still stops, says the round
 * was not saved, and the restart trains it afresh; a round whose periodic or
 * final save fails completes all the same. */
static void test_preempt_save_fails(void **state)
{
    float *want = malloc(layout.n_params * sizeof(float));
    float *got = malloc(layout.n_params * sizeof(float));
    pjob jobs[1];
    fa_comm *c;
    pthread_t th;

    run_preempt(jobs, 1, FA_COMPRESS_NONE, -1, 0, UINT64_MAX, 0, 2, want);
    assert_int_equal(fa_comm_local_group_new(&c, 1, NULL), 0);
    memset(&jobs[0], 0, sizeof(jobs[0]));
    jobs[0].comm = c;
    jobs[0].kind = FA_COMPRESS_NONE;
    jobs[0].stop_rank = 0;
    jobs[0].stop_at = 3;
    jobs[0].keep_at = UINT64_MAX;
    jobs[0].every_s = 2.0;
    jobs[0].version_b = 2;
    jobs[0].delta = got;
    jobs[0].unwritable = 1;
    assert_int_equal(pthread_create(&th, NULL, preempt_rank, &jobs[0]), 0);
    pthread_join(th, NULL);
    fa_comm_del(c);
    assert_int_equal(jobs[0].rc_first, FA_ERR_CANCELLED);
    assert_non_null(strstr(jobs[0].err_first.msg, "stopped at step 3 but could not be saved"));
    assert_int_equal(jobs[0].rc, 0);
    assert_int_equal(jobs[0].res.resumed, 0);
    assert_int_equal(jobs[0].res.saves, 0);
    assert_memory_equal(want, got, layout.n_params * sizeof(float));
    free(want);
    free(got);
}

static void test_preempt_resumes_bit_for_bit(void **state)
{
    const int kinds[] = {FA_COMPRESS_NONE, FA_COMPRESS_POWERSGD, FA_COMPRESS_TOPK,
                         FA_COMPRESS_QSGD8};
    const uint64_t ks[] = {0, 1, 5, STEPS - 1, STEPS};
    float *want = malloc(layout.n_params * sizeof(float));
    float *got = malloc(layout.n_params * sizeof(float));
    pjob jobs[MAXR];
    int runs = 0;

    for (int R = 1; R <= 2; R++)
        for (size_t ki = 0; ki < sizeof(kinds) / sizeof(kinds[0]); ki++) {
            if (R == 1 && kinds[ki] != FA_COMPRESS_NONE && kinds[ki] != FA_COMPRESS_POWERSGD)
                continue;
            run_preempt(jobs, R, kinds[ki], -1, 0, UINT64_MAX, 0, 2, want);
            for (size_t i = 0; i < sizeof(ks) / sizeof(ks[0]); i++) {
                /* the last rank is told to stop: every rank stops with it */
                memset(got, 0, layout.n_params * sizeof(float));
                run_preempt(jobs, R, kinds[ki], R - 1, ks[i], UINT64_MAX, 0, 2, got);
                for (int r = 0; r < R; r++) {
                    assert_int_equal(jobs[r].rc_first, FA_ERR_CANCELLED);
                    assert_non_null(strstr(jobs[r].err_first.msg, "is saved in"));
                    assert_int_equal(jobs[r].res.resumed, 1);
                    assert_int_equal(jobs[r].res.resumed_step, ks[i]);
                    assert_int_equal(jobs[r].res.steps, STEPS);
                    assert_true(file_exists(jobs[r].path)); /* kept, finished */
                }
                if (memcmp(want, got, layout.n_params * sizeof(float)) != 0)
                    fail_msg("%d ranks, %s, stopped at step %llu: the delta differs", R,
                             fa_compress_kind_name(kinds[ki]), (unsigned long long)ks[i]);
                assert_int_equal(jobs[0].res.num_examples, N_EX);
                runs++;
            }
        }
    print_message("%d interrupted rounds (1 and 2 ranks; none, powersgd, topk, qsgd8; stopped "
                  "at 0, 1, 5, 9, 10 of 10 steps): deltas identical bit for bit\n",
                  runs);
    free(want);
    free(got);
}

static void test_periodic_checkpoint_after_a_kill(void **state)
{
    float *want = malloc(layout.n_params * sizeof(float));
    float *got = malloc(layout.n_params * sizeof(float));
    pjob jobs[MAXR];

    run_preempt(jobs, 2, FA_COMPRESS_POWERSGD, -1, 0, UINT64_MAX, 0, 2, want);
    /* saved every 3 "seconds" (a few steps); killed after step 7: the
     * restart resumes from the last save before it */
    run_preempt(jobs, 2, FA_COMPRESS_POWERSGD, -1, 0, 7, 3.0, 2, got);
    for (int r = 0; r < 2; r++) {
        assert_int_equal(jobs[r].rc_first, 0);
        assert_true(jobs[r].res_first.saves >= 2);
        assert_int_equal(jobs[r].res.resumed, 1);
        assert_true(jobs[r].res.resumed_step > 0 && jobs[r].res.resumed_step <= 7);
    }
    print_message("periodic saves: %u in the round; resumed at step %llu after a kill at 7\n",
                  jobs[0].res_first.saves, (unsigned long long)jobs[0].res.resumed_step);
    assert_memory_equal(want, got, layout.n_params * sizeof(float));
    free(want);
    free(got);
}

static void test_preempt_refused_for_another_model(void **state)
{
    float *want = malloc(layout.n_params * sizeof(float));
    float *got = malloc(layout.n_params * sizeof(float));
    pjob jobs[MAXR];

    /* Restarted against model version 3 (same weights, another version):
     * the saved round of version 2 is refused and removed, and the round
     * trained afresh (so the compressor starts from nothing: the delta is
     * that of a fresh worker's round 2, not the uninterrupted one). */
    run_preempt(jobs, 1, FA_COMPRESS_NONE, 0, 4, UINT64_MAX, 0, 3, got);
    assert_int_equal(jobs[0].rc_first, FA_ERR_CANCELLED);
    assert_int_equal(jobs[0].res.resumed, 0);
    assert_int_equal(jobs[0].res.saves, 1); /* the finished round, of version 3 */
    /* with NONE there is no compressor state: afresh is the plain round */
    run_preempt(jobs, 1, FA_COMPRESS_NONE, -1, 0, UINT64_MAX, 0, 2, want);
    assert_memory_equal(want, got, layout.n_params * sizeof(float));
    free(want);
    free(got);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_delta_on_1_2_3_ranks),
        cmocka_unit_test(test_ranks_disagree),
        cmocka_unit_test(test_divergence_is_an_error),
        cmocka_unit_test(test_train_opts_from_proto),
        cmocka_unit_test(test_preempt_resumes_bit_for_bit),
        cmocka_unit_test(test_periodic_checkpoint_after_a_kill),
        cmocka_unit_test(test_preempt_refused_for_another_model),
        cmocka_unit_test(test_preempt_save_fails),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
