/* Unit tests of worker/compress: NONE, PowerSGD, top-k and QSGD8, with one
 * rank and with several ranks simulated in-process (fa_comm LOCAL backend).
 *
 * The central invariant of error feedback: at every step, over all ranks,
 *     out + sum_i e_i(after) = sum_i (g_i + e_i(before))
 * i.e. whatever compression drops from the sum is exactly what the ranks keep
 * for the next step; and over a run, sum_t out_t + sum_i e_i(T) = sum_t sum_i g_i(t). */
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
#include "worker/comm.h"
#include "worker/compress.h"

/* ---------------------------------------------------------------------- */
/* helpers                                                                 */
/* ---------------------------------------------------------------------- */

static fa_comm *solo(void)
{
    fa_comm *c[1];
    assert_int_equal(fa_comm_local_group_new(c, 1, NULL), 0);
    return c[0];
}

static void fill_normal(float *x, size_t n, uint64_t seed, float scale)
{
    fa_rng r;
    fa_rng_seed(&r, seed, 7);
    for (size_t i = 0; i < n; i++)
        x[i] = scale * (float)fa_rng_normal(&r);
}

/* a (rows, cols) matrix of rank `rank`: sum of rank outer products */
static void low_rank(float *m, size_t rows, size_t cols, size_t rank, uint64_t seed)
{
    float *u = malloc(rows * sizeof(float)), *v = malloc(cols * sizeof(float));
    memset(m, 0, rows * cols * sizeof(float));
    for (size_t k = 0; k < rank; k++) {
        fill_normal(u, rows, seed * 100 + k, 1.0f);
        fill_normal(v, cols, seed * 100 + k + 50, 1.0f);
        for (size_t i = 0; i < rows; i++)
            for (size_t j = 0; j < cols; j++)
                m[i * cols + j] += u[i] * v[j];
    }
    free(u);
    free(v);
}

static double max_abs(const float *x, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fabs(x[i]) > m ? fabs(x[i]) : m;
    return m;
}

static double max_diff(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fabs((double)a[i] - b[i]) > m ? fabs((double)a[i] - b[i]) : m;
    return m;
}

/* ---------------------------------------------------------------------- */
/* multi-rank harness: R threads, each with its own compressor            */
/* ---------------------------------------------------------------------- */

#define MAXR 4

typedef struct mrun {
    int R, steps;
    size_t n;
    fa_compress_config cfg;
    const fa_compress_tensor *tensors;
    size_t n_tensors;
    float *g;      /* [step][rank][n] gradients */
    float *m;      /* [step][rank][n] g + e_before, as the compressor saw it */
    float *out;    /* [step][rank][n] results */
    float *e;      /* [step][rank][n] errors after the step */
    fa_comm *comm[MAXR];
    uint64_t payload[MAXR];
    int rc[MAXR];
} mrun;

typedef struct run_arg {
    mrun *run;
    int rank;
} run_arg;

#define AT(a, t, r) ((a) + ((size_t)(t) * (size_t)run->R + (size_t)(r)) * run->n)

static void *run_rank(void *p)
{
    run_arg *a = p;
    mrun *run = a->run;
    int r = a->rank;
    fa_compress *c = NULL;
    fa_comm_stats st;
    fa_error err;

    run->rc[r] = fa_compress_new(&c, &run->cfg, run->tensors, run->n_tensors, run->n, r, &err);
    if (run->rc[r] != 0) {
        fprintf(stderr, "rank %d: %s\n", r, err.msg);
        return NULL;
    }
    fa_comm_stats_reset(run->comm[r]);
    for (int t = 0; t < run->steps; t++) {
        float *o = AT(run->out, t, r);
        const float *e = fa_compress_error(c);
        for (size_t i = 0; i < run->n; i++)
            AT(run->m, t, r)[i] = AT(run->g, t, r)[i] + (run->cfg.error_feedback ? e[i] : 0.0f);
        memcpy(o, AT(run->g, t, r), run->n * sizeof(float));
        run->rc[r] = fa_compress_allreduce(c, run->comm[r], o, run->n, &err);
        if (run->rc[r] != 0) {
            fprintf(stderr, "rank %d step %d: %s\n", r, t, err.msg);
            break; /* the other ranks then fail the same way */
        }
        memcpy(AT(run->e, t, r), fa_compress_error(c), run->n * sizeof(float));
    }
    fa_comm_stats_get(run->comm[r], &st);
    run->payload[r] = st.payload_bytes;
    fa_compress_del(c);
    return NULL;
}

static void run_new(mrun *run, int R, int steps, size_t n, const fa_compress_config *cfg,
                    const fa_compress_tensor *tensors, size_t n_tensors)
{
    size_t all = (size_t)steps * (size_t)R * n;
    memset(run, 0, sizeof(*run));
    run->R = R;
    run->steps = steps;
    run->n = n;
    run->cfg = *cfg;
    run->tensors = tensors;
    run->n_tensors = n_tensors;
    run->g = calloc(all, sizeof(float));
    run->m = calloc(all, sizeof(float));
    run->out = calloc(all, sizeof(float));
    run->e = calloc(all, sizeof(float));
    assert_non_null(run->g);
    assert_non_null(run->e);
}

static void run_go(mrun *run)
{
    pthread_t th[MAXR];
    run_arg args[MAXR];
    assert_int_equal(fa_comm_local_group_new(run->comm, run->R, NULL), 0);
    for (int r = 0; r < run->R; r++) {
        args[r].run = run;
        args[r].rank = r;
        assert_int_equal(pthread_create(&th[r], NULL, run_rank, &args[r]), 0);
    }
    for (int r = 0; r < run->R; r++)
        pthread_join(th[r], NULL);
    for (int r = 0; r < run->R; r++)
        fa_comm_del(run->comm[r]);
}

static void run_free(mrun *run)
{
    free(run->g);
    free(run->m);
    free(run->out);
    free(run->e);
}

/* Every rank got the same bits, and out + sum e_after == sum m, to tol
 * relative to the magnitude of the inputs. */
static void check_invariants(mrun *run, double rel_tol)
{
    size_t n = run->n;
    float *sum_m = calloc(n, sizeof(float)), *rhs = calloc(n, sizeof(float));
    for (int t = 0; t < run->steps; t++) {
        memset(sum_m, 0, n * sizeof(float));
        for (int r = 0; r < run->R; r++) {
            assert_memory_equal(AT(run->out, t, 0), AT(run->out, t, r), n * sizeof(float));
            for (size_t i = 0; i < n; i++)
                sum_m[i] += AT(run->m, t, r)[i];
        }
        for (size_t i = 0; i < n; i++) {
            rhs[i] = AT(run->out, t, 0)[i];
            for (int r = 0; r < run->R; r++)
                rhs[i] += AT(run->e, t, r)[i];
        }
        double scale = max_abs(sum_m, n) + 1e-30;
        if (max_diff(sum_m, rhs, n) > rel_tol * scale)
            fail_msg("step %d: out + sum e differs from sum m by %g (scale %g)", t,
                     max_diff(sum_m, rhs, n), scale);
    }
    free(sum_m);
    free(rhs);
}

/* ---------------------------------------------------------------------- */
/* configuration                                                           */
/* ---------------------------------------------------------------------- */

static void test_config(void **state)
{
    fa_compress_config c;
    Fedagg__Compression pb = FEDAGG__COMPRESSION__INIT;
    fa_error err;
    int kind = -1;

    fa_compress_config_default(&c);
    assert_int_equal(c.kind, FA_COMPRESS_NONE);
    assert_int_equal(c.powersgd_rank, 4);
    assert_int_equal(c.powersgd_start_step, 10);
    assert_int_equal(c.min_compress_numel, 1024);
    assert_true(c.topk_fraction == 0.01);
    assert_true(c.error_feedback && c.warm_start);

    /* the proto defaults are the same */
    assert_int_equal(fa_compress_config_from_proto(&c, &pb, 9, &err), 0);
    assert_int_equal(c.powersgd_rank, 4);
    assert_int_equal(c.powersgd_start_step, 10);
    assert_true(c.topk_fraction == 0.01);
    assert_true(c.error_feedback && c.warm_start);
    assert_int_equal(c.seed, 9);
    pb.kind = FEDAGG__COMPRESSION_KIND__POWERSGD;
    pb.powersgd_rank = 0;
    assert_int_equal(fa_compress_config_from_proto(&c, &pb, 1, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "compression.powersgd_rank"));
    pb.kind = FEDAGG__COMPRESSION_KIND__TOPK;
    pb.topk_fraction = 1.5;
    assert_int_equal(fa_compress_config_from_proto(&c, &pb, 1, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "compression.topk_fraction"));

    assert_int_equal(fa_compress_kind_parse("PowerSGD", &kind), 0);
    assert_int_equal(kind, FA_COMPRESS_POWERSGD);
    assert_int_equal(fa_compress_kind_parse("zip", &kind), FA_ERR_INVAL);
    assert_string_equal(fa_compress_kind_name(FA_COMPRESS_QSGD8), "qsgd8");
    assert_null(fa_compress_kind_name(9));
}

static void test_bad_tensor_table(void **state)
{
    fa_compress_config c;
    fa_compress *z = NULL;
    fa_error err;
    fa_compress_tensor overlap[2] = {{0, 10, 10}, {50, 10, 10}};
    fa_compress_tensor outside[1] = {{10, 10, 10}};

    fa_compress_config_default(&c);
    c.kind = FA_COMPRESS_POWERSGD;
    assert_int_equal(fa_compress_new(&z, &c, overlap, 2, 200, 0, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "overlap"));
    assert_int_equal(fa_compress_new(&z, &c, outside, 1, 100, 0, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "does not fit"));
    assert_null(z);
}

/* ---------------------------------------------------------------------- */
/* NONE                                                                    */
/* ---------------------------------------------------------------------- */

static void test_none_is_exact_sum(void **state)
{
    fa_compress_config cfg;
    mrun rs, *run = &rs;
    fa_compress_config_default(&cfg);
    run_new(run, 3, 2, 1000, &cfg, NULL, 0);
    for (int t = 0; t < 2; t++)
        for (int r = 0; r < 3; r++)
            fill_normal(AT(run->g, t, r), 1000, (uint64_t)(t * 10 + r), 1.0f);
    run_go(run);
    for (int r = 0; r < 3; r++) {
        assert_int_equal(run->rc[r], 0);
        assert_int_equal(run->payload[r], 2 * 1000 * 4);
        assert_true(max_abs(AT(run->e, 1, r), 1000) == 0.0);
    }
    check_invariants(run, 1e-6);
    run_free(run);
}

/* ---------------------------------------------------------------------- */
/* PowerSGD                                                                */
/* ---------------------------------------------------------------------- */

/* A rank-2 matrix comes back exactly with r = 2 (one rank), and a bias
 * (1-D, uncompressed) comes back bit for bit. */
static void test_powersgd_low_rank_exact(void **state)
{
    const size_t rows = 96, cols = 64, n = rows * cols + rows;
    fa_compress_tensor t[2] = {{0, rows, cols}, {rows * cols, rows, 1}};
    fa_compress_config cfg;
    fa_compress *c = NULL;
    fa_comm *comm = solo();
    float *g = malloc(n * sizeof(float)), *orig = malloc(n * sizeof(float));
    fa_comm_stats st;
    fa_error err;

    for (size_t rank = 1; rank <= 2; rank++) {
        fa_compress_config_default(&cfg);
        cfg.kind = FA_COMPRESS_POWERSGD;
        cfg.powersgd_rank = 2;
        cfg.powersgd_start_step = 0;
        cfg.min_compress_numel = 16;
        assert_int_equal(fa_compress_new(&c, &cfg, t, 2, n, 0, &err), 0);
        low_rank(g, rows, cols, rank, 3 + rank);
        fill_normal(g + rows * cols, rows, 99, 1.0f);
        memcpy(orig, g, n * sizeof(float));
        fa_comm_stats_reset(comm);
        assert_int_equal(fa_compress_allreduce(c, comm, g, n, &err), 0);
        if (max_diff(g, orig, rows * cols) > 1e-4 * max_abs(orig, rows * cols))
            fail_msg("rank-%zu matrix not reproduced: max diff %g of %g", rank,
                     max_diff(g, orig, rows * cols), max_abs(orig, rows * cols));
        assert_memory_equal(g + rows * cols, orig + rows * cols, rows * sizeof(float));
        /* nothing dropped, so (almost) nothing kept */
        assert_true(max_abs(fa_compress_error(c), n) <= 1e-4 * max_abs(orig, rows * cols));
        /* bytes: bias + P (rows x 2) + Q (cols x 2) */
        fa_comm_stats_get(comm, &st);
        assert_int_equal(st.payload_bytes, 4 * (rows + rows * 2 + cols * 2));
        assert_int_equal(fa_compress_payload_bytes(c), 4 * (rows + rows * 2 + cols * 2));
        fa_compress_del(c);
    }
    fa_comm_del(comm);
    free(g);
    free(orig);
}

/* Three ranks, each holding a different rank-1 matrix: the sum has rank 3
 * and r = 3 reproduces it; the invariant holds. */
static void test_powersgd_multi_rank_sum_exact(void **state)
{
    const size_t rows = 40, cols = 30, n = rows * cols;
    fa_compress_tensor t[1] = {{0, rows, cols}};
    fa_compress_config cfg;
    mrun rs, *run = &rs;
    float *sum = calloc(n, sizeof(float));

    fa_compress_config_default(&cfg);
    cfg.kind = FA_COMPRESS_POWERSGD;
    cfg.powersgd_rank = 3;
    cfg.powersgd_start_step = 0;
    cfg.min_compress_numel = 1;
    run_new(run, 3, 1, n, &cfg, t, 1);
    for (int r = 0; r < 3; r++) {
        low_rank(AT(run->g, 0, r), rows, cols, 1, 20 + (uint64_t)r);
        for (size_t i = 0; i < n; i++)
            sum[i] += AT(run->g, 0, r)[i];
    }
    run_go(run);
    for (int r = 0; r < 3; r++)
        assert_int_equal(run->rc[r], 0);
    if (max_diff(AT(run->out, 0, 0), sum, n) > 1e-4 * max_abs(sum, n))
        fail_msg("sum of three rank-1 matrices not reproduced: %g", max_diff(AT(run->out, 0, 0), sum, n));
    check_invariants(run, 1e-5);
    run_free(run);
    free(sum);
}

/* Full-rank gradients on 2 ranks over several steps, MLP-like layout:
 * before the start step plain sums with no error; afterwards the result is
 * an approximation, and out + sum e == sum m at every step.  Bytes match the
 * formula. */
static void test_powersgd_error_feedback(void **state)
{
    fa_mlp_config mc;
    fa_mlp_layout l;
    fa_compress_tensor t[2 * FA_MLP_MAX_LAYERS];
    fa_compress_config cfg;
    const uint32_t hidden[1] = {48};
    mrun rs, *run = &rs;
    const int steps = 5, start = 2;
    size_t n;

    assert_int_equal(fa_mlp_config_make(&mc, 100, hidden, 1, 10, NULL), 0);
    assert_int_equal(fa_mlp_layout_init(&l, &mc, NULL), 0);
    fa_compress_tensors_from_layout(&l, t);
    n = l.n_params; /* fc1 48x100, fc1.bias 48, fc2 10x48, fc2.bias 10 */
    fa_compress_config_default(&cfg);
    cfg.kind = FA_COMPRESS_POWERSGD;
    cfg.powersgd_rank = 2;
    cfg.powersgd_start_step = start;
    cfg.min_compress_numel = 256;
    run_new(run, 2, steps, n, &cfg, t, l.n_tensors);
    for (int s = 0; s < steps; s++)
        for (int r = 0; r < 2; r++)
            fill_normal(AT(run->g, s, r), n, (uint64_t)(100 + s * 2 + r), 0.1f);
    run_go(run);
    for (int r = 0; r < 2; r++)
        assert_int_equal(run->rc[r], 0);
    check_invariants(run, 1e-5);
    for (int s = 0; s < start; s++)
        for (int r = 0; r < 2; r++)
            assert_true(max_abs(AT(run->e, s, r), n) == 0.0);
    /* compressed steps really compress fc1 (full rank noise, rank 2) */
    assert_true(max_abs(AT(run->e, start, 0), 48 * 100) > 0.01);
    /* fc2 (10 x 48 = 480 >= 256 floats; (10 + 48) 2 = 116 <= 480 / 2) is
     * compressed too; the biases never are: their error stays zero */
    assert_true(max_abs(AT(run->e, steps - 1, 0) + 4800, 48) == 0.0);
    /* payload: start plain steps + compressed steps of
     * small (48 + 10) + P (48*2 + 10*2) + Q (100*2 + 48*2) */
    assert_int_equal(run->payload[0],
                     4 * ((uint64_t)start * n + (uint64_t)(steps - start) * (58 + 116 + 296)));
    run_free(run);
}

/* Over a run, nothing is lost: sum of outputs + final errors = sum of all
 * gradients; and warm start converges to the exact answer when the same
 * low-rank-plus-noise gradient repeats (power iteration across steps). */
static void test_powersgd_nothing_lost_over_run(void **state)
{
    const size_t rows = 64, cols = 64, n = rows * cols;
    fa_compress_tensor t[1] = {{0, rows, cols}};
    fa_compress_config cfg;
    fa_compress *c = NULL;
    fa_comm *comm = solo();
    float *g = malloc(n * sizeof(float)), *x = malloc(n * sizeof(float));
    double *total_g = calloc(n, sizeof(double)), *total_out = calloc(n, sizeof(double));
    fa_error err;

    fa_compress_config_default(&cfg);
    cfg.kind = FA_COMPRESS_POWERSGD;
    cfg.powersgd_rank = 1;
    cfg.powersgd_start_step = 0;
    cfg.min_compress_numel = 1;
    assert_int_equal(fa_compress_new(&c, &cfg, t, 1, n, 0, &err), 0);
    for (int s = 0; s < 30; s++) {
        fill_normal(g, n, 500 + (uint64_t)s, 1.0f);
        for (size_t i = 0; i < n; i++)
            total_g[i] += g[i];
        memcpy(x, g, n * sizeof(float));
        assert_int_equal(fa_compress_allreduce(c, comm, x, n, &err), 0);
        for (size_t i = 0; i < n; i++)
            total_out[i] += x[i];
    }
    for (size_t i = 0; i < n; i++) {
        double lhs = total_out[i] + fa_compress_error(c)[i];
        if (fabs(lhs - total_g[i]) > 1e-3)
            fail_msg("coordinate %zu: %g + %g != %g", i, total_out[i], fa_compress_error(c)[i],
                     total_g[i]);
    }
    assert_int_equal(fa_compress_steps(c), 30);
    fa_compress_reset(c);
    assert_true(max_abs(fa_compress_error(c), n) == 0.0);
    fa_compress_del(c);
    fa_comm_del(comm);
    free(g);
    free(x);
    free(total_g);
    free(total_out);
}

/* ---------------------------------------------------------------------- */
/* top-k                                                                   */
/* ---------------------------------------------------------------------- */

static void test_topk_one_rank(void **state)
{
    const size_t n = 1000;
    fa_compress_config cfg;
    fa_compress *c = NULL;
    fa_comm *comm = solo();
    float g[1000], x[1000];
    fa_error err;
    size_t nz = 0;

    fa_compress_config_default(&cfg);
    cfg.kind = FA_COMPRESS_TOPK;
    cfg.topk_fraction = 0.01; /* k = 10 */
    assert_int_equal(fa_compress_new(&c, &cfg, NULL, 0, n, 0, &err), 0);
    assert_int_equal(fa_compress_payload_bytes(c), 80);
    for (size_t i = 0; i < n; i++)
        g[i] = (float)((i * 37) % 1000) / 1000.0f * ((i & 1) ? -1.0f : 1.0f);
    /* magnitudes are (37 i mod 1000) / 1000: the 10 largest are 0.990..0.999 */
    memcpy(x, g, sizeof(g));
    assert_int_equal(fa_compress_allreduce(c, comm, x, n, &err), 0);
    for (size_t i = 0; i < n; i++) {
        if (x[i] != 0.0f) {
            nz++;
            assert_true(x[i] == g[i]);
            assert_true(fabsf(g[i]) >= 0.990f - 1e-6f);
            assert_true(fa_compress_error(c)[i] == 0.0f);
        } else {
            assert_true(fa_compress_error(c)[i] == g[i]);
        }
    }
    assert_int_equal(nz, 10);

    /* second step with a zero gradient: the biggest kept errors go out now */
    memset(x, 0, sizeof(x));
    assert_int_equal(fa_compress_allreduce(c, comm, x, n, &err), 0);
    nz = 0;
    for (size_t i = 0; i < n; i++)
        if (x[i] != 0.0f) {
            nz++;
            assert_true(fabsf(x[i]) >= 0.980f - 1e-6f && fabsf(x[i]) < 0.990f);
        }
    assert_int_equal(nz, 10);
    fa_compress_del(c);

    /* ties: all equal magnitudes, the lowest indices win */
    assert_int_equal(fa_compress_new(&c, &cfg, NULL, 0, n, 0, &err), 0);
    for (size_t i = 0; i < n; i++)
        x[i] = (i & 1) ? -1.0f : 1.0f;
    assert_int_equal(fa_compress_allreduce(c, comm, x, n, &err), 0);
    for (size_t i = 0; i < n; i++)
        assert_true(x[i] == (i < 10 ? ((i & 1) ? -1.0f : 1.0f) : 0.0f));
    fa_compress_del(c);
    fa_comm_del(comm);
}

static void test_topk_multi_rank(void **state)
{
    const size_t n = 5000;
    fa_compress_config cfg;
    mrun rs, *run = &rs;

    fa_compress_config_default(&cfg);
    cfg.kind = FA_COMPRESS_TOPK;
    cfg.topk_fraction = 0.02; /* k = 100 */
    run_new(run, 4, 4, n, &cfg, NULL, 0);
    for (int s = 0; s < 4; s++)
        for (int r = 0; r < 4; r++)
            fill_normal(AT(run->g, s, r), n, (uint64_t)(900 + s * 4 + r), 1.0f);
    run_go(run);
    for (int r = 0; r < 4; r++) {
        assert_int_equal(run->rc[r], 0);
        assert_int_equal(run->payload[r], 4 * 100 * 8);
    }
    check_invariants(run, 1e-6);
    /* each rank's error is zero at exactly k coordinates (where it sent) */
    for (int r = 0; r < 4; r++) {
        size_t zeros = 0;
        for (size_t i = 0; i < n; i++)
            zeros += AT(run->e, 3, r)[i] == 0.0f;
        assert_int_equal(zeros, 100);
    }
    run_free(run);
}

/* ---------------------------------------------------------------------- */
/* QSGD8                                                                   */
/* ---------------------------------------------------------------------- */

static void test_qsgd8_levels_and_unbiased(void **state)
{
    const size_t n = 512;
    fa_compress_config cfg;
    fa_compress *c = NULL;
    fa_comm *comm = solo();
    float g[512], x[512];
    double mean[512] = {0};
    fa_error err;
    float s, step;
    const int trials = 2000;

    fa_compress_config_default(&cfg);
    cfg.kind = FA_COMPRESS_QSGD8;
    cfg.error_feedback = 0;
    assert_int_equal(fa_compress_new(&c, &cfg, NULL, 0, n, 0, &err), 0);
    assert_int_equal(fa_compress_payload_bytes(c), n + 4);
    fill_normal(g, n, 42, 0.3f);
    s = (float)max_abs(g, n);
    step = s / 127.0f;
    for (int t = 0; t < trials; t++) {
        memcpy(x, g, sizeof(g));
        assert_int_equal(fa_compress_allreduce(c, comm, x, n, &err), 0);
        for (size_t i = 0; i < n; i++) {
            double lv = x[i] / step;
            /* a level, adjacent to the input */
            assert_true(fabs(lv - round(lv)) < 1e-3);
            assert_true(fabs(x[i] - g[i]) <= step * 1.0001);
            mean[i] += x[i];
        }
    }
    /* unbiased: the mean over trials approaches g (std of the mean
     * <= step / 2 / sqrt(trials) ~ 0.0002) */
    for (size_t i = 0; i < n; i++)
        assert_true(fabs(mean[i] / trials - g[i]) < step * 0.1);
    assert_true(max_abs(fa_compress_error(c), n) == 0.0); /* feedback off */
    fa_compress_del(c);

    /* zero in, zero out; NaN in, a clear error */
    cfg.error_feedback = 1;
    assert_int_equal(fa_compress_new(&c, &cfg, NULL, 0, n, 0, &err), 0);
    memset(x, 0, sizeof(x));
    assert_int_equal(fa_compress_allreduce(c, comm, x, n, &err), 0);
    assert_true(max_abs(x, n) == 0.0);
    x[7] = NAN;
    assert_int_equal(fa_compress_allreduce(c, comm, x, n, &err), FA_ERR_RANGE);
    assert_non_null(strstr(err.msg, "NaN"));
    fa_compress_del(c);
    fa_comm_del(comm);
}

static void test_qsgd8_multi_rank(void **state)
{
    const size_t n = 3000;
    fa_compress_config cfg;
    mrun rs, *run = &rs;

    fa_compress_config_default(&cfg);
    cfg.kind = FA_COMPRESS_QSGD8;
    run_new(run, 3, 4, n, &cfg, NULL, 0);
    for (int s = 0; s < 4; s++)
        for (int r = 0; r < 3; r++)
            fill_normal(AT(run->g, s, r), n, (uint64_t)(300 + s * 3 + r), (float)(r + 1));
    run_go(run);
    for (int r = 0; r < 3; r++) {
        assert_int_equal(run->rc[r], 0);
        assert_int_equal(run->payload[r], 4 * (n + 4)); /* 1 scale float + n bytes per step */
    }
    check_invariants(run, 1e-5);
    /* the error of each rank stays below one level of the shared scale */
    for (int s = 0; s < 4; s++) {
        double smax = 0;
        for (int r = 0; r < 3; r++)
            smax = fmax(smax, max_abs(AT(run->m, s, r), n));
        for (int r = 0; r < 3; r++)
            assert_true(max_abs(AT(run->e, s, r), n) <= smax / 127.0 * 1.0001);
    }
    run_free(run);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config),
        cmocka_unit_test(test_bad_tensor_table),
        cmocka_unit_test(test_none_is_exact_sum),
        cmocka_unit_test(test_powersgd_low_rank_exact),
        cmocka_unit_test(test_powersgd_multi_rank_sum_exact),
        cmocka_unit_test(test_powersgd_error_feedback),
        cmocka_unit_test(test_powersgd_nothing_lost_over_run),
        cmocka_unit_test(test_topk_one_rank),
        cmocka_unit_test(test_topk_multi_rank),
        cmocka_unit_test(test_qsgd8_levels_and_unbiased),
        cmocka_unit_test(test_qsgd8_multi_rank),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
