/* Unit tests of model/train: learning on a synthetic problem, the local
 * round's delta, steps vs epochs, the learning-rate schedule, the rank
 * contract of the all-reduce hook: 1, 2 and 4 "ranks" (threads summing their
 * gradient blocks through the hook) follow the same trajectory; and
 * preemption: a run stopped at step k (0, mid-epoch, at epoch ends, the last
 * step, after it), its parameters, momentum and position copied into a new
 * network and resumed, gives the same delta, results and reports, bit for
 * bit. */
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

/* Three Gaussian blobs in 10 dimensions. */
#define DIM 10
#define CLASSES 3
static float X[900 * DIM];
static uint8_t Y[900];
static fa_dataset D = {900, DIM, X, Y};

static int setup(void **state)
{
    fa_rng r;
    fa_rng_seed(&r, 2024, 0);
    for (uint32_t i = 0; i < 900; i++) {
        Y[i] = (uint8_t)(i % CLASSES);
        for (int k = 0; k < DIM; k++)
            X[i * DIM + k] = (float)(fa_rng_normal(&r) + (k % CLASSES == Y[i] ? 1.5 : 0.0));
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

struct reports {
    int calls;
    uint32_t last_epoch;
    uint64_t last_step;
    double first_loss, last_loss;
};

static int on_report(void *user, fa_mlp *m, uint32_t epoch, uint64_t step, double loss,
                     fa_error *err)
{
    struct reports *r = user;
    if (r->calls++ == 0)
        r->first_loss = loss;
    r->last_epoch = epoch;
    r->last_step = step;
    r->last_loss = loss;
    return 0;
}

static void test_learns_and_local_round(void **state)
{
    fa_mlp *m = new_cpu(64);
    size_t np = fa_mlp_layout_of(m)->n_params;
    float *global = malloc(np * 4), *delta = malloc(np * 4), *after = malloc(np * 4);
    fa_train_opts o;
    fa_train_result res;
    fa_mlp_eval before, ev;
    struct reports rep = {0};
    fa_error err;

    fa_mlp_init_he(fa_mlp_layout_of(m), global, 1);
    assert_int_equal(fa_mlp_set_params(m, global, &err), 0);
    assert_int_equal(fa_mlp_evaluate(m, &D, &before, &err), 0);

    fa_train_opts_default(&o);
    o.epochs = 3;
    o.batch_size = 32;
    o.report = on_report;
    o.report_user = &rep;
    assert_int_equal(fa_train_local_round(m, global, &D, &o, delta, &res, &err), 0);
    assert_int_equal(res.steps, 3 * 29); /* ceil(900 / 32) per epoch */
    assert_int_equal(res.samples, 3 * 900);
    assert_int_equal(res.num_examples, 900);
    assert_int_equal(rep.calls, 3);
    assert_int_equal(rep.last_epoch, 3);
    assert_true(rep.last_loss < rep.first_loss);
    assert_true(fabs(res.mean_loss - rep.last_loss) < 1e-12);

    /* delta = w_local - w_global: the network holds global + delta */
    assert_int_equal(fa_mlp_get_params(m, after, &err), 0);
    double norm = 0;
    for (size_t i = 0; i < np; i++) {
        assert_true(after[i] - global[i] == delta[i]);
        norm += (double)delta[i] * delta[i];
    }
    assert_true(norm > 0);
    assert_int_equal(fa_mlp_evaluate(m, &D, &ev, &err), 0);
    print_message("synthetic: accuracy %.3f -> %.3f, loss %.3f -> %.3f\n", before.accuracy,
                  ev.accuracy, before.mean_loss, ev.mean_loss);
    assert_true(ev.accuracy > 0.9);
    assert_true(ev.accuracy > before.accuracy + 0.2);
    assert_true(ev.mean_loss < before.mean_loss);

    /* The same round again is bit-for-bit the same (seeded, momentum reset). */
    float *delta2 = malloc(np * 4);
    o.report = NULL;
    assert_int_equal(fa_train_local_round(m, global, &D, &o, delta2, &res, &err), 0);
    assert_memory_equal(delta, delta2, np * 4);
    /* Another seed shuffles differently. */
    o.seed = 2;
    assert_int_equal(fa_train_local_round(m, global, &D, &o, delta2, &res, &err), 0);
    assert_memory_not_equal(delta, delta2, np * 4);

    /* Steps mode: examples used is capped by the data set. */
    o.epochs = 0;
    o.steps = 10;
    memset(&rep, 0, sizeof(rep));
    o.report = on_report;
    o.report_every = 4;
    assert_int_equal(fa_train_local_round(m, global, &D, &o, delta2, &res, &err), 0);
    assert_int_equal(res.steps, 10);
    assert_int_equal(res.samples, 320);
    assert_int_equal(res.num_examples, 320);
    assert_int_equal(rep.calls, 3); /* steps 4, 8 and the end */
    assert_int_equal(rep.last_step, 10);
    o.steps = 100;
    o.report = NULL;
    assert_int_equal(fa_train_local_round(m, global, &D, &o, delta2, &res, &err), 0);
    assert_int_equal(res.num_examples, 900);
    assert_int_equal(res.samples, 3 * 900 + 13 * 32); /* 3 epochs of 29 steps, then 13 */
    free(delta2);
    free(global);
    free(delta);
    free(after);
    fa_mlp_del(m);
}

static void test_cosine_schedule_and_errors(void **state)
{
    fa_mlp *m = new_cpu(64);
    size_t np = fa_mlp_layout_of(m)->n_params;
    float *global = malloc(np * 4), *delta = malloc(np * 4);
    fa_train_opts o;
    fa_error err;
    fa_train_result res;

    fa_mlp_init_he(fa_mlp_layout_of(m), global, 1);
    fa_train_opts_default(&o);
    /* With lr 0 nothing moves; a cosine schedule with warm-up still trains. */
    o.sgd.lr = 0.0f;
    assert_int_equal(fa_train_local_round(m, global, &D, &o, delta, &res, &err), 0);
    for (size_t i = 0; i < np; i++)
        assert_true(delta[i] == 0.0f);
    o.sgd.lr = 0.1f;
    o.lr_schedule = FA_LR_COSINE;
    o.warmup_steps = 5;
    o.epochs = 2;
    assert_int_equal(fa_train_local_round(m, global, &D, &o, delta, &res, &err), 0);
    fa_mlp_eval ev;
    assert_int_equal(fa_mlp_evaluate(m, &D, &ev, &err), 0);
    assert_true(ev.accuracy > 0.9);

    /* bad options, with messages */
    fa_train_opts bad = o;
    bad.batch_size = 0;
    assert_int_equal(fa_train_run(m, &D, &bad, NULL, &err), FA_ERR_INVAL);
    bad = o;
    bad.rank = 2;
    bad.world = 2;
    assert_int_equal(fa_train_run(m, &D, &bad, NULL, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "rank 2 of 2"));
    bad = o;
    bad.batch_size = 65; /* a part larger than max_batch */
    assert_int_equal(fa_train_run(m, &D, &bad, NULL, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "exceeds max_batch 64"));
    bad.world = 2; /* two parts of 33 fit */
    assert_int_equal(fa_train_run(m, &D, &bad, NULL, &err), 0);
    bad = o;
    bad.epochs = 0;
    assert_int_equal(fa_train_run(m, &D, &bad, NULL, &err), FA_ERR_INVAL);
    fa_dataset wrongdim = {900, DIM + 1, X, Y};
    assert_int_equal(fa_train_run(m, &wrongdim, &o, NULL, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "data has 11 features, the model takes 10"));
    uint8_t ybad[4] = {0, 1, 3, 0};
    fa_dataset badlabel = {4, DIM, X, ybad};
    assert_int_equal(fa_train_run(m, &badlabel, &o, NULL, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "label 3 of example 2"));
    fa_dataset empty = {0, DIM, X, Y};
    assert_int_equal(fa_train_run(m, &empty, &o, NULL, &err), FA_ERR_INVAL);
    free(global);
    free(delta);
    fa_mlp_del(m);
}

/* ---- ranks as threads; the hook sums the gradient blocks ---- */

#define MAX_RANKS 4
struct group {
    uint32_t world;
    pthread_barrier_t barrier;
    float *slot[MAX_RANKS]; /* each rank's gradient copy */
    uint64_t calls;
};

struct rank_arg {
    struct group *g;
    uint32_t rank;
    const float *global;
    float *out; /* final params */
    int rc;
    fa_error err;
};

static int sum_hook(void *user, fa_mlp *m, float *grads, size_t n, int on_device, uint64_t step,
                    fa_error *err)
{
    struct rank_arg *a = user;
    struct group *g = a->g;
    memcpy(g->slot[a->rank], grads, n * 4);
    pthread_barrier_wait(&g->barrier);
    /* every rank sums in rank order: identical results everywhere */
    for (size_t i = 0; i < n; i++) {
        float s = 0.0f;
        for (uint32_t r = 0; r < g->world; r++)
            s += g->slot[r][i];
        grads[i] = s;
    }
    if (a->rank == 0)
        g->calls++;
    pthread_barrier_wait(&g->barrier);
    return on_device ? fa_errorf(err, FA_ERR_STATE, "unexpected device memory") : 0;
}

static void *rank_main(void *p)
{
    struct rank_arg *a = p;
    fa_mlp *m = new_cpu(64);
    size_t np = fa_mlp_layout_of(m)->n_params;
    fa_train_opts o;
    fa_train_result res;

    fa_train_opts_default(&o);
    o.epochs = 0;
    o.steps = 40; /* crosses an epoch boundary with a short last batch (900 = 18 * 50) */
    o.batch_size = 50;
    o.sgd.weight_decay = 1e-3f;
    o.rank = a->rank;
    o.world = a->g->world;
    o.allreduce = sum_hook;
    o.allreduce_user = a;
    a->rc = fa_train_local_round(m, a->global, &D, &o, a->out, &res, &a->err);
    (void)np;
    fa_mlp_del(m);
    return NULL;
}

static void run_ranks(uint32_t world, const float *global, float *out[MAX_RANKS], size_t np)
{
    struct group g = {.world = world};
    struct rank_arg args[MAX_RANKS];
    pthread_t th[MAX_RANKS];

    pthread_barrier_init(&g.barrier, NULL, world);
    for (uint32_t r = 0; r < world; r++) {
        g.slot[r] = malloc(np * 4);
        args[r] = (struct rank_arg){.g = &g, .rank = r, .global = global, .out = out[r]};
        pthread_create(&th[r], NULL, rank_main, &args[r]);
    }
    for (uint32_t r = 0; r < world; r++) {
        pthread_join(th[r], NULL);
        if (args[r].rc != 0)
            fail_msg("rank %u: %s", r, args[r].err.msg);
        free(g.slot[r]);
    }
    assert_int_equal(g.calls, 40);
    pthread_barrier_destroy(&g.barrier);
}

static void test_ranks_agree(void **state)
{
    fa_mlp *m = new_cpu(64);
    size_t np = fa_mlp_layout_of(m)->n_params;
    float *global = malloc(np * 4), *out[3][MAX_RANKS];
    uint32_t worlds[3] = {1, 2, 4};

    fa_mlp_init_he(fa_mlp_layout_of(m), global, 11);
    fa_mlp_del(m);
    for (int w = 0; w < 3; w++) {
        for (int r = 0; r < MAX_RANKS; r++)
            out[w][r] = malloc(np * 4);
        run_ranks(worlds[w], global, out[w], np);
        /* all ranks of one run hold identical weights */
        for (uint32_t r = 1; r < worlds[w]; r++)
            assert_memory_equal(out[w][0], out[w][r], np * 4);
    }
    /* 1, 2, 4 ranks: same deltas up to float summation order */
    double max_diff = 0, max_abs = 0;
    for (int w = 1; w < 3; w++)
        for (size_t i = 0; i < np; i++) {
            double d = fabs((double)out[w][0][i] - out[0][0][i]);
            max_diff = d > max_diff ? d : max_diff;
            max_abs = fabs(out[0][0][i]) > max_abs ? fabs(out[0][0][i]) : max_abs;
            if (d > 1e-5 + 1e-3 * fabs(out[0][0][i]))
                fail_msg("param %zu: 1 rank %.9g, %u ranks %.9g", i, (double)out[0][0][i],
                         worlds[w], (double)out[w][0][i]);
        }
    print_message("1/2/4 ranks: max |delta difference| %.2e (max |delta| %.2e)\n", max_diff,
                  max_abs);
    assert_true(max_abs > 1e-3); /* the run did move the weights */
    for (int w = 0; w < 3; w++)
        for (int r = 0; r < MAX_RANKS; r++)
            free(out[w][r]);
    free(global);
}

/* ---- Preemption: stop at step k, save, restore into a new network, resume ---- */

#define MAX_CALLS 64

struct report_log { /* every report call, to compare interrupted and whole runs */
    int n;
    uint32_t epoch[MAX_CALLS];
    uint64_t step[MAX_CALLS];
    double loss[MAX_CALLS];
};

static int log_report(void *user, fa_mlp *m, uint32_t epoch, uint64_t step, double loss,
                      fa_error *err)
{
    struct report_log *l = user;
    if (l->n < MAX_CALLS) {
        l->epoch[l->n] = epoch;
        l->step[l->n] = step;
        l->loss[l->n] = loss;
    }
    l->n++;
    return 0;
}

struct saver { /* the boundary hook: at step `at`, copy the run out and stop */
    uint64_t at, calls, total;
    fa_train_pos pos;
    float *params, *mom;
};

static int save_and_stop(void *user, fa_mlp *m, const fa_train_pos *pos, uint64_t total,
                         fa_error *err)
{
    struct saver *s = user;
    int rc;
    s->calls++;
    s->total = total;
    if (pos->step != s->at)
        return FA_TRAIN_GO_ON;
    s->pos = *pos;
    if ((rc = fa_mlp_get_params(m, s->params, err)) != 0 ||
        (rc = fa_mlp_get_momentum(m, s->mom, err)) != 0)
        return rc;
    return FA_TRAIN_STOP;
}

/* One schedule: the whole run, then for each k a run stopped at k and
 * resumed in a new network; deltas, results and reports must be identical. */
static void check_resume(const fa_train_opts *base, const uint64_t *ks, size_t n_k)
{
    fa_mlp *m = new_cpu(64);
    size_t np = fa_mlp_layout_of(m)->n_params;
    float *global = malloc(np * 4), *want = malloc(np * 4), *got = malloc(np * 4);
    struct report_log whole = {0};
    fa_train_result rw, rg;
    fa_train_opts o;
    fa_error err;

    fa_mlp_init_he(fa_mlp_layout_of(m), global, 5);
    o = *base;
    o.report = log_report;
    o.report_user = &whole;
    assert_int_equal(fa_train_local_round(m, global, &D, &o, want, &rw, &err), 0);
    fa_mlp_del(m);

    for (size_t i = 0; i < n_k; i++) {
        struct saver sv = {.at = ks[i], .params = malloc(np * 4), .mom = malloc(np * 4)};
        struct report_log parts = {0};
        fa_mlp *a = new_cpu(64), *b = new_cpu(64);

        o = *base;
        o.report = log_report;
        o.report_user = &parts;
        o.boundary = save_and_stop;
        o.boundary_user = &sv;
        memset(got, 0, np * 4);
        assert_int_equal(fa_train_local_round(a, global, &D, &o, got, &rg, &err), FA_ERR_CANCELLED);
        assert_int_equal(sv.calls, ks[i] + 1); /* called at 0, after every step */
        assert_int_equal(sv.pos.step, ks[i]);
        fa_mlp_del(a); /* nothing of the first network survives but the copies */

        assert_int_equal(fa_mlp_set_params(b, sv.params, &err), 0);
        assert_int_equal(fa_mlp_set_momentum(b, sv.mom, &err), 0);
        o.boundary = NULL;
        o.resume = &sv.pos;
        assert_int_equal(fa_train_local_round(b, global, &D, &o, got, &rg, &err), 0);
        if (memcmp(want, got, np * 4) != 0)
            fail_msg("stopped at step %llu of %llu: the delta differs", (unsigned long long)ks[i],
                     (unsigned long long)sv.total);
        assert_int_equal(rg.steps, rw.steps);
        assert_int_equal(rg.samples, rw.samples);
        assert_int_equal(rg.num_examples, rw.num_examples);
        assert_memory_equal(&rg.mean_loss, &rw.mean_loss, sizeof(double));
        assert_int_equal(parts.n, whole.n);
        for (int c = 0; c < whole.n && c < MAX_CALLS; c++) {
            assert_int_equal(parts.epoch[c], whole.epoch[c]);
            assert_int_equal(parts.step[c], whole.step[c]);
            assert_memory_equal(&parts.loss[c], &whole.loss[c], sizeof(double));
        }
        fa_mlp_del(b);
        free(sv.params);
        free(sv.mom);
    }
    print_message("%zu stop points of %llu steps: deltas identical bit for bit\n", n_k,
                  (unsigned long long)rw.steps);
    free(global);
    free(want);
    free(got);
}

static void test_resume_bit_for_bit(void **state)
{
    fa_train_opts o;
    /* Epochs mode: 2 epochs of 900 examples in batches of 64 (15 steps, the
     * last one short), weight decay, cosine schedule after a warm-up. */
    const uint64_t ke[] = {0, 1, 7, 14, 15, 16, 29, 30};
    /* Steps mode: 40 steps of 50 (an epoch is 18), reports every 7. */
    const uint64_t ks[] = {0, 1, 17, 18, 19, 21, 39, 40};

    fa_train_opts_default(&o);
    o.epochs = 2;
    o.batch_size = 64;
    o.sgd.weight_decay = 1e-3f;
    o.lr_schedule = FA_LR_COSINE;
    o.warmup_steps = 4;
    o.seed = 77;
    check_resume(&o, ke, sizeof(ke) / sizeof(ke[0]));

    fa_train_opts_default(&o);
    o.epochs = 0;
    o.steps = 40;
    o.batch_size = 50;
    o.report_every = 7;
    check_resume(&o, ks, sizeof(ks) / sizeof(ks[0]));
}

static void test_resume_refusals(void **state)
{
    fa_mlp *m = new_cpu(64);
    size_t np = fa_mlp_layout_of(m)->n_params;
    float *global = calloc(np, 4), *delta = malloc(np * 4);
    fa_train_pos past = {.step = 41};
    fa_train_opts o;
    fa_error err;

    fa_train_opts_default(&o);
    o.epochs = 0;
    o.steps = 40;
    o.resume = &past;
    assert_int_equal(fa_train_local_round(m, global, &D, &o, delta, NULL, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "resuming at step 41 of a run of 40 steps"));
    fa_mlp_del(m);
    free(global);
    free(delta);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_learns_and_local_round),
        cmocka_unit_test(test_cosine_schedule_and_errors),
        cmocka_unit_test(test_ranks_agree),
        cmocka_unit_test(test_resume_bit_for_bit),
        cmocka_unit_test(test_resume_refusals),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
