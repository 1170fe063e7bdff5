/* `fedagg-bench train`: centralised training of the built-in MLP on all of
 * Fashion-MNIST's 60 000 training images, evaluated on the 10 000 test
 * images after every epoch.
 *
 * Anchors, measured in the same run:
 *   accuracy    the Fashion-MNIST benchmark table's MLPClassifier
 *               (hidden 256-128-100, relu) result, 0.8833
 *               (github.com/zalandoresearch/fashion-mnist, benchmark table)
 *   throughput  OpenBLAS cblas_sgemm alone on exactly the matmuls of one
 *               training step (3 per layer, minus the unneeded input gradient
 *               of the first layer), same batch, same thread count: the
 *               ceiling for this model on this machine.  ratio = our
 *               achieved GFLOP/s (matmul FLOPs / training time) over it.
 *               The anchor runs in slices (1 s before training, 0.25 s after
 *               each epoch) so that both see the same load on a shared machine.
 *
 * JSON lines: one "train_epoch" per epoch, then "train_accuracy" and
 * "train_throughput".
 *
 * OpenBLAS threads default to 1: the figure of merit is samples/s per core,
 * and on this 2-core machine the way to use both cores is two data-parallel
 * ranks of one thread each (small batch-128 matmuls scale poorly across
 * threads, and worse when the cores are shared).  --threads 2 measures one
 * process on both cores.
 */
#include <cblas.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/fa_err.h"
#include "common/fa_time.h"
#include "model/mlp.h"
#include "model/rng.h"
#include "model/train.h"
#include "worker/data.h"

const char fa_bench_train_help[] =
    "centralised MLP training on Fashion-MNIST: accuracy vs the published MLP, GFLOP/s vs sgemm";

#define REF_ACCURACY 0.8833

/* Matmul FLOPs of one training step on a batch of B (2 per multiply-add). */
static double step_flops(const fa_mlp_config *c, uint32_t B)
{
    double f = 0;
    for (uint32_t l = 1; l <= c->n_layers; l++) {
        double mm = 2.0 * B * c->dims[l - 1] * c->dims[l];
        f += mm * (l == 1 ? 2 : 3); /* forward, dW, and dA except for the input layer */
    }
    return f;
}

/* cblas_sgemm alone on the matmuls of training steps for ~seconds; adds the
 * FLOPs done and the time taken to *flops and *spent. */
static void sgemm_anchor(const fa_mlp_config *c, uint32_t B, double seconds, double *flops,
                         double *spent)
{
    uint32_t maxd = 0;
    for (uint32_t l = 0; l <= c->n_layers; l++)
        maxd = c->dims[l] > maxd ? c->dims[l] : maxd;
    float *A = malloc((size_t)B * maxd * 4), *W = malloc((size_t)maxd * maxd * 4);
    float *Z = malloc((size_t)B * maxd * 4), *G = malloc((size_t)maxd * maxd * 4);
    fa_rng r;
    fa_rng_seed(&r, 1, 0);
    for (size_t i = 0; i < (size_t)B * maxd; i++)
        A[i] = (float)fa_rng_uniform(&r), Z[i] = (float)fa_rng_uniform(&r);
    for (size_t i = 0; i < (size_t)maxd * maxd; i++)
        W[i] = (float)fa_rng_uniform(&r) - 0.5f;

    double t0 = fa_time_mono_s(), t;
    uint64_t steps = 0;
    do {
        for (uint32_t l = 1; l <= c->n_layers; l++) {
            int in = (int)c->dims[l - 1], out = (int)c->dims[l], n = (int)B;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, out, in, 1.0f, A, in, W, in,
                        0.0f, Z, out);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, n, 1.0f, Z, out, A, in,
                        0.0f, G, in);
            if (l > 1)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, in, out, 1.0f, Z, out,
                            W, in, 0.0f, A, in);
        }
        steps++;
        t = fa_time_mono_s() - t0;
    } while (t < seconds);
    free(A);
    free(W);
    free(Z);
    free(G);
    *flops += step_flops(c, B) * (double)steps;
    *spent += t;
}

struct run {
    fa_data *test;
    const fa_mlp_config *cfg;
    uint32_t batch;
    double eval_seconds, t0, last;
    double anchor_flops, anchor_seconds; /* sgemm anchor slices, interleaved with training */
};

static int on_epoch(void *user, fa_mlp *m, uint32_t epoch, uint64_t step, double loss,
                    fa_error *err)
{
    struct run *r = user;
    fa_mlp_eval ev;
    double t = fa_time_mono_s();
    int rc = fa_mlp_evaluate(m, &r->test->ds, &ev, err);
    if (rc != 0)
        return rc;
    /* An anchor slice after every epoch, so that the anchor and the training
     * see the same load on a shared machine. */
    sgemm_anchor(r->cfg, r->batch, 0.25, &r->anchor_flops, &r->anchor_seconds);
    double done = fa_time_mono_s();
    r->eval_seconds += done - t;
    printf("{\"bench\":\"train_epoch\",\"epoch\":%u,\"steps\":%llu,\"train_loss\":%.5f,"
           "\"test_accuracy\":%.4f,\"test_loss\":%.5f,\"epoch_seconds\":%.2f}\n",
           epoch, (unsigned long long)step, loss, ev.accuracy, ev.mean_loss, t - r->last);
    fflush(stdout);
    r->last = done;
    return 0;
}

/* OpenBLAS chose its kernels when it loaded; if it fell back to generic ones
 * on a CPU it does not know (see fa_mlp_blas_advice), run this benchmark
 * again with OPENBLAS_CORETYPE set, so that it measures what an operator
 * gets by following the warning.  Returns only when it could not re-execute. */
static void reexec_with_better_blas(void)
{
    const char *advice = fa_mlp_blas_advice();

    if (!advice || getenv("FEDAGG_NO_REEXEC"))
        return;
    fprintf(stderr, "fedagg-bench train: OpenBLAS chose generic '%s' kernels; re-running with "
                    "OPENBLAS_CORETYPE=%s\n", fa_mlp_blas_core(), advice);
    fa_mlp_blas_reexec_self();
    fprintf(stderr, "fedagg-bench train: re-exec failed; continuing with generic kernels\n");
}

static void usage(FILE *f)
{
    fprintf(f, "usage: fedagg-bench train [--epochs 20] [--batch 128] [--lr 0.1] [--momentum 0.9]\n"
               "                          [--wd 5e-4] [--schedule cosine|constant] [--seed 1]\n"
               "                          [--threads 1] [--backend cpu|gpu|auto]\n");
}

int fa_bench_train(int argc, char **argv)
{
    static const struct option opts[] = {
        {"epochs", required_argument, NULL, 'e'}, {"batch", required_argument, NULL, 'b'},
        {"lr", required_argument, NULL, 'l'},     {"momentum", required_argument, NULL, 'm'},
        {"wd", required_argument, NULL, 'w'},     {"schedule", required_argument, NULL, 'S'},
        {"seed", required_argument, NULL, 's'},   {"threads", required_argument, NULL, 't'},
        {"backend", required_argument, NULL, 'B'}, {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    fa_train_opts to;
    fa_mlp_opts mo;
    fa_mlp_config cfg;
    fa_data train = {0}, test = {0};
    fa_mlp *m = NULL;
    fa_error err;
    int threads = 1, c, rc = 1;

    fa_train_opts_default(&to);
    to.epochs = 20;
    to.batch_size = 128;
    to.sgd.lr = 0.1f;
    to.sgd.momentum = 0.9f;
    to.sgd.weight_decay = 5e-4f;
    to.lr_schedule = FA_LR_COSINE;
    to.seed = 1;
    fa_mlp_opts_default(&mo);
    mo.backend = FA_MLP_CPU;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'e': to.epochs = (uint32_t)atoi(optarg); break;
        case 'b': to.batch_size = (uint32_t)atoi(optarg); break;
        case 'l': to.sgd.lr = strtof(optarg, NULL); break;
        case 'm': to.sgd.momentum = strtof(optarg, NULL); break;
        case 'w': to.sgd.weight_decay = strtof(optarg, NULL); break;
        case 'S': to.lr_schedule = strcmp(optarg, "constant") == 0 ? FA_LR_CONSTANT : FA_LR_COSINE; break;
        case 's': to.seed = strtoull(optarg, NULL, 10); break;
        case 't': threads = atoi(optarg); break;
        case 'B':
            mo.backend = strcmp(optarg, "gpu") == 0    ? FA_MLP_GPU
                         : strcmp(optarg, "auto") == 0 ? FA_MLP_AUTO
                                                       : FA_MLP_CPU;
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (to.epochs == 0 || to.batch_size == 0 || threads <= 0) {
        usage(stderr);
        return 2;
    }
    mo.max_batch = to.batch_size;
    mo.cpu_threads = threads;
    if (mo.backend != FA_MLP_GPU)
        reexec_with_better_blas();

    if (fa_data_load_fashion_mnist(&train, 0, &err) != 0 ||
        fa_data_load_fashion_mnist(&test, 1, &err) != 0) {
        fprintf(stderr, "fedagg-bench train: %s\n", err.msg);
        goto out;
    }
    fa_mlp_config_default(&cfg);
    if (fa_mlp_new(&m, &cfg, &mo, &err) != 0 || fa_mlp_init(m, to.seed, &err) != 0) {
        fprintf(stderr, "fedagg-bench train: %s\n", err.msg);
        goto out;
    }
    openblas_set_num_threads(threads);

    struct run r = {.test = &test, .cfg = &cfg, .batch = to.batch_size};
    sgemm_anchor(&cfg, to.batch_size, 1.0, &r.anchor_flops, &r.anchor_seconds);
    fa_train_result res;
    to.report = on_epoch;
    to.report_user = &r;
    r.t0 = r.last = fa_time_mono_s();
    if (fa_train_run(m, &train.ds, &to, &res, &err) != 0) {
        fprintf(stderr, "fedagg-bench train: %s\n", err.msg);
        goto out;
    }
    double train_seconds = fa_time_mono_s() - r.t0 - r.eval_seconds;
    fa_mlp_eval ev;
    if (fa_mlp_evaluate(m, &test.ds, &ev, &err) != 0) {
        fprintf(stderr, "fedagg-bench train: %s\n", err.msg);
        goto out;
    }
    char arch[64];
    printf("{\"bench\":\"train_accuracy\",\"model\":\"mlp-%s\",\"backend\":\"%s\",\"epochs\":%u,"
           "\"batch\":%u,\"lr\":%g,\"schedule\":\"%s\",\"momentum\":%g,\"weight_decay\":%g,"
           "\"input\":\"pixel/255\",\"test_accuracy\":%.4f,\"test_loss\":%.4f,"
           "\"ref\":\"fashion_mnist_benchmark_mlp_256_128_100\",\"ref_accuracy\":%.4f,"
           "\"ratio\":%.4f,\"target\":0.88,\"met\":%s}\n",
           fa_mlp_config_str(&cfg, arch, sizeof(arch)), fa_mlp_backend_name(m), to.epochs,
           to.batch_size, to.sgd.lr, to.lr_schedule == FA_LR_COSINE ? "cosine" : "constant",
           to.sgd.momentum, to.sgd.weight_decay, ev.accuracy, ev.mean_loss, REF_ACCURACY,
           ev.accuracy / REF_ACCURACY, ev.accuracy >= 0.88 ? "true" : "false");
    double ref_gflops = r.anchor_flops / r.anchor_seconds / 1e9;
    double sps = (double)res.samples / train_seconds;
    double gflops = step_flops(&cfg, 1) * (double)res.samples / train_seconds / 1e9;
    printf("{\"bench\":\"train_throughput\",\"backend\":\"%s\",\"threads\":%d,\"batch\":%u,"
           "\"samples\":%llu,\"train_seconds\":%.2f,\"samples_per_s\":%.0f,"
           "\"samples_per_s_per_core\":%.0f,\"gflops\":%.2f,\"blas_core\":\"%s\","
           "\"ref\":\"openblas_sgemm_same_shapes\",\"ref_gflops\":%.2f,\"ratio\":%.3f}\n",
           fa_mlp_backend_name(m), threads, to.batch_size, (unsigned long long)res.samples,
           train_seconds, sps, sps / threads, gflops, fa_mlp_blas_core(), ref_gflops,
           gflops / ref_gflops);
    rc = 0;
out:
    fa_mlp_del(m);
    fa_data_free(&train);
    fa_data_free(&test);
    return rc;
}
