/* backend_cuda.cu - the MLP on a GPU: cuBLAS sgemm for the matmuls, small
 * kernels for bias+ReLU, softmax cross-entropy, the ReLU mask, bias
 * gradients and the SGD update.  Same math as backend_cpu.c (see
 * backend.h); FP32 throughout (no TF32), so CPU and GPU agree to float
 * rounding.
 *
 * cuBLAS is column-major.  A row-major (r, c) matrix is the column-major
 * (c, r) matrix, its transpose, so with W' = W^T (in, out), A' (in, n),
 * Z' (out, n):
 *   forward  Z' = W'^T A'     gemm(T, N, m=out, n=n,   k=in)
 *   dW'      = A' dZ'^T       gemm(N, T, m=in,  n=out, k=n)
 *   dA'      = W' dZ'         gemm(N, N, m=in,  n=n,   k=out)
 */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/backend.h"

struct fa_backend {
    fa_mlp_layout l;
    uint32_t max_batch;
    int device;
    cudaStream_t stream;
    cublasHandle_t blas;
    float *params, *grads, *mom;        /* device, (n_params) each */
    float *x;                           /* device (max_batch, dims[0]) */
    uint8_t *y;                         /* device (max_batch) */
    float *act[FA_MLP_MAX_LAYERS + 1];  /* device (max_batch, dims[l]), l >= 1 */
    float *dz[2];                       /* device (max_batch, max dim) */
    float *loss;                        /* device (max_batch) per-example loss */
    int *correct;                       /* device (max_batch) per-example 0/1 */
    float *h_loss;                      /* pinned host copies */
    int *h_correct;
    /* DP-SGD only (gpu_run_dp), allocated on its first batch.  UNTESTED on a
     * device: written to the CPU backend's math, compiled but never run in
     * this project's CI (no GPU there). */
    float *dzl[FA_MLP_MAX_LAYERS + 1];  /* device (max_batch, dims[l]): every layer's dz */
    double *sq;                         /* device (max_batch) squared per-example norms */
    float *fac;                         /* device (max_batch) clip factors */
    float *norms;                       /* device (max_batch) per-example norms */
    float *stage;                       /* device (n_params) noise from the host */
};

#define CUDA_TRY(call, what)                                                                    \
    do {                                                                                        \
        cudaError_t e_ = (call);                                                                \
        if (e_ != cudaSuccess)                                                                  \
            return fa_errorf(err, FA_ERR_CUDA, "gpu: %s: %s", what, cudaGetErrorString(e_));    \
    } while (0)

#define BLAS_TRY(call, what)                                                                    \
    do {                                                                                        \
        cublasStatus_t s_ = (call);                                                             \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                        \
            return fa_errorf(err, FA_ERR_CUDA, "gpu: %s: cuBLAS status %d", what, (int)s_);     \
    } while (0)

extern "C" int fa_backend_gpu_count(char *why, size_t n)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        snprintf(why, n, "cudaGetDeviceCount: %s", cudaGetErrorString(e));
        cudaGetLastError(); /* clear the sticky error */
        return 0;
    }
    if (count == 0)
        snprintf(why, n, "cudaGetDeviceCount found 0 devices");
    return count;
}

/* ---------------------------------------------------------------------- */
/* Kernels                                                                 */
/* ---------------------------------------------------------------------- */

static unsigned blocks(size_t n, unsigned threads) { return (unsigned)((n + threads - 1) / threads); }

/* z (n, out) += bias; ReLU when relu. */
__global__ void k_bias_act(float *__restrict__ z, const float *__restrict__ bias, size_t total,
                           uint32_t out, int relu)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < total) {
        float v = z[i] + bias[i % out];
        z[i] = relu ? fmaxf(v, 0.0f) : v;
    }
}

/* One thread per example: loss, correctness, and dz = scale (softmax - onehot). */
__global__ void k_softmax_xent(const float *__restrict__ logits, const uint8_t *__restrict__ y,
                               uint32_t n, uint32_t C, float scale, float *__restrict__ dz,
                               float *__restrict__ loss, int *__restrict__ correct)
{
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    const float *z = logits + (size_t)i * C;
    float mx = z[0], sum = 0.0f;
    uint32_t arg = 0;
    for (uint32_t j = 1; j < C; j++)
        if (z[j] > mx) {
            mx = z[j];
            arg = j;
        }
    for (uint32_t j = 0; j < C; j++)
        sum += expf(z[j] - mx);
    loss[i] = logf(sum) + mx - z[y[i]];
    correct[i] = arg == y[i];
    if (dz) {
        float *d = dz + (size_t)i * C, inv = scale / sum;
        for (uint32_t j = 0; j < C; j++)
            d[j] = expf(z[j] - mx) * inv;
        d[y[i]] -= scale;
    }
}

/* db[j] = sum over rows of dz (n, out) (+= with accumulate); one thread per column. */
__global__ void k_bias_grad(const float *__restrict__ dz, uint32_t n, uint32_t out,
                            float *__restrict__ db, int accumulate)
{
    uint32_t j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= out)
        return;
    float s = 0.0f;
    for (uint32_t i = 0; i < n; i++)
        s += dz[(size_t)i * out + j];
    db[j] = accumulate ? db[j] + s : s;
}

/* DP-SGD's ghost norms: sq[i] += ||dz[i]||^2 (||a[i]||^2 + 1), one block of
 * GHOST_THREADS threads per example (a power of two), doubles as on the CPU. */
#define GHOST_THREADS 128
__global__ void k_ghost_norms(const float *__restrict__ dz, uint32_t out,
                              const float *__restrict__ a, uint32_t in, double *__restrict__ sq)
{
    __shared__ double sg[GHOST_THREADS], sa[GHOST_THREADS];
    const uint32_t i = blockIdx.x, t = threadIdx.x;
    const float *g = dz + (size_t)i * out, *x = a + (size_t)i * in;
    double g2 = 0.0, a2 = 0.0;
    for (uint32_t j = t; j < out; j += GHOST_THREADS)
        g2 += (double)g[j] * g[j];
    for (uint32_t k = t; k < in; k += GHOST_THREADS)
        a2 += (double)x[k] * x[k];
    sg[t] = g2;
    sa[t] = a2;
    __syncthreads();
    for (uint32_t s = GHOST_THREADS / 2; s > 0; s >>= 1) {
        if (t < s) {
            sg[t] += sg[t + s];
            sa[t] += sa[t + s];
        }
        __syncthreads();
    }
    if (t == 0)
        sq[i] += sg[0] * (sa[0] + 1.0);
}

/* fac[i] = scale min(1, clip / ||g_i||), norms[i] = ||g_i||. */
__global__ void k_clip_factor(const double *__restrict__ sq, uint32_t n, float clip, float scale,
                              float *__restrict__ fac, float *__restrict__ norms)
{
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    double norm = sqrt(sq[i]);
    norms[i] = (float)norm;
    fac[i] = (float)(norm > clip ? scale * (clip / norm) : scale);
}

/* Row r of d (rows of `cols`) times fac[r]. */
__global__ void k_scale_rows(float *__restrict__ d, size_t total, uint32_t cols,
                             const float *__restrict__ fac)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < total)
        d[i] *= fac[i / cols];
}

__global__ void k_add(float *__restrict__ g, const float *__restrict__ v, size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n)
        g[i] += v[i];
}

__global__ void k_relu_mask(float *__restrict__ d, const float *__restrict__ act, size_t total)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < total && !(act[i] > 0.0f))
        d[i] = 0.0f;
}

__global__ void k_sgd(float *__restrict__ w, const float *__restrict__ g, float *__restrict__ v,
                      size_t n, float lr, float mu, float wd)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) {
        float gi = g[i] + wd * w[i];
        float vi = mu * v[i] + gi;
        v[i] = vi;
        w[i] -= lr * vi;
    }
}

/* ---------------------------------------------------------------------- */
/* Backend                                                                 */
/* ---------------------------------------------------------------------- */

static void gpu_destroy(fa_backend *b)
{
    if (!b)
        return;
    if (b->blas)
        cublasDestroy(b->blas);
    cudaFree(b->params);
    cudaFree(b->grads);
    cudaFree(b->mom);
    cudaFree(b->x);
    cudaFree(b->y);
    for (uint32_t i = 0; i <= FA_MLP_MAX_LAYERS; i++)
        cudaFree(b->act[i]);
    cudaFree(b->dz[0]);
    cudaFree(b->dz[1]);
    cudaFree(b->loss);
    cudaFree(b->correct);
    for (uint32_t i = 0; i <= FA_MLP_MAX_LAYERS; i++)
        cudaFree(b->dzl[i]);
    cudaFree(b->sq);
    cudaFree(b->fac);
    cudaFree(b->norms);
    cudaFree(b->stage);
    cudaFreeHost(b->h_loss);
    cudaFreeHost(b->h_correct);
    if (b->stream)
        cudaStreamDestroy(b->stream);
    free(b);
}

static int gpu_alloc(fa_backend *b, fa_error *err)
{
    const fa_mlp_config *c = &b->l.config;
    const size_t np = b->l.n_params * sizeof(float), B = b->max_batch;
    size_t maxd = 0;

    for (uint32_t i = 0; i <= c->n_layers; i++)
        maxd = c->dims[i] > maxd ? c->dims[i] : maxd;
    CUDA_TRY(cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking), "stream");
    BLAS_TRY(cublasCreate(&b->blas), "cublasCreate");
    BLAS_TRY(cublasSetStream(b->blas, b->stream), "cublasSetStream");
    BLAS_TRY(cublasSetMathMode(b->blas, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
    CUDA_TRY(cudaMalloc(&b->params, np), "cudaMalloc params");
    CUDA_TRY(cudaMalloc(&b->grads, np), "cudaMalloc grads");
    CUDA_TRY(cudaMalloc(&b->mom, np), "cudaMalloc momentum");
    CUDA_TRY(cudaMemset(b->params, 0, np), "cudaMemset");
    CUDA_TRY(cudaMemset(b->grads, 0, np), "cudaMemset");
    CUDA_TRY(cudaMemset(b->mom, 0, np), "cudaMemset");
    CUDA_TRY(cudaMalloc(&b->x, B * c->dims[0] * sizeof(float)), "cudaMalloc input");
    CUDA_TRY(cudaMalloc(&b->y, B), "cudaMalloc labels");
    for (uint32_t l = 1; l <= c->n_layers; l++)
        CUDA_TRY(cudaMalloc(&b->act[l], B * c->dims[l] * sizeof(float)), "cudaMalloc activations");
    CUDA_TRY(cudaMalloc(&b->dz[0], B * maxd * sizeof(float)), "cudaMalloc gradients");
    CUDA_TRY(cudaMalloc(&b->dz[1], B * maxd * sizeof(float)), "cudaMalloc gradients");
    CUDA_TRY(cudaMalloc(&b->loss, B * sizeof(float)), "cudaMalloc loss");
    CUDA_TRY(cudaMalloc(&b->correct, B * sizeof(int)), "cudaMalloc");
    CUDA_TRY(cudaMallocHost(&b->h_loss, B * sizeof(float)), "cudaMallocHost");
    CUDA_TRY(cudaMallocHost(&b->h_correct, B * sizeof(int)), "cudaMallocHost");
    return 0;
}

static int gpu_create(fa_backend **out, const fa_mlp_layout *l, const fa_mlp_opts *o,
                      fa_error *err)
{
    fa_backend *b = (fa_backend *)calloc(1, sizeof(*b));
    int rc;

    *out = NULL;
    if (!b)
        return fa_errorf(err, FA_ERR_NOMEM, "gpu: out of memory");
    b->l = *l;
    b->max_batch = o->max_batch;
    if (o->gpu >= 0) {
        cudaError_t e = cudaSetDevice(o->gpu);
        if (e != cudaSuccess) {
            free(b);
            return fa_errorf(err, FA_ERR_NODEVICE, "gpu: cannot use CUDA device %d: %s", o->gpu,
                             cudaGetErrorString(e));
        }
    }
    cudaGetDevice(&b->device);
    if ((rc = gpu_alloc(b, err)) != 0) {
        gpu_destroy(b);
        return rc;
    }
    *out = b;
    return 0;
}

static int gpu_set_params(fa_backend *b, const float *host, fa_error *err)
{
    CUDA_TRY(cudaMemcpyAsync(b->params, host, b->l.n_params * sizeof(float),
                             cudaMemcpyHostToDevice, b->stream), "copy parameters to the GPU");
    CUDA_TRY(cudaStreamSynchronize(b->stream), "synchronise");
    return 0;
}

static int gpu_get_params(fa_backend *b, float *host, fa_error *err)
{
    CUDA_TRY(cudaMemcpyAsync(host, b->params, b->l.n_params * sizeof(float),
                             cudaMemcpyDeviceToHost, b->stream), "copy parameters from the GPU");
    CUDA_TRY(cudaStreamSynchronize(b->stream), "synchronise");
    return 0;
}

static int gpu_run(fa_backend *b, const float *x, const uint8_t *y, uint32_t n, int train,
                   float scale, float *logits, fa_mlp_stats *st, fa_error *err)
{
    const fa_mlp_config *c = &b->l.config;
    const uint32_t L = c->n_layers, C = c->dims[L];
    const float one = 1.0f, zero = 0.0f;
    const float *a[FA_MLP_MAX_LAYERS + 1];
    cudaStream_t s = b->stream;

    if (n == 0) {
        if (st)
            memset(st, 0, sizeof(*st));
        if (train) {
            CUDA_TRY(cudaMemsetAsync(b->grads, 0, b->l.n_params * sizeof(float), s), "memset");
            CUDA_TRY(cudaStreamSynchronize(s), "synchronise");
        }
        return 0;
    }
    CUDA_TRY(cudaMemcpyAsync(b->x, x, (size_t)n * c->dims[0] * sizeof(float),
                             cudaMemcpyHostToDevice, s), "copy batch to the GPU");
    CUDA_TRY(cudaMemcpyAsync(b->y, y, n, cudaMemcpyHostToDevice, s), "copy labels to the GPU");

    /* Forward. */
    a[0] = b->x;
    for (uint32_t l = 1; l <= L; l++) {
        const uint32_t in = c->dims[l - 1], out = c->dims[l];
        const fa_mlp_tensor *wt = &b->l.tensors[2 * (l - 1)], *bt = wt + 1;
        BLAS_TRY(cublasSgemm(b->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)out, (int)n, (int)in, &one,
                             b->params + wt->offset, (int)in, a[l - 1], (int)in, &zero, b->act[l],
                             (int)out), "forward sgemm");
        size_t total = (size_t)n * out;
        k_bias_act<<<blocks(total, 256), 256, 0, s>>>(b->act[l], b->params + bt->offset, total,
                                                      out, l < L);
        a[l] = b->act[l];
    }
    float *dz = b->dz[0], *dnext = b->dz[1];
    k_softmax_xent<<<blocks(n, 128), 128, 0, s>>>(a[L], b->y, n, C, scale, train ? dz : NULL,
                                                  b->loss, b->correct);
    CUDA_TRY(cudaGetLastError(), "kernel launch");
    if (logits)
        CUDA_TRY(cudaMemcpyAsync(logits, a[L], (size_t)n * C * sizeof(float),
                                 cudaMemcpyDeviceToHost, s), "copy logits");
    CUDA_TRY(cudaMemcpyAsync(b->h_loss, b->loss, n * sizeof(float), cudaMemcpyDeviceToHost, s),
             "copy loss");
    CUDA_TRY(cudaMemcpyAsync(b->h_correct, b->correct, n * sizeof(int), cudaMemcpyDeviceToHost,
                             s), "copy accuracy");

    /* Backward. */
    for (uint32_t l = L; train && l >= 1; l--) {
        const uint32_t in = c->dims[l - 1], out = c->dims[l];
        const fa_mlp_tensor *wt = &b->l.tensors[2 * (l - 1)], *bt = wt + 1;
        BLAS_TRY(cublasSgemm(b->blas, CUBLAS_OP_N, CUBLAS_OP_T, (int)in, (int)out, (int)n, &one,
                             a[l - 1], (int)in, dz, (int)out, &zero, b->grads + wt->offset,
                             (int)in), "weight-gradient sgemm");
        k_bias_grad<<<blocks(out, 128), 128, 0, s>>>(dz, n, out, b->grads + bt->offset, 0);
        if (l == 1)
            break;
        BLAS_TRY(cublasSgemm(b->blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)in, (int)n, (int)out, &one,
                             b->params + wt->offset, (int)in, dz, (int)out, &zero, dnext, (int)in),
                 "input-gradient sgemm");
        size_t total = (size_t)n * in;
        k_relu_mask<<<blocks(total, 256), 256, 0, s>>>(dnext, a[l - 1], total);
        float *t = dz;
        dz = dnext;
        dnext = t;
    }
    CUDA_TRY(cudaGetLastError(), "kernel launch");
    CUDA_TRY(cudaStreamSynchronize(s), "synchronise");

    if (st) {
        double loss = 0.0;
        uint32_t correct = 0;
        for (uint32_t i = 0; i < n; i++) {
            loss += b->h_loss[i];
            correct += (uint32_t)b->h_correct[i];
        }
        st->loss_sum = loss;
        st->correct = correct;
        st->n = n;
    }
    return 0;
}

/* DP-SGD's buffers, on the first clipped batch. */
static int gpu_dp_alloc(fa_backend *b, fa_error *err)
{
    const fa_mlp_config *c = &b->l.config;
    const size_t B = b->max_batch;
    if (b->sq)
        return 0;
    for (uint32_t l = 1; l <= c->n_layers; l++)
        CUDA_TRY(cudaMalloc(&b->dzl[l], B * c->dims[l] * sizeof(float)), "cudaMalloc DP gradients");
    CUDA_TRY(cudaMalloc(&b->fac, B * sizeof(float)), "cudaMalloc DP factors");
    CUDA_TRY(cudaMalloc(&b->norms, B * sizeof(float)), "cudaMalloc DP norms");
    CUDA_TRY(cudaMalloc(&b->sq, B * sizeof(double)), "cudaMalloc DP norms");
    return 0;
}

/* DP-SGD's clipped backward (backend.h; the CPU backend's cpu_run_dp step
 * for step).  UNTESTED on a device. */
static int gpu_run_dp(fa_backend *b, const float *x, const uint8_t *y, uint32_t n, float clip,
                      float scale, int accumulate, float *norms, fa_mlp_stats *st, fa_error *err)
{
    const fa_mlp_config *c = &b->l.config;
    const uint32_t L = c->n_layers, C = c->dims[L];
    const float one = 1.0f, zero = 0.0f, beta = accumulate ? 1.0f : 0.0f;
    const float *a[FA_MLP_MAX_LAYERS + 1];
    cudaStream_t s = b->stream;
    int rc;

    if (st)
        memset(st, 0, sizeof(*st));
    if (n == 0) {
        if (!accumulate) {
            CUDA_TRY(cudaMemsetAsync(b->grads, 0, b->l.n_params * sizeof(float), s), "memset");
            CUDA_TRY(cudaStreamSynchronize(s), "synchronise");
        }
        return 0;
    }
    if ((rc = gpu_dp_alloc(b, err)) != 0)
        return rc;
    CUDA_TRY(cudaMemcpyAsync(b->x, x, (size_t)n * c->dims[0] * sizeof(float),
                             cudaMemcpyHostToDevice, s), "copy batch to the GPU");
    CUDA_TRY(cudaMemcpyAsync(b->y, y, n, cudaMemcpyHostToDevice, s), "copy labels to the GPU");

    /* Forward. */
    a[0] = b->x;
    for (uint32_t l = 1; l <= L; l++) {
        const uint32_t in = c->dims[l - 1], out = c->dims[l];
        const fa_mlp_tensor *wt = &b->l.tensors[2 * (l - 1)], *bt = wt + 1;
        BLAS_TRY(cublasSgemm(b->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)out, (int)n, (int)in, &one,
                             b->params + wt->offset, (int)in, a[l - 1], (int)in, &zero, b->act[l],
                             (int)out), "forward sgemm");
        size_t total = (size_t)n * out;
        k_bias_act<<<blocks(total, 256), 256, 0, s>>>(b->act[l], b->params + bt->offset, total,
                                                      out, l < L);
        a[l] = b->act[l];
    }
    /* dz_L = softmax - onehot, unscaled. */
    k_softmax_xent<<<blocks(n, 128), 128, 0, s>>>(a[L], b->y, n, C, 1.0f, b->dzl[L], b->loss,
                                                  b->correct);
    CUDA_TRY(cudaGetLastError(), "kernel launch");
    CUDA_TRY(cudaMemcpyAsync(b->h_loss, b->loss, n * sizeof(float), cudaMemcpyDeviceToHost, s),
             "copy loss");
    CUDA_TRY(cudaMemcpyAsync(b->h_correct, b->correct, n * sizeof(int), cudaMemcpyDeviceToHost,
                             s), "copy accuracy");

    /* Input gradients, every dz kept; the ghost norms. */
    CUDA_TRY(cudaMemsetAsync(b->sq, 0, n * sizeof(double), s), "memset");
    for (uint32_t l = L; l >= 1; l--) {
        const uint32_t in = c->dims[l - 1], out = c->dims[l];
        const fa_mlp_tensor *wt = &b->l.tensors[2 * (l - 1)];
        k_ghost_norms<<<n, GHOST_THREADS, 0, s>>>(b->dzl[l], out, a[l - 1], in, b->sq);
        if (l == 1)
            break;
        BLAS_TRY(cublasSgemm(b->blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)in, (int)n, (int)out, &one,
                             b->params + wt->offset, (int)in, b->dzl[l], (int)out, &zero,
                             b->dzl[l - 1], (int)in),
                 "input-gradient sgemm");
        size_t total = (size_t)n * in;
        k_relu_mask<<<blocks(total, 256), 256, 0, s>>>(b->dzl[l - 1], a[l - 1], total);
    }
    k_clip_factor<<<blocks(n, 128), 128, 0, s>>>(b->sq, n, clip, scale, b->fac, b->norms);

    /* The clipped sum from the rescaled rows. */
    for (uint32_t l = L; l >= 1; l--) {
        const uint32_t in = c->dims[l - 1], out = c->dims[l];
        const fa_mlp_tensor *wt = &b->l.tensors[2 * (l - 1)], *bt = wt + 1;
        size_t total = (size_t)n * out;
        k_scale_rows<<<blocks(total, 256), 256, 0, s>>>(b->dzl[l], total, out, b->fac);
        BLAS_TRY(cublasSgemm(b->blas, CUBLAS_OP_N, CUBLAS_OP_T, (int)in, (int)out, (int)n, &one,
                             a[l - 1], (int)in, b->dzl[l], (int)out, &beta, b->grads + wt->offset,
                             (int)in), "weight-gradient sgemm");
        k_bias_grad<<<blocks(out, 128), 128, 0, s>>>(b->dzl[l], n, out, b->grads + bt->offset,
                                                      accumulate);
    }
    CUDA_TRY(cudaGetLastError(), "kernel launch");
    if (norms)
        CUDA_TRY(cudaMemcpyAsync(norms, b->norms, n * sizeof(float), cudaMemcpyDeviceToHost, s),
                 "copy norms");
    CUDA_TRY(cudaStreamSynchronize(s), "synchronise");
    if (st) {
        double loss = 0.0;
        uint32_t correct = 0;
        for (uint32_t i = 0; i < n; i++) {
            loss += b->h_loss[i];
            correct += (uint32_t)b->h_correct[i];
        }
        st->loss_sum = loss;
        st->correct = correct;
        st->n = n;
    }
    return 0;
}

/* grads += v (host): through a device staging block.  UNTESTED on a device. */
static int gpu_grads_add_host(fa_backend *b, const float *v, fa_error *err)
{
    const size_t n = b->l.n_params;
    if (!b->stage)
        CUDA_TRY(cudaMalloc(&b->stage, n * sizeof(float)), "cudaMalloc noise staging");
    CUDA_TRY(cudaMemcpyAsync(b->stage, v, n * sizeof(float), cudaMemcpyHostToDevice, b->stream),
             "copy noise to the GPU");
    k_add<<<blocks(n, 256), 256, 0, b->stream>>>(b->grads, b->stage, n);
    CUDA_TRY(cudaGetLastError(), "noise kernel");
    /* the host buffer may be reused as soon as we return */
    CUDA_TRY(cudaStreamSynchronize(b->stream), "synchronise");
    return 0;
}

static float *gpu_grads(fa_backend *b) { return b->grads; }

static int gpu_grads_to_host(fa_backend *b, float *dst, fa_error *err)
{
    CUDA_TRY(cudaMemcpyAsync(dst, b->grads, b->l.n_params * sizeof(float), cudaMemcpyDeviceToHost,
                             b->stream), "copy gradients from the GPU");
    CUDA_TRY(cudaStreamSynchronize(b->stream), "synchronise");
    return 0;
}

static int gpu_grads_from_host(fa_backend *b, const float *src, fa_error *err)
{
    CUDA_TRY(cudaMemcpyAsync(b->grads, src, b->l.n_params * sizeof(float), cudaMemcpyHostToDevice,
                             b->stream), "copy gradients to the GPU");
    CUDA_TRY(cudaStreamSynchronize(b->stream), "synchronise");
    return 0;
}

static int gpu_sgd_step(fa_backend *b, const fa_sgd *o, fa_error *err)
{
    size_t n = b->l.n_params;
    k_sgd<<<blocks(n, 256), 256, 0, b->stream>>>(b->params, b->grads, b->mom, n, o->lr,
                                                  o->momentum, o->weight_decay);
    CUDA_TRY(cudaGetLastError(), "sgd kernel");
    /* No synchronisation: the next batch's work is ordered on the same stream. */
    return 0;
}

static int gpu_reset_momentum(fa_backend *b, fa_error *err)
{
    CUDA_TRY(cudaMemsetAsync(b->mom, 0, b->l.n_params * sizeof(float), b->stream), "memset");
    CUDA_TRY(cudaStreamSynchronize(b->stream), "synchronise");
    return 0;
}

static int gpu_get_momentum(fa_backend *b, float *host, fa_error *err)
{
    CUDA_TRY(cudaMemcpyAsync(host, b->mom, b->l.n_params * sizeof(float), cudaMemcpyDeviceToHost,
                             b->stream),
             "copy momentum from the GPU");
    CUDA_TRY(cudaStreamSynchronize(b->stream), "synchronise");
    return 0;
}

static int gpu_set_momentum(fa_backend *b, const float *host, fa_error *err)
{
    CUDA_TRY(cudaMemcpyAsync(b->mom, host, b->l.n_params * sizeof(float), cudaMemcpyHostToDevice,
                             b->stream),
             "copy momentum to the GPU");
    CUDA_TRY(cudaStreamSynchronize(b->stream), "synchronise");
    return 0;
}

static void *gpu_stream(fa_backend *b) { return (void *)b->stream; }

extern "C" const struct fa_backend_ops fa_backend_gpu = {
    "gpu-cublas",      FA_MLP_GPU,          gpu_create,       gpu_destroy,
    gpu_set_params,    gpu_get_params,      gpu_run,          gpu_grads,
    gpu_grads_to_host, gpu_grads_from_host, gpu_sgd_step,     gpu_reset_momentum,
    gpu_stream,        gpu_get_momentum,    gpu_set_momentum, gpu_run_dp,
    gpu_grads_add_host,
};
