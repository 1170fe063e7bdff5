/* fa-worker-mpi-check - multi-rank checks of worker/comm, worker/compress and
 * worker/local_round under a real MPI launcher (tests/integration/
 * it_worker_mpi.sh runs it with mpirun -np 1, 2, 4, and alone).
 *
 *   fa-worker-mpi-check comm [--device auto|cpu|gpu]
 *       collectives with values every rank can predict
 *   fa-worker-mpi-check ef KIND
 *       error-feedback invariant of compressor KIND over the ranks, and for
 *       powersgd exact reproduction of a sum of rank <= r
 *   fa-worker-mpi-check train --out FILE [--compress KIND] [--steps S]
 *                       [--batch B] [--device D]
 *       a few steps of data-parallel training of an MLP on a synthetic
 *       teacher-labelled data set; rank 0 writes the delta (raw float32);
 *       every rank's final weights must be bit-identical
 *   fa-worker-mpi-check compare FILE_A FILE_B [--tol REL]
 *       max |a - b| <= REL * max |a| (no MPI)
 *
 * Prints one line per rank, "ok ..." on success; exits non-zero on failure.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/mlp.h"
#include "model/rng.h"
#include "model/train.h"
#include "worker/comm.h"
#include "worker/compress.h"
#include "worker/local_round.h"

static int failf(int rank, const char *what, const fa_error *err)
{
    fprintf(stderr, "rank %d: FAIL %s%s%s\n", rank, what, err ? ": " : "", err ? err->msg : "");
    return 1;
}

static int parse_device(const char *s)
{
    if (!s || strcmp(s, "auto") == 0)
        return FA_COMM_DEVICE_AUTO;
    if (strcmp(s, "gpu") == 0)
        return FA_COMM_DEVICE_GPU;
    return FA_COMM_DEVICE_CPU;
}

static const char *opt(int argc, char **argv, const char *name, const char *def)
{
    for (int i = 0; i + 1 < argc; i++)
        if (strcmp(argv[i], name) == 0)
            return argv[i + 1];
    return def;
}

/* ---------------------------------------------------------------------- */

static int check_comm(fa_comm *c)
{
    const int r = fa_comm_rank(c), p = fa_comm_size(c);
    float v[1000], mx[2];
    char *send, *recv;
    size_t *lens, total = 0, off = 0;
    uint64_t token;
    fa_error err;

    for (int i = 0; i < 1000; i++)
        v[i] = (float)(r + 1) * (float)i;
    if (fa_comm_allreduce_sum_f32(c, v, 1000, &err) != 0)
        return failf(r, "allreduce", &err);
    for (int i = 0; i < 1000; i++)
        if (v[i] != (float)(p * (p + 1) / 2) * (float)i)
            return failf(r, "allreduce value", NULL);
    mx[0] = (float)r;
    mx[1] = (float)-r;
    if (fa_comm_allreduce_max_f32(c, mx, 2, &err) != 0 || mx[0] != (float)(p - 1) || mx[1] != 0.0f)
        return failf(r, "allreduce max", &err);
    token = r == p - 1 ? 0xfeedfacecafebeefULL : 0;
    if (fa_comm_bcast(c, &token, sizeof(token), p - 1, &err) != 0 || token != 0xfeedfacecafebeefULL)
        return failf(r, "bcast from the last rank", &err);
    /* rank q sends 1000 q + 3 bytes of value q: one rank sends more than 2 KiB */
    for (int q = 0; q < p; q++)
        total += 1000 * (size_t)q + 3;
    send = malloc(1000 * (size_t)r + 3);
    recv = malloc(total);
    lens = calloc((size_t)p, sizeof(size_t));
    memset(send, r, 1000 * (size_t)r + 3);
    if (fa_comm_allgatherv(c, send, 1000 * (size_t)r + 3, recv, total, lens, &err) != 0)
        return failf(r, "allgatherv", &err);
    for (int q = 0; q < p; q++) {
        if (lens[q] != 1000 * (size_t)q + 3)
            return failf(r, "allgatherv lengths", NULL);
        for (size_t b = 0; b < lens[q]; b++)
            if (recv[off + b] != (char)q)
                return failf(r, "allgatherv content", NULL);
        off += lens[q];
    }
    free(send);
    free(recv);
    free(lens);
    if (fa_comm_barrier(c, &err) != 0)
        return failf(r, "barrier", &err);
    printf("ok comm rank=%d size=%d backend=%s\n", r, p, fa_comm_backend_name(c));
    return 0;
}

/* ---------------------------------------------------------------------- */

static void normal(float *x, size_t n, uint64_t seed, uint64_t stream)
{
    fa_rng g;
    fa_rng_seed(&g, seed, stream);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)fa_rng_normal(&g);
}

static int check_ef(fa_comm *c, const char *kind_name)
{
    const int r = fa_comm_rank(c), p = fa_comm_size(c);
    /* an MLP-shaped block: 64 x 50 weight, 64 bias, 10 x 64 weight, 10 bias */
    fa_compress_tensor t[4] = {{0, 64, 50}, {3200, 64, 1}, {3264, 10, 64}, {3904, 10, 1}};
    const size_t n = 3914;
    fa_compress_config cfg;
    fa_compress *z = NULL;
    float *g = malloc(n * sizeof(float)), *m = malloc(n * sizeof(float));
    float *all_m = malloc((size_t)p * n * sizeof(float)), *all_e = malloc((size_t)p * n * sizeof(float));
    size_t *lens = calloc((size_t)p, sizeof(size_t));
    fa_error err;
    int kind;

    fa_compress_config_default(&cfg);
    if (fa_compress_kind_parse(kind_name, &kind) != 0)
        return failf(r, "unknown compression", NULL);
    cfg.kind = kind;
    cfg.powersgd_rank = 4;
    cfg.powersgd_start_step = 1;
    cfg.min_compress_numel = 100;
    cfg.topk_fraction = 0.05;
    if (fa_compress_new(&z, &cfg, t, 4, n, r, &err) != 0)
        return failf(r, "compress_new", &err);
    for (int step = 0; step < 4; step++) {
        double scale = 0, diff = 0;
        normal(g, n, 77, (uint64_t)(step * 64 + r));
        if (kind == FA_COMPRESS_POWERSGD && step == 3) {
            /* each rank a rank-1 first matrix: the sum has rank p <= 4 = r */
            float u[64], w[50];
            normal(u, 64, 5, (uint64_t)r);
            normal(w, 50, 6, (uint64_t)r);
            for (int i = 0; i < 64; i++)
                for (int j = 0; j < 50; j++)
                    g[i * 50 + j] = u[i] * w[j];
            fa_compress_reset(z); /* no error memory: the input is exactly g */
        }
        for (size_t i = 0; i < n; i++)
            m[i] = g[i] + (cfg.error_feedback ? fa_compress_error(z)[i] : 0.0f);
        if (fa_comm_allgatherv(c, m, n * sizeof(float), all_m, (size_t)p * n * sizeof(float), lens,
                               &err) != 0)
            return failf(r, "gather m", &err);
        if (fa_compress_allreduce(z, c, g, n, &err) != 0)
            return failf(r, "compress_allreduce", &err);
        if (fa_comm_allgatherv(c, fa_compress_error(z), n * sizeof(float), all_e,
                               (size_t)p * n * sizeof(float), lens, &err) != 0)
            return failf(r, "gather e", &err);
        /* out + sum e == sum m */
        for (size_t i = 0; i < n; i++) {
            double sm = 0, se = 0;
            for (int q = 0; q < p; q++) {
                sm += all_m[(size_t)q * n + i];
                se += all_e[(size_t)q * n + i];
            }
            scale = fmax(scale, fabs(sm));
            diff = fmax(diff, fabs(g[i] + se - sm));
            if (kind == FA_COMPRESS_POWERSGD && step == 3 && i < 3200)
                diff = fmax(diff, fabs(g[i] - sm)); /* and exact */
        }
        if (diff > 1e-5 * scale) {
            fprintf(stderr, "rank %d step %d: invariant off by %g (scale %g)\n", r, step, diff, scale);
            return failf(r, "error-feedback invariant", NULL);
        }
    }
    printf("ok ef %s rank=%d size=%d payload_bytes=%zu\n", kind_name, r, p,
           fa_compress_payload_bytes(z));
    fa_compress_del(z);
    free(g);
    free(m);
    free(all_m);
    free(all_e);
    free(lens);
    return 0;
}

/* ---------------------------------------------------------------------- */

/* A data set whose labels come from a fixed random linear teacher, so that
 * training makes progress; the same on every rank. */
static void synthetic(fa_dataset *d, float **x, uint8_t **y, uint32_t n, uint32_t dim,
                      uint32_t classes)
{
    float *teacher = malloc((size_t)classes * dim * sizeof(float));
    *x = malloc((size_t)n * dim * sizeof(float));
    *y = malloc(n);
    normal(teacher, (size_t)classes * dim, 11, 0);
    normal(*x, (size_t)n * dim, 12, 0);
    for (uint32_t i = 0; i < n; i++) {
        float best = -INFINITY;
        for (uint32_t k = 0; k < classes; k++) {
            float s = 0;
            for (uint32_t j = 0; j < dim; j++)
                s += teacher[k * dim + j] * (*x)[(size_t)i * dim + j];
            if (s > best) {
                best = s;
                (*y)[i] = (uint8_t)k;
            }
        }
    }
    free(teacher);
    d->n = n;
    d->dim = dim;
    d->x = *x;
    d->y = *y;
}

static uint64_t fnv(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ULL;
    return h;
}

static int run_train(fa_comm *c, int argc, char **argv)
{
    const int r = fa_comm_rank(c), p = fa_comm_size(c);
    const char *out = opt(argc, argv, "--out", NULL);
    const uint32_t hidden[2] = {64, 32};
    fa_mlp_config mc;
    fa_mlp_opts mo;
    fa_mlp *m = NULL;
    fa_local_round *lr = NULL;
    fa_compress_config cc;
    fa_train_opts to;
    fa_local_round_result res;
    fa_dataset d;
    float *x, *global, *delta, *params;
    uint8_t *y;
    uint64_t h, h0;
    fa_error err;
    int kind;

    if (fa_mlp_config_make(&mc, 100, hidden, 2, 10, &err) != 0)
        return failf(r, "config", &err);
    fa_mlp_opts_default(&mo);
    mo.backend = strcmp(opt(argc, argv, "--device", "cpu"), "cpu") == 0 ? FA_MLP_CPU : FA_MLP_AUTO;
    if (fa_mlp_new(&m, &mc, &mo, &err) != 0)
        return failf(r, "mlp_new", &err);
    fa_compress_config_default(&cc);
    if (fa_compress_kind_parse(opt(argc, argv, "--compress", "none"), &kind) != 0)
        return failf(r, "unknown compression", NULL);
    cc.kind = kind;
    cc.powersgd_start_step = 3;
    if (fa_local_round_new(&lr, c, m, &cc, &err) != 0)
        return failf(r, "local_round_new", &err);
    synthetic(&d, &x, &y, 1000, 100, 10);
    fa_train_opts_default(&to);
    to.steps = (uint32_t)atoi(opt(argc, argv, "--steps", "12"));
    to.batch_size = (uint32_t)atoi(opt(argc, argv, "--batch", "64"));
    to.sgd.lr = 0.05f;
    to.sgd.momentum = 0.9f;
    to.sgd.weight_decay = 1e-4f;
    to.seed = 3;

    params = malloc(fa_mlp_layout_of(m)->n_params * sizeof(float));
    global = malloc(fa_mlp_layout_of(m)->n_params * sizeof(float));
    delta = malloc(fa_mlp_layout_of(m)->n_params * sizeof(float));
    /* only rank 0 knows the global weights; other ranks get noise they
     * must never use */
    if (r == 0)
        fa_mlp_init_he(fa_mlp_layout_of(m), global, 1);
    else
        normal(global, fa_mlp_layout_of(m)->n_params, 999, (uint64_t)r);
    if (fa_local_round_run(lr, r == 0 ? global : NULL, &d, &to, r == 0 ? delta : NULL, &res,
                           &err) != 0)
        return failf(r, "local_round_run", &err);

    /* every rank ends with the same bits */
    if (fa_mlp_get_params(m, params, &err) != 0)
        return failf(r, "get_params", &err);
    h = h0 = fnv(params, fa_mlp_layout_of(m)->n_params * sizeof(float));
    if (fa_comm_bcast(c, &h0, sizeof(h0), 0, &err) != 0)
        return failf(r, "bcast hash", &err);
    if (h != h0)
        return failf(r, "weights differ between ranks", NULL);
    if (res.num_examples != (to.steps * to.batch_size < 1000 ? to.steps * to.batch_size : 1000) ||
        res.steps != to.steps)
        return failf(r, "num_examples or steps", NULL);
    if (r == 0 && out) {
        FILE *f = fopen(out, "wb");
        size_t np = fa_mlp_layout_of(m)->n_params;
        if (!f || fwrite(delta, sizeof(float), np, f) != np || fclose(f) != 0)
            return failf(r, "write delta", NULL);
    }
    printf("ok train rank=%d size=%d backend=%s compress=%s steps=%llu loss=%.4f "
           "payload_bytes_per_step=%.0f\n",
           r, p, fa_comm_backend_name(c), fa_compress_kind_name(kind),
           (unsigned long long)res.steps, res.mean_loss,
           (double)res.payload_bytes / (double)res.steps);
    fa_local_round_del(lr);
    fa_mlp_del(m);
    free(x);
    free(y);
    free(params);
    free(global);
    free(delta);
    return 0;
}

/* DP-SGD over real ranks: one step of lr 1 with and without noise under the
 * same key (the same Poisson batch); the update's noise variance must be
 * (sigma C / (q n))^2, added once for the region whatever the ranks. */
static int dp_step(fa_local_round *lr, const fa_dataset *d, const float *global, float *delta,
                   double sigma, uint8_t keyv, int r, fa_error *err)
{
    fa_train_opts to;
    fa_train_dp dp;
    fa_train_opts_default(&to);
    to.steps = 1;
    to.sgd.lr = 1.0f;
    to.sgd.momentum = 0.0f;
    memset(&dp, 0, sizeof(dp));
    dp.sampling_rate = 0.1;
    dp.clip = 0.5;
    dp.noise_multiplier = sigma;
    for (int i = 0; i < FA_TRAIN_DP_KEY_BYTES; i++) /* rank 0's key is everyone's */
        dp.key[i] = r == 0 ? (uint8_t)(keyv * 7 + i) : (uint8_t)(0x5a + r);
    to.dp = &dp;
    return fa_local_round_run(lr, r == 0 ? global : NULL, d, &to, r == 0 ? delta : NULL, NULL,
                              err);
}

static int run_dp(fa_comm *c)
{
    const int r = fa_comm_rank(c), p = fa_comm_size(c);
    const uint32_t hidden[2] = {64, 32};
    const double sigma = 3.0;
    fa_mlp_config mc;
    fa_mlp_opts mo;
    fa_mlp *m = NULL;
    fa_local_round *lr = NULL;
    fa_dataset d;
    float *x, *global, *clean, *noisy;
    uint8_t *y;
    double v = 0, ratio;
    size_t np;
    fa_error err;

    if (fa_mlp_config_make(&mc, 100, hidden, 2, 10, &err) != 0)
        return failf(r, "config", &err);
    fa_mlp_opts_default(&mo);
    mo.backend = FA_MLP_CPU;
    if (fa_mlp_new(&m, &mc, &mo, &err) != 0)
        return failf(r, "mlp_new", &err);
    if (fa_local_round_new(&lr, c, m, NULL, &err) != 0)
        return failf(r, "local_round_new", &err);
    synthetic(&d, &x, &y, 1000, 100, 10);
    np = fa_mlp_layout_of(m)->n_params;
    global = malloc(np * sizeof(float));
    clean = malloc(np * sizeof(float));
    noisy = malloc(np * sizeof(float));
    fa_mlp_init_he(fa_mlp_layout_of(m), global, 1);
    for (uint8_t k = 0; k < 2; k++) {
        if (dp_step(lr, &d, global, clean, 0.0, k, r, &err) != 0 ||
            dp_step(lr, &d, global, noisy, sigma, k, r, &err) != 0)
            return failf(r, "local_round_run", &err);
        for (size_t i = 0; r == 0 && i < np; i++)
            v += ((double)noisy[i] - clean[i]) * ((double)noisy[i] - clean[i]);
    }
    v /= 2.0 * (double)np;
    ratio = v / pow(sigma * 0.5 / (0.1 * 1000), 2);
    /* 17748 values: relative standard error 0.011; noise from every rank
     * would give a ratio of p */
    if (r == 0 && fabs(ratio - 1.0) > 0.06) {
        fprintf(stderr, "FAIL dp rank=0 size=%d: update noise variance %.4e is %.3f times "
                        "(sigma C / q n)^2\n",
                p, v, ratio);
        return 1;
    }
    printf("ok dp rank=%d size=%d noise_variance_ratio=%.4f\n", r, p, r == 0 ? ratio : 1.0);
    fa_local_round_del(lr);
    fa_mlp_del(m);
    free(x);
    free(y);
    free(global);
    free(clean);
    free(noisy);
    return 0;
}

/* ---------------------------------------------------------------------- */

static float *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    float *buf;
    long len;
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    len = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = malloc((size_t)len + 1);
    *n = fread(buf, 1, (size_t)len, f) / sizeof(float);
    fclose(f);
    return buf;
}

static int compare(const char *a_path, const char *b_path, double tol)
{
    size_t na = 0, nb = 0;
    float *a = slurp(a_path, &na), *b = slurp(b_path, &nb);
    double scale = 0, diff = 0;
    if (!a || !b || na != nb || na == 0) {
        fprintf(stderr, "FAIL compare: cannot read %s / %s or sizes differ\n", a_path, b_path);
        return 1;
    }
    for (size_t i = 0; i < na; i++) {
        scale = fmax(scale, fabs(a[i]));
        diff = fmax(diff, fabs((double)a[i] - b[i]));
    }
    printf("%s compare %s %s: max diff %.3g, max |delta| %.3g, rel %.3g (tol %.3g)\n",
           diff <= tol * scale && scale > 0 ? "ok" : "FAIL", a_path, b_path, diff, scale,
           diff / scale, tol);
    free(a);
    free(b);
    return diff <= tol * scale && scale > 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    fa_comm *c = NULL;
    fa_error err;
    int rc;

    if (argc < 2) {
        fprintf(stderr, "usage: %s comm|ef KIND|train --out F|dp|compare A B\n", argv[0]);
        return 2;
    }
    if (strcmp(argv[1], "compare") == 0)
        return argc >= 4 ? compare(argv[2], argv[3], atof(opt(argc, argv, "--tol", "1e-4"))) : 2;
    if (fa_comm_new(&c, parse_device(opt(argc, argv, "--device", "cpu")), &err) != 0) {
        fprintf(stderr, "FAIL comm_new: %s\n", err.msg);
        return 1;
    }
    if (strcmp(argv[1], "comm") == 0)
        rc = check_comm(c);
    else if (strcmp(argv[1], "ef") == 0 && argc >= 3)
        rc = check_ef(c, argv[2]);
    else if (strcmp(argv[1], "train") == 0)
        rc = run_train(c, argc, argv);
    else if (strcmp(argv[1], "dp") == 0)
        rc = run_dp(c);
    else
        rc = 2;
    fa_comm_del(c);
    fa_comm_finalize();
    return rc;
}
