/* backend.h - the internal interface between the MLP (mlp.c) and its compute
 * backends: CPU (backend_cpu.c, OpenBLAS) and GPU (backend_cuda.cu, cuBLAS).
 *
 * A backend owns, in its own memory space, the parameter block, the gradient
 * block and the momentum block (all n_params floats, the layout of
 * fa_mlp_layout) and the activations of one batch of up to max_batch
 * examples.  Inputs x (n, dims[0]) and labels y (n) are host memory; labels
 * were checked (< classes) by the caller.  The math is the same in both:
 *
 *   forward   a0 = x;  z_l = a_{l-1} W_l^T + b_l;  a_l = relu(z_l) (l < L), a_L = z_L
 *   loss      softmax cross-entropy of a_L against y, per example
 *   backward  dz_L = scale * (softmax(a_L) - onehot(y))
 *             dW_l = dz_l^T a_{l-1};  db_l = sum over rows of dz_l
 *             dz_{l-1} = (dz_l W_l) * [a_{l-1} > 0]
 *   sgd       g = dW + wd w;  v = mu v + g;  w -= lr v
 *
 * DP-SGD's clipped backward (run_dp) uses the same forward and backward,
 * per example: example i's gradient is the sum over layers of the outer
 * products dz_l[i]^T a_{l-1}[i] (weights) and dz_l[i] (biases), so its
 * squared L2 norm is, without forming it (the "ghost norm", Goodfellow 2015,
 * "Efficient per-example gradient computations", arXiv:1510.01799),
 *
 *   ||g_i||^2 = sum_l ||dz_l[i]||^2 (||a_{l-1}[i]||^2 + 1)
 *
 * and since every row of dz_l depends on its own example only and linearly
 * on dz_L[i], scaling row i of every dz_l by f_i = scale min(1, clip/||g_i||)
 * is the backward pass of the rescaled output gradient f_i dz_L[i]: the
 * weight and bias gradients of those rows are then scale * the sum of the
 * clipped per-example gradients.  One input-gradient pass (kept per layer)
 * serves both the norms and the clipped sum; no per-example gradient is
 * ever materialised.
 */
#ifndef FA_MODEL_BACKEND_H
#define FA_MODEL_BACKEND_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" { /* backend_cuda.cu is C++ */
#endif

#include "common/fa_err.h"
#include "model/mlp.h"

typedef struct fa_backend fa_backend;

struct fa_backend_ops {
    const char *name;
    int kind; /* FA_MLP_CPU or FA_MLP_GPU */
    int (*create)(fa_backend **out, const fa_mlp_layout *l, const fa_mlp_opts *o, fa_error *err);
    void (*destroy)(fa_backend *b);
    int (*set_params)(fa_backend *b, const float *host, fa_error *err);
    int (*get_params)(fa_backend *b, float *host, fa_error *err);
    /* Forward pass; statistics into st; logits (n, classes) into host memory
     * when logits is not NULL.  With train set, also the backward pass,
     * leaving grads = scale * sum of per-example gradients (n may be 0: grads
     * become zero). */
    int (*run)(fa_backend *b, const float *x, const uint8_t *y, uint32_t n, int train,
               float scale, float *logits, fa_mlp_stats *st, fa_error *err);
    float *(*grads)(fa_backend *b);
    int (*grads_to_host)(fa_backend *b, float *dst, fa_error *err);
    int (*grads_from_host)(fa_backend *b, const float *src, fa_error *err);
    int (*sgd_step)(fa_backend *b, const fa_sgd *opt, fa_error *err);
    int (*reset_momentum)(fa_backend *b, fa_error *err);
    void *(*stream)(fa_backend *b);
    /* The momentum block from/to host memory (a saved local round). */
    int (*get_momentum)(fa_backend *b, float *host, fa_error *err);
    int (*set_momentum)(fa_backend *b, const float *host, fa_error *err);
    /* DP-SGD (see above): forward, per-example norms, and
     *   grads = scale * sum_i min(1, clip / ||g_i||) g_i
     * (grads += that with accumulate; n = 0 leaves zero / unchanged grads).
     * norms (host, n floats, may be NULL) gets each ||g_i||, unclipped. */
    int (*run_dp)(fa_backend *b, const float *x, const uint8_t *y, uint32_t n, float clip,
                  float scale, int accumulate, float *norms, fa_mlp_stats *st, fa_error *err);
    /* grads += v, v host memory of n_params floats (DP-SGD's noise). */
    int (*grads_add_host)(fa_backend *b, const float *v, fa_error *err);
};

extern const struct fa_backend_ops fa_backend_cpu;
#ifdef FA_HAVE_CUDA
/* The GPU backend (backend_cuda.cu, the object library fa_model_cuda) in
 * the programs that link it; in the others mlp.c's weak definitions stand
 * in: no GPU, and a count of 0 that says why. */
extern const struct fa_backend_ops fa_backend_gpu;
/* cudaGetDeviceCount, 0 on any error; why (when 0) into why[0..n). */
int fa_backend_gpu_count(char *why, size_t n);
#endif

#ifdef __cplusplus
}
#endif

#endif
