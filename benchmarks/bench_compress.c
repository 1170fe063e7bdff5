/* bench_compress.c - `fedagg-bench compress`: gradient compression of the
 * local all-reduce (docs/history.md, "Compression"; docs/architecture.md).
 *
 * For none (the anchor), PowerSGD r = 1, 2, 4, top-k 1 % and QSGD8: the
 * default MLP (784-256-128-10) trains on Fashion-MNIST for a fixed number of
 * epochs, data-parallel over 2 ranks (global batch 64, SGD lr 0.05 with a
 * cosine decay over the run, momentum 0.9, the same seed and initial weights
 * for every method), through fa_local_round; then rank 0 measures test
 * accuracy.  The cosine decay makes the run end converged: with a constant
 * rate the final accuracy of the anchor alone varies by +-1 point between
 * seeds (0.838..0.864 over 6 seeds), which would drown the effect measured;
 * with it, 0.875..0.877 over 3 seeds.  Compression settings are config.proto's
 * defaults (start step 10, min_compress_numel 1024, error feedback, warm
 * start) unless flags say otherwise.  One JSON line per
 * method: the bytes each rank sent per step (measured by the communicator:
 * the payload of its all-reduce contributions, averaged over the whole run,
 * PowerSGD's plain warm-up steps included; and the ring-model wire bytes),
 * test accuracy, and both next to the anchor's measured in the same run, with
 * the ratios.  Target: PowerSGD r = 4 sends >= 20x fewer bytes than
 * none and loses <= 0.5 accuracy points.
 *
 * Launching: started outside MPI it re-executes itself under
 * `mpirun -np RANKS --oversubscribe` (so `fedagg-bench compress` and
 * benchmarks/run-all.sh just work); under mpirun/srun it runs as is.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "benchmarks/measure.h"
#include "common/fa_log.h"
#include "model/mlp.h"
#include "model/train.h"
#include "worker/comm.h"
#include "worker/compress.h"
#include "worker/data.h"
#include "worker/local_round.h"

const char fa_bench_compress_help[] =
    "gradient compression (none, PowerSGD r=1,2,4, top-k 1%, QSGD8): bytes/step and test accuracy, 2 ranks";

typedef struct method {
    const char *id;   /* for --methods */
    const char *name; /* in the JSON */
    int kind;
    uint32_t rank;
    double fraction;
} method;

static const method methods[] = {
    {"none", "none", FA_COMPRESS_NONE, 0, 0},
    {"powersgd1", "powersgd", FA_COMPRESS_POWERSGD, 1, 0},
    {"powersgd2", "powersgd", FA_COMPRESS_POWERSGD, 2, 0},
    {"powersgd4", "powersgd", FA_COMPRESS_POWERSGD, 4, 0},
    {"topk", "topk", FA_COMPRESS_TOPK, 0, 0.01},
    {"qsgd8", "qsgd8", FA_COMPRESS_QSGD8, 0, 0},
};
#define N_METHODS (sizeof(methods) / sizeof(methods[0]))

typedef struct bench_opts {
    uint32_t epochs, batch, ranks, limit;
    double lr;
    uint64_t seed;
    int device;
    const char *only; /* --methods: comma-separated ids; the anchor always runs */
    uint32_t min_compress_numel, powersgd_start_step; /* 0: config.proto's defaults */
    int schedule; /* FA_LR_COSINE (default) or FA_LR_CONSTANT */
} bench_opts;

static int selected(const bench_opts *bo, const method *me)
{
    const char *p = bo->only;
    size_t n = strlen(me->id);
    if (!p || me->kind == FA_COMPRESS_NONE)
        return 1;
    while (*p) {
        if (strncmp(p, me->id, n) == 0 && (p[n] == ',' || p[n] == '\0'))
            return 1;
        p = strchr(p, ',');
        if (!p)
            break;
        p++;
    }
    return 0;
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: fedagg-bench compress [--epochs E] [--ranks R] [--batch B] [--lr LR]\n"
            "                             [--seed S] [--limit N] [--device cpu|auto|gpu]\n"
            "                             [--methods none,powersgd1,powersgd2,powersgd4,topk,qsgd8]\n"
            "                             [--min-compress-numel N] [--powersgd-start-step S]\n"
            "                             [--schedule cosine|constant]\n"
            "  E epochs (default 3) of the default MLP on Fashion-MNIST over R ranks\n"
            "  (default 2) for each compression method; --limit trains on the first N\n"
            "  images only.  Outside MPI it re-runs itself under mpirun -np R.\n");
}

static int under_mpi(void)
{
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK") ||
           getenv("FA_BENCH_NO_MPIRUN");
}

static int in_path(const char *prog)
{
    const char *path = getenv("PATH");
    char buf[PATH_MAX];
    while (path && *path) {
        const char *end = strchr(path, ':');
        size_t len = end ? (size_t)(end - path) : strlen(path);
        snprintf(buf, sizeof(buf), "%.*s/%s", (int)len, path, prog);
        if (access(buf, X_OK) == 0)
            return 1;
        path += len + (end ? 1 : 0);
    }
    return 0;
}

/* exec mpirun -np R <this binary> compress ARGS...; returns only on failure. */
static int reexec_under_mpirun(int argc, char **argv, uint32_t ranks)
{
    char self[PATH_MAX], np[16];
    char **av = calloc((size_t)argc + 16, sizeof(char *));
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    int k = 0;
    if (!av || n <= 0)
        return -1;
    self[n] = '\0';
    snprintf(np, sizeof(np), "%u", ranks);
    av[k++] = "mpirun";
    if (geteuid() == 0)
        av[k++] = "--allow-run-as-root";
    av[k++] = "--oversubscribe";
    av[k++] = "-np";
    av[k++] = np;
    av[k++] = self;
    for (int i = 0; i < argc; i++) /* argv[0] is "compress" */
        av[k++] = argv[i];
    av[k] = NULL;
    /* the ranks share the cores: one BLAS thread each */
    setenv("OPENBLAS_NUM_THREADS", "1", 0);
    setenv("FA_BENCH_NO_MPIRUN", "1", 1);
    fflush(NULL);
    execvp("mpirun", av);
    fprintf(stderr, "fedagg-bench compress: cannot run mpirun: %s\n", strerror(errno));
    free(av);
    return -1;
}

typedef struct outcome {
    double bytes_per_step, wire_per_step, steady_bytes, accuracy, loss, seconds;
    uint64_t steps;
} outcome;

static int run_method(fa_comm *comm, const bench_opts *bo, const method *me, const fa_dataset *train,
                      const fa_dataset *test, const float *global, outcome *out, fa_error *err)
{
    const int rank = fa_comm_rank(comm);
    fa_mlp_config mc;
    fa_mlp_opts mo;
    fa_mlp *m = NULL;
    fa_local_round *lr = NULL;
    fa_compress_config cc;
    fa_train_opts to;
    fa_local_round_result res;
    fa_mlp_eval ev;
    float *delta = NULL;
    size_t np;
    int rc;

    fa_mlp_config_default(&mc);
    fa_mlp_opts_default(&mo);
    mo.backend = bo->device == FA_COMM_DEVICE_CPU ? FA_MLP_CPU : FA_MLP_AUTO;
    if ((rc = fa_mlp_new(&m, &mc, &mo, err)) != 0)
        return rc;
    np = fa_mlp_layout_of(m)->n_params;
    fa_compress_config_default(&cc);
    cc.kind = me->kind;
    if (me->rank)
        cc.powersgd_rank = me->rank;
    if (me->fraction > 0)
        cc.topk_fraction = me->fraction;
    cc.seed = bo->seed;
    if (bo->min_compress_numel)
        cc.min_compress_numel = bo->min_compress_numel;
    if (bo->powersgd_start_step)
        cc.powersgd_start_step = bo->powersgd_start_step;
    if ((rc = fa_local_round_new(&lr, comm, m, &cc, err)) != 0)
        goto out;
    fa_train_opts_default(&to);
    to.epochs = bo->epochs;
    to.batch_size = bo->batch;
    to.sgd.lr = (float)bo->lr;
    to.sgd.momentum = 0.9f;
    to.lr_schedule = bo->schedule;
    to.seed = bo->seed;
    delta = malloc(np * sizeof(float));
    if (!delta) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
        goto out;
    }
    if ((rc = fa_local_round_run(lr, global, train, &to, delta, &res, err)) != 0)
        goto out;
    out->steps = res.steps;
    out->bytes_per_step = (double)res.payload_bytes / (double)res.steps;
    out->wire_per_step = (double)res.wire_bytes / (double)res.steps;
    out->steady_bytes = (double)fa_compress_payload_bytes(fa_local_round_compressor(lr));
    out->loss = res.mean_loss;
    out->seconds = res.seconds;
    if (rank == 0) {
        for (size_t i = 0; i < np; i++)
            delta[i] += global[i];
        if ((rc = fa_mlp_set_params(m, delta, err)) != 0 ||
            (rc = fa_mlp_evaluate(m, test, &ev, err)) != 0)
            goto out;
        out->accuracy = ev.accuracy;
    }
out:
    free(delta);
    fa_local_round_del(lr);
    fa_mlp_del(m);
    return rc;
}

int fa_bench_compress(int argc, char **argv)
{
    bench_opts bo = {.epochs = 3, .batch = 64, .ranks = 2, .limit = 0, .lr = 0.05, .seed = 1,
                     .device = FA_COMM_DEVICE_CPU, .schedule = FA_LR_COSINE};
    fa_comm *comm = NULL;
    fa_data train = {0}, test = {0};
    fa_dataset tr;
    fa_mlp_config mc;
    fa_mlp_layout layout;
    float *global = NULL;
    outcome base = {0};
    fa_error err;
    int rc = 0, rank;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (v && !strcmp(a, "--epochs")) {
            bo.epochs = (uint32_t)strtoul(v, NULL, 10), i++;
        } else if (v && !strcmp(a, "--ranks")) {
            bo.ranks = (uint32_t)strtoul(v, NULL, 10), i++;
        } else if (v && !strcmp(a, "--batch")) {
            bo.batch = (uint32_t)strtoul(v, NULL, 10), i++;
        } else if (v && !strcmp(a, "--lr")) {
            bo.lr = strtod(v, NULL), i++;
        } else if (v && !strcmp(a, "--seed")) {
            bo.seed = strtoull(v, NULL, 10), i++;
        } else if (v && !strcmp(a, "--limit")) {
            bo.limit = (uint32_t)strtoul(v, NULL, 10), i++;
        } else if (v && !strcmp(a, "--min-compress-numel")) {
            bo.min_compress_numel = (uint32_t)strtoul(v, NULL, 10), i++;
        } else if (v && !strcmp(a, "--powersgd-start-step")) {
            bo.powersgd_start_step = (uint32_t)strtoul(v, NULL, 10), i++;
        } else if (v && !strcmp(a, "--schedule")) {
            bo.schedule = !strcmp(v, "constant") ? FA_LR_CONSTANT : FA_LR_COSINE, i++;
        } else if (v && !strcmp(a, "--methods")) {
            bo.only = v, i++;
        } else if (v && !strcmp(a, "--device")) {
            bo.device = !strcmp(v, "gpu") ? FA_COMM_DEVICE_GPU
                        : !strcmp(v, "auto") ? FA_COMM_DEVICE_AUTO
                                             : FA_COMM_DEVICE_CPU;
            i++;
        } else {
            fprintf(stderr, "fedagg-bench compress: unknown argument '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (bo.epochs == 0 || bo.batch == 0 || bo.ranks == 0 || !(bo.lr > 0)) {
        fprintf(stderr, "fedagg-bench compress: epochs, batch, ranks and lr must be positive\n");
        return 2;
    }
    if (!under_mpi() && bo.ranks > 1) {
        if (in_path("mpirun"))
            return reexec_under_mpirun(argc, argv, bo.ranks) == 0 ? 0 : 1;
        fprintf(stderr, "fedagg-bench compress: mpirun not found; running 1 rank\n");
    }

    if ((rc = fa_comm_new(&comm, bo.device, &err)) != 0) {
        fprintf(stderr, "fedagg-bench compress: %s\n", err.msg);
        return 1;
    }
    rank = fa_comm_rank(comm);
    if ((rc = fa_data_load_fashion_mnist(&train, 0, &err)) != 0 ||
        (rank == 0 && (rc = fa_data_load_fashion_mnist(&test, 1, &err)) != 0)) {
        if (rank == 0)
            printf("{\"bench\":\"compress\",\"error\":\"%s\"}\n", fa_strerror(rc));
        fprintf(stderr, "fedagg-bench compress: %s\n", err.msg);
        rc = 1;
        goto out;
    }
    tr = train.ds;
    if (bo.limit > 0 && bo.limit < tr.n)
        tr.n = bo.limit;

    /* The same initial global model for every method. */
    fa_mlp_config_default(&mc);
    if ((rc = fa_mlp_layout_init(&layout, &mc, &err)) != 0)
        goto out;
    global = malloc(layout.n_params * sizeof(float));
    if (!global) {
        rc = 1;
        goto out;
    }
    fa_mlp_init_he(&layout, global, bo.seed);

    for (size_t k = 0; k < N_METHODS; k++) {
        const method *me = &methods[k];
        outcome o = {0};
        double t0 = fa_bench_now_s();
        char label[32];
        if (!selected(&bo, me))
            continue;
        if (me->kind == FA_COMPRESS_POWERSGD)
            snprintf(label, sizeof(label), ",\"rank\":%u", me->rank);
        else if (me->kind == FA_COMPRESS_TOPK)
            snprintf(label, sizeof(label), ",\"fraction\":%g", me->fraction);
        else
            label[0] = '\0';
        rc = run_method(comm, &bo, me, &tr, &test.ds, global, &o, &err);
        if (rc != 0) {
            fprintf(stderr, "fedagg-bench compress: %s: %s\n", me->name, err.msg);
            if (rank == 0)
                printf("{\"bench\":\"compress\",\"method\":\"%s\"%s,\"error\":\"%s\"}\n", me->name,
                       label, fa_strerror(rc));
            goto out;
        }
        if (k == 0)
            base = o;
        if (rank == 0) {
            printf("{\"bench\":\"compress\",\"method\":\"%s\"%s,\"ranks\":%d,\"epochs\":%u,"
                   "\"steps\":%llu,\"batch\":%u,\"lr\":%g,\"schedule\":\"%s\",\"train_examples\":%u,"
                   "\"bytes_per_step\":%.0f,\"steady_bytes_per_step\":%.0f,"
                   "\"wire_bytes_per_step\":%.0f,\"test_accuracy\":%.4f,\"train_loss\":%.4f,"
                   "\"seconds\":%.1f,\"ref\":\"none\",\"ref_bytes_per_step\":%.0f,"
                   "\"ref_test_accuracy\":%.4f,\"bytes_ratio\":%.2f,\"accuracy_drop_points\":%.2f}\n",
                   me->name, label, fa_comm_size(comm), bo.epochs, (unsigned long long)o.steps,
                   bo.batch, bo.lr, bo.schedule == FA_LR_COSINE ? "cosine" : "constant", tr.n,
                   o.bytes_per_step, o.steady_bytes, o.wire_per_step, o.accuracy,
                   o.loss, fa_bench_now_s() - t0, base.bytes_per_step, base.accuracy,
                   base.bytes_per_step / o.bytes_per_step, 100.0 * (base.accuracy - o.accuracy));
            fflush(stdout);
        }
    }
out:
    free(global);
    fa_data_free(&train);
    fa_data_free(&test);
    fa_comm_del(comm);
    fa_comm_finalize();
    return rc == 0 ? 0 : 1;
}
