/* backend_cpu.c - the MLP on the CPU: OpenBLAS sgemm for the three matmuls
 * of each layer (forward, weight gradient, input gradient) and plain loops,
 * written for the compiler to vectorise, for everything elementwise.
 *
 * Row-major throughout, W_l is (out, in) as in PyTorch:
 *   forward   Z (n, out) = A (n, in) . W^T          sgemm(N, T)
 *   dW        (out, in)  = dZ^T (out, n) . A (n, in)  sgemm(T, N)
 *   dA        (n, in)    = dZ (n, out) . W (out, in)  sgemm(N, N)
 */
#include <cblas.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <strings.h>

#include "common/fa_log.h"
#include "model/backend.h"

/* The elementwise loops are compiled for AVX-512, AVX2 and baseline x86-64,
 * chosen when the program loads (GCC/clang function multi-versioning), so one
 * binary runs everywhere and uses the vector units it finds. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__SANITIZE_ADDRESS__)
#define FA_VEC_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define FA_VEC_CLONES
#endif

/* Not in every cblas.h. */
char *openblas_get_corename(void);

const char *fa_mlp_blas_core(void) { return openblas_get_corename(); }

const char *fa_mlp_blas_advice(void)
{
    const char *core = openblas_get_corename();
    if (getenv("OPENBLAS_CORETYPE") || !core)
        return NULL;
    /* the generic x86-64 kernel sets of a DYNAMIC_ARCH build */
    if (strcasecmp(core, "Prescott") != 0 && strcasecmp(core, "Core2") != 0 &&
        strcasecmp(core, "Nehalem") != 0 && strcasecmp(core, "Sandybridge") != 0)
        return NULL;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
        return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return "Haswell";
#endif
    return NULL;
}

void fa_mlp_blas_reexec(char **argv)
{
    const char *advice = fa_mlp_blas_advice();
    if (!advice || getenv("FEDAGG_NO_REEXEC"))
        return;
    setenv("OPENBLAS_CORETYPE", advice, 1);
    execv("/proc/self/exe", argv);
}

void fa_mlp_blas_reexec_self(void)
{
    static char buf[1 << 16];
    char *args[256];
    size_t len, n = 0;
    FILE *f;

    if (!fa_mlp_blas_advice() || getenv("FEDAGG_NO_REEXEC") ||
        !(f = fopen("/proc/self/cmdline", "rb")))
        return;
    len = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[len] = '\0';
    for (size_t i = 0; i < len && n < 255; i += strlen(buf + i) + 1)
        args[n++] = buf + i;
    args[n] = NULL;
    fa_mlp_blas_reexec(args);
}

struct fa_backend {
    fa_mlp_layout l;
    uint32_t max_batch;
    float *params;  /* (n_params) */
    float *grads;   /* (n_params) */
    float *mom;     /* (n_params) */
    float *act[FA_MLP_MAX_LAYERS + 1]; /* act[l] (max_batch, dims[l]) for l >= 1; act[0] is the input */
    float *dz[2];   /* (max_batch, max dim) ping-pong gradients w.r.t. pre-activations */
    /* DP-SGD only, allocated on its first batch: */
    float *dzl[FA_MLP_MAX_LAYERS + 1]; /* dzl[l] (max_batch, dims[l]): every layer's dz kept */
    double *sq;                        /* (max_batch) per-example squared gradient norms */
    float *fac;                        /* (max_batch) per-example clip factors */
};

static void cpu_destroy(fa_backend *b)
{
    if (!b)
        return;
    free(b->params);
    free(b->grads);
    free(b->mom);
    for (uint32_t i = 0; i <= FA_MLP_MAX_LAYERS; i++)
        free(b->act[i]);
    free(b->dz[0]);
    free(b->dz[1]);
    for (uint32_t i = 0; i <= FA_MLP_MAX_LAYERS; i++)
        free(b->dzl[i]);
    free(b->sq);
    free(b->fac);
    free(b);
}

static float *falloc(size_t n)
{
    /* 64-byte aligned for the vector loops and sgemm. */
    void *p = NULL;
    if (posix_memalign(&p, 64, (n ? n : 1) * sizeof(float)) != 0)
        return NULL;
    memset(p, 0, (n ? n : 1) * sizeof(float));
    return p;
}

static int cpu_create(fa_backend **out, const fa_mlp_layout *l, const fa_mlp_opts *o,
                      fa_error *err)
{
    fa_backend *b = calloc(1, sizeof(*b));
    const fa_mlp_config *c = &l->config;
    size_t maxd = 0;
    int ok;

    *out = NULL;
    if (!b)
        return fa_errorf(err, FA_ERR_NOMEM, "mlp: out of memory");
    b->l = *l;
    b->max_batch = o->max_batch;
    for (uint32_t i = 0; i <= c->n_layers; i++)
        maxd = c->dims[i] > maxd ? c->dims[i] : maxd;
    b->params = falloc(l->n_params);
    b->grads = falloc(l->n_params);
    b->mom = falloc(l->n_params);
    b->dz[0] = falloc((size_t)o->max_batch * maxd);
    b->dz[1] = falloc((size_t)o->max_batch * maxd);
    ok = b->params && b->grads && b->mom && b->dz[0] && b->dz[1];
    for (uint32_t i = 1; ok && i <= c->n_layers; i++)
        ok = (b->act[i] = falloc((size_t)o->max_batch * c->dims[i])) != NULL;
    if (!ok) {
        cpu_destroy(b);
        return fa_errorf(err, FA_ERR_NOMEM, "mlp: out of memory for %zu parameters, batch %u",
                         l->n_params, o->max_batch);
    }
    if (o->cpu_threads > 0)
        openblas_set_num_threads(o->cpu_threads);
    static atomic_flag warned = ATOMIC_FLAG_INIT; /* one warning per process */
    const char *advice = fa_mlp_blas_advice();
    if (advice && !atomic_flag_test_and_set(&warned))
        fa_log(FA_LOG_WARN, "OpenBLAS runs generic kernels on this CPU; training is several times "
               "slower than it could be: start the process with OPENBLAS_CORETYPE set",
               "blas_core=%s OPENBLAS_CORETYPE=%s", fa_mlp_blas_core(), advice);
    *out = b;
    return 0;
}

static int cpu_set_params(fa_backend *b, const float *host, fa_error *err)
{
    memcpy(b->params, host, b->l.n_params * sizeof(float));
    return 0;
}

static int cpu_get_params(fa_backend *b, float *host, fa_error *err)
{
    memcpy(host, b->params, b->l.n_params * sizeof(float));
    return 0;
}

/* z (n, out) += bias, then ReLU when relu is set. */
FA_VEC_CLONES static void bias_act(float *restrict z, const float *restrict bias, uint32_t n, uint32_t out,
                     int relu)
{
    for (uint32_t i = 0; i < n; i++) {
        float *restrict row = z + (size_t)i * out;
        if (relu)
            for (uint32_t j = 0; j < out; j++) {
                float v = row[j] + bias[j];
                row[j] = v > 0.0f ? v : 0.0f; /* maxps, no branch */
            }
        else
            for (uint32_t j = 0; j < out; j++)
                row[j] += bias[j];
    }
}

/* Softmax cross-entropy over logits (n, C): statistics, and when dz is not
 * NULL, dz = scale * (softmax - onehot). */
static void softmax_xent(const float *restrict logits, const uint8_t *restrict y, uint32_t n,
                         uint32_t C, float scale, float *restrict dz, fa_mlp_stats *st)
{
    double loss = 0.0;
    uint32_t correct = 0;

    for (uint32_t i = 0; i < n; i++) {
        const float *restrict z = logits + (size_t)i * C;
        float mx = z[0], sum = 0.0f;
        uint32_t arg = 0;
        for (uint32_t j = 1; j < C; j++)
            if (z[j] > mx) {
                mx = z[j];
                arg = j;
            }
        for (uint32_t j = 0; j < C; j++)
            sum += expf(z[j] - mx);
        loss += (double)(logf(sum) + mx - z[y[i]]);
        correct += arg == y[i];
        if (dz) {
            float *restrict d = dz + (size_t)i * C, inv = scale / sum;
            for (uint32_t j = 0; j < C; j++)
                d[j] = expf(z[j] - mx) * inv;
            d[y[i]] -= scale;
        }
    }
    st->loss_sum = loss;
    st->correct = correct;
    st->n = n;
}

/* db (out) = column sums of dz (n, out); += with accumulate. */
FA_VEC_CLONES static void bias_grad_acc(const float *restrict dz, uint32_t n, uint32_t out,
                                        float *restrict db, int accumulate)
{
    if (!accumulate)
        memset(db, 0, out * sizeof(float));
    for (uint32_t i = 0; i < n; i++) {
        const float *restrict row = dz + (size_t)i * out;
        for (uint32_t j = 0; j < out; j++)
            db[j] += row[j];
    }
}

/* d = d * [act > 0], over m values. */
FA_VEC_CLONES static void relu_mask(float *restrict d, const float *restrict act, size_t m)
{
    for (size_t k = 0; k < m; k++)
        d[k] = act[k] > 0.0f ? d[k] : 0.0f;
}

static int cpu_run(fa_backend *b, const float *x, const uint8_t *y, uint32_t n, int train,
                   float scale, float *logits, fa_mlp_stats *st, fa_error *err)
{
    const fa_mlp_config *c = &b->l.config;
    const uint32_t L = c->n_layers;
    const float *a[FA_MLP_MAX_LAYERS + 1];
    fa_mlp_stats dummy;

    if (!st)
        st = &dummy;
    if (n == 0) {
        memset(st, 0, sizeof(*st));
        if (train)
            memset(b->grads, 0, b->l.n_params * sizeof(float));
        return 0;
    }

    /* Forward: a[l] (n, dims[l]). */
    a[0] = x;
    for (uint32_t l = 1; l <= L; l++) {
        const uint32_t in = c->dims[l - 1], out = c->dims[l];
        const fa_mlp_tensor *wt = &b->l.tensors[2 * (l - 1)], *bt = wt + 1;
        float *z = b->act[l];
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)out, (int)in, 1.0f,
                    a[l - 1], (int)in, b->params + wt->offset, (int)in, 0.0f, z, (int)out);
        bias_act(z, b->params + bt->offset, n, out, l < L);
        a[l] = z;
    }
    if (logits)
        memcpy(logits, a[L], (size_t)n * c->dims[L] * sizeof(float));

    /* Loss, and dz_L (n, C) when training. */
    float *dz = b->dz[0], *dnext = b->dz[1];
    softmax_xent(a[L], y, n, c->dims[L], scale, train ? dz : NULL, st);
    if (!train)
        return 0;

    /* Backward, layer L down to 1. */
    for (uint32_t l = L; l >= 1; l--) {
        const uint32_t in = c->dims[l - 1], out = c->dims[l];
        const fa_mlp_tensor *wt = &b->l.tensors[2 * (l - 1)], *bt = wt + 1;
        float *db = b->grads + bt->offset;

        /* dW (out, in) = dz^T (out, n) . a[l-1] (n, in) */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)out, (int)in, (int)n, 1.0f, dz,
                    (int)out, a[l - 1], (int)in, 0.0f, b->grads + wt->offset, (int)in);
        bias_grad_acc(dz, n, out, db, 0);
        if (l == 1)
            break;
        /* dz_{l-1} (n, in) = (dz (n, out) . W (out, in)) * [a[l-1] > 0] */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)in, (int)out, 1.0f,
                    dz, (int)out, b->params + wt->offset, (int)in, 0.0f, dnext, (int)in);
        relu_mask(dnext, a[l - 1], (size_t)n * in);
        float *t = dz;
        dz = dnext;
        dnext = t;
    }
    return 0;
}

/* sq[i] += ||dz[i]||^2 (||a[i]||^2 + 1): layer l's share of example i's
 * squared gradient norm (weight outer product and bias).  Doubles: the
 * norms decide the clipping, so they are summed without cancellation. */
FA_VEC_CLONES static void ghost_norms(const float *restrict dz, uint32_t out,
                                      const float *restrict a, uint32_t in, uint32_t n,
                                      double *restrict sq)
{
    for (uint32_t i = 0; i < n; i++) {
        const float *restrict g = dz + (size_t)i * out, *restrict x = a + (size_t)i * in;
        double g2 = 0.0, a2 = 0.0;
        for (uint32_t j = 0; j < out; j++)
            g2 += (double)g[j] * g[j];
        for (uint32_t k = 0; k < in; k++)
            a2 += (double)x[k] * x[k];
        sq[i] += g2 * (a2 + 1.0);
    }
}

/* Row i of d (n, cols) times f[i]. */
FA_VEC_CLONES static void scale_rows(float *restrict d, uint32_t n, uint32_t cols,
                                     const float *restrict f)
{
    for (uint32_t i = 0; i < n; i++) {
        float *restrict row = d + (size_t)i * cols;
        const float fi = f[i];
        for (uint32_t j = 0; j < cols; j++)
            row[j] *= fi;
    }
}

static int dp_alloc(fa_backend *b, fa_error *err)
{
    const fa_mlp_config *c = &b->l.config;
    int ok = 1;
    if (b->sq)
        return 0;
    for (uint32_t l = 1; ok && l <= c->n_layers; l++)
        ok = (b->dzl[l] = falloc((size_t)b->max_batch * c->dims[l])) != NULL;
    if (ok) {
        b->sq = calloc(b->max_batch, sizeof(double));
        b->fac = falloc(b->max_batch);
        ok = b->sq && b->fac;
    }
    if (!ok) {
        for (uint32_t l = 0; l <= FA_MLP_MAX_LAYERS; l++) {
            free(b->dzl[l]);
            b->dzl[l] = NULL;
        }
        free(b->sq);
        free(b->fac);
        b->sq = NULL;
        b->fac = NULL;
        return fa_errorf(err, FA_ERR_NOMEM, "mlp: out of memory for DP-SGD's per-layer gradients");
    }
    return 0;
}

/* DP-SGD's clipped backward (backend.h): one forward, one input-gradient
 * pass that keeps every layer's dz and sums the ghost norms, then the rows
 * of each dz scaled by the example's clip factor and the weight and bias
 * gradients taken from them. */
static int cpu_run_dp(fa_backend *b, const float *x, const uint8_t *y, uint32_t n, float clip,
                      float scale, int accumulate, float *norms, fa_mlp_stats *st, fa_error *err)
{
    const fa_mlp_config *c = &b->l.config;
    const uint32_t L = c->n_layers;
    const float *a[FA_MLP_MAX_LAYERS + 1];
    fa_mlp_stats dummy;
    int rc;

    if (!st)
        st = &dummy;
    memset(st, 0, sizeof(*st));
    if (n == 0) {
        if (!accumulate)
            memset(b->grads, 0, b->l.n_params * sizeof(float));
        return 0;
    }
    if ((rc = dp_alloc(b, err)) != 0)
        return rc;

    /* Forward: a[l] (n, dims[l]). */
    a[0] = x;
    for (uint32_t l = 1; l <= L; l++) {
        const uint32_t in = c->dims[l - 1], out = c->dims[l];
        const fa_mlp_tensor *wt = &b->l.tensors[2 * (l - 1)], *bt = wt + 1;
        float *z = b->act[l];
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)out, (int)in, 1.0f,
                    a[l - 1], (int)in, b->params + wt->offset, (int)in, 0.0f, z, (int)out);
        bias_act(z, b->params + bt->offset, n, out, l < L);
        a[l] = z;
    }

    /* dz_L (n, C) = softmax - onehot, per example (unscaled). */
    softmax_xent(a[L], y, n, c->dims[L], 1.0f, b->dzl[L], st);

    /* Input gradients, layer L down to 2, every dz kept; the ghost norms. */
    memset(b->sq, 0, n * sizeof(double));
    for (uint32_t l = L; l >= 1; l--) {
        const uint32_t in = c->dims[l - 1], out = c->dims[l];
        const fa_mlp_tensor *wt = &b->l.tensors[2 * (l - 1)];
        ghost_norms(b->dzl[l], out, a[l - 1], in, n, b->sq);
        if (l == 1)
            break;
        /* dz_{l-1} (n, in) = (dz (n, out) . W (out, in)) * [a[l-1] > 0] */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)in, (int)out, 1.0f,
                    b->dzl[l], (int)out, b->params + wt->offset, (int)in, 0.0f, b->dzl[l - 1],
                    (int)in);
        relu_mask(b->dzl[l - 1], a[l - 1], (size_t)n * in);
    }

    /* f_i = scale min(1, clip / ||g_i||) */
    for (uint32_t i = 0; i < n; i++) {
        double norm = sqrt(b->sq[i]);
        if (norms)
            norms[i] = (float)norm;
        b->fac[i] = (float)(norm > clip ? scale * (clip / norm) : scale);
    }

    /* The clipped sum: the same weight and bias gradients from rescaled rows. */
    for (uint32_t l = L; l >= 1; l--) {
        const uint32_t in = c->dims[l - 1], out = c->dims[l];
        const fa_mlp_tensor *wt = &b->l.tensors[2 * (l - 1)], *bt = wt + 1;
        scale_rows(b->dzl[l], n, out, b->fac);
        /* dW (out, in) (+)= dz^T (out, n) . a[l-1] (n, in) */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)out, (int)in, (int)n, 1.0f,
                    b->dzl[l], (int)out, a[l - 1], (int)in, accumulate ? 1.0f : 0.0f,
                    b->grads + wt->offset, (int)in);
        bias_grad_acc(b->dzl[l], n, out, b->grads + bt->offset, accumulate);
    }
    return 0;
}

FA_VEC_CLONES static void add_to(float *restrict g, const float *restrict v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        g[i] += v[i];
}

static int cpu_grads_add_host(fa_backend *b, const float *v, fa_error *err)
{
    add_to(b->grads, v, b->l.n_params);
    return 0;
}

static float *cpu_grads(fa_backend *b) { return b->grads; }

static int cpu_grads_to_host(fa_backend *b, float *dst, fa_error *err)
{
    if (dst != b->grads)
        memcpy(dst, b->grads, b->l.n_params * sizeof(float));
    return 0;
}

static int cpu_grads_from_host(fa_backend *b, const float *src, fa_error *err)
{
    if (src != b->grads)
        memcpy(b->grads, src, b->l.n_params * sizeof(float));
    return 0;
}

FA_VEC_CLONES static void sgd(float *restrict w, float *restrict v, const float *restrict g,
                              size_t n, float lr, float mu, float wd)
{
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] + wd * w[i];
        float vi = mu * v[i] + gi;
        v[i] = vi;
        w[i] -= lr * vi;
    }
}

static int cpu_sgd_step(fa_backend *b, const fa_sgd *o, fa_error *err)
{
    sgd(b->params, b->mom, b->grads, b->l.n_params, o->lr, o->momentum, o->weight_decay);
    return 0;
}

static int cpu_reset_momentum(fa_backend *b, fa_error *err)
{
    memset(b->mom, 0, b->l.n_params * sizeof(float));
    return 0;
}

static int cpu_get_momentum(fa_backend *b, float *host, fa_error *err)
{
    memcpy(host, b->mom, b->l.n_params * sizeof(float));
    return 0;
}

static int cpu_set_momentum(fa_backend *b, const float *host, fa_error *err)
{
    memcpy(b->mom, host, b->l.n_params * sizeof(float));
    return 0;
}

static void *cpu_stream(fa_backend *b) { return NULL; }

const struct fa_backend_ops fa_backend_cpu = {
    .name = "cpu-openblas",
    .kind = FA_MLP_CPU,
    .create = cpu_create,
    .destroy = cpu_destroy,
    .set_params = cpu_set_params,
    .get_params = cpu_get_params,
    .run = cpu_run,
    .grads = cpu_grads,
    .grads_to_host = cpu_grads_to_host,
    .grads_from_host = cpu_grads_from_host,
    .sgd_step = cpu_sgd_step,
    .reset_momentum = cpu_reset_momentum,
    .stream = cpu_stream,
    .get_momentum = cpu_get_momentum,
    .set_momentum = cpu_set_momentum,
    .run_dp = cpu_run_dp,
    .grads_add_host = cpu_grads_add_host,
};
