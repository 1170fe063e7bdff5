/* mlp.h - the built-in model: a multi-layer perceptron for classification.
 *
 *   x (B, D0) -> fc1 -> ReLU -> fc2 -> ReLU -> ... -> fcL -> logits (B, DL)
 *   loss = mean over the batch of softmax cross-entropy(logits, label)
 *
 * Default 784-256-128-10 (Fashion-MNIST).  Layer l (1-based, as in PyTorch)
 * is an nn.Linear(D(l-1), D(l)): y = x W^T + b with
 *
 *   fc<l>.weight  (D(l), D(l-1))  row-major, PyTorch's (out_features, in_features)
 *   fc<l>.bias    (D(l))
 *
 * ALL parameters live in one contiguous float block, in state_dict order:
 * fc1.weight, fc1.bias, fc2.weight, fc2.bias, ...  The layout table below
 * names each tensor with its shape and its offset in the block.  Gradients
 * and the optimizer's momentum are blocks of the same layout, so a delta, a
 * gradient all-reduce or a per-layer compressor indexes them all alike.
 * Saved as safetensors (F32) with exactly these names and shapes, so a
 * PyTorch module with attributes fc1 = nn.Linear(784, 256), fc2 = ...
 * loads them with model.load_state_dict(safetensors.torch.load_file(path)).
 *
 * Compute backends (same math, one internal interface, model/backend.h):
 *   CPU  OpenBLAS cblas_sgemm for the three matmuls of each layer, fused
 *        bias/ReLU and softmax loops;
 *   GPU  cuBLAS sgemm plus small CUDA kernels (built when CUDA was found).
 * Input is always host memory; the GPU backend copies each batch over.
 */
#ifndef FA_MODEL_MLP_H
#define FA_MODEL_MLP_H

#include <stddef.h>
#include <stdint.h>

#include "common/fa_err.h"
#include "common/fa_safetensors.h"

/* Most linear layers (hidden layers + the output layer). */
#define FA_MLP_MAX_LAYERS 8
/* Most classes (labels are bytes, as in IDX label files). */
#define FA_MLP_MAX_CLASSES 256
/* Largest width of any layer. */
#define FA_MLP_MAX_DIM (1u << 20)

/* ---------------------------------------------------------------------- */
/* Architecture and parameter layout                                       */
/* ---------------------------------------------------------------------- */

typedef struct fa_mlp_config {
    uint32_t n_layers;                    /* linear layers L (hidden + 1), 1..FA_MLP_MAX_LAYERS */
    uint32_t dims[FA_MLP_MAX_LAYERS + 1]; /* dims[0] input, dims[1..L-1] hidden, dims[L] classes */
} fa_mlp_config;

/* 784-256-128-10. */
void fa_mlp_config_default(fa_mlp_config *c);

/* input - hidden[0] - ... - hidden[n_hidden-1] - classes.  Returns 0 or
 * FA_ERR_INVAL (a zero width, too many layers, classes over
 * FA_MLP_MAX_CLASSES, a width over FA_MLP_MAX_DIM). */
int fa_mlp_config_make(fa_mlp_config *c, uint32_t input, const uint32_t *hidden,
                       uint32_t n_hidden, uint32_t classes, fa_error *err);

/* "784-256-128-10" into buf (always NUL-terminated); returns buf. */
char *fa_mlp_config_str(const fa_mlp_config *c, char *buf, size_t n);

/* One tensor of the parameter block. */
typedef struct fa_mlp_tensor {
    char name[24];      /* "fc1.weight", "fc1.bias" */
    uint32_t layer;     /* 0-based linear layer (fc<layer+1>) */
    uint32_t is_bias;   /* 0 weight, 1 bias */
    uint32_t ndim;      /* 2 for a weight, 1 for a bias */
    uint32_t shape[2];  /* weight (out, in); bias (out, unused) */
    size_t offset;      /* index of its first float in the block */
    size_t numel;       /* floats */
} fa_mlp_tensor;

typedef struct fa_mlp_layout {
    fa_mlp_config config;
    uint32_t n_tensors;                           /* 2 * n_layers */
    fa_mlp_tensor tensors[2 * FA_MLP_MAX_LAYERS]; /* state_dict order */
    size_t n_params;                              /* floats in the block */
} fa_mlp_layout;

/* Fills the layout of c.  Returns 0 or FA_ERR_INVAL (as fa_mlp_config_make). */
int fa_mlp_layout_init(fa_mlp_layout *l, const fa_mlp_config *c, fa_error *err);

/* The tensor called name, or NULL. */
const fa_mlp_tensor *fa_mlp_layout_find(const fa_mlp_layout *l, const char *name);

/* Seeded He (Kaiming normal, fan_in, ReLU gain) initialisation:
 * weight ~ N(0, 2 / in), bias = 0.  Same seed, same bits on every machine. */
void fa_mlp_init_he(const fa_mlp_layout *l, float *params, uint64_t seed);

/* ---------------------------------------------------------------------- */
/* safetensors                                                              */
/* ---------------------------------------------------------------------- */

/* Saves params (l->n_params floats) as F32 safetensors with the layout's
 * names and shapes, atomically (mode e.g. 0644).  meta: n_meta key/value
 * pairs added to __metadata__ (meta[2i] key, meta[2i+1] value), after
 * "format": "pt" and "fedagg.arch": "784-256-128-10".  Returns 0 or the
 * errors of fa_st_writer_*. */
int fa_mlp_save(const char *path, unsigned mode, const fa_mlp_layout *l, const float *params,
                const char *const *meta, size_t n_meta, fa_error *err);

/* Checks that st holds exactly the tensors of l (same names, shapes, dtype
 * F32) and copies them into params (l->n_params floats).  Errors name the
 * tensor: FA_ERR_NOTFOUND (a tensor of the model is missing),
 * FA_ERR_INVAL (wrong shape or dtype, or an extra tensor), FA_ERR_IO. */
int fa_mlp_load_st(const fa_safetensors *st, const fa_mlp_layout *l, float *params,
                   fa_error *err);

/* fa_st_open + fa_mlp_load_st. */
int fa_mlp_load(const char *path, const fa_mlp_layout *l, float *params, fa_error *err);

/* Infers the architecture of a safetensors file in the layout above
 * (fc1..fcL, chained shapes, F32).  Returns 0 or FA_ERR_INVAL naming the
 * offending tensor. */
int fa_mlp_config_from_st(const fa_safetensors *st, fa_mlp_config *c, fa_error *err);

/* ---------------------------------------------------------------------- */
/* Data                                                                      */
/* ---------------------------------------------------------------------- */

/* A labelled data set held in host memory (a view: not owned).  The worker's
 * loader (model/data.h) produces one from IDX files. */
typedef struct fa_dataset {
    uint32_t n;       /* examples */
    uint32_t dim;     /* features per example (must equal config.dims[0]) */
    const float *x;   /* (n, dim) row-major */
    const uint8_t *y; /* (n) labels, each < classes */
} fa_dataset;

/* ---------------------------------------------------------------------- */
/* The network on a compute backend                                         */
/* ---------------------------------------------------------------------- */

/* Values match proto worker config `Device` (AUTO 0, CPU 1, GPU 2). */
enum { FA_MLP_AUTO = 0, FA_MLP_CPU = 1, FA_MLP_GPU = 2 };

typedef struct fa_mlp_opts {
    int backend;        /* FA_MLP_AUTO (GPU when one is present, else CPU), _CPU, _GPU */
    int gpu;            /* CUDA device ordinal; -1 = the current device (default) */
    uint32_t max_batch; /* largest batch passed to forward_backward / used by evaluate; default 256 */
    int cpu_threads;    /* OpenBLAS threads (process-wide); 0 = leave as is (default) */
} fa_mlp_opts;

void fa_mlp_opts_default(fa_mlp_opts *o);

/* A network with its parameters, gradients and momentum on one backend.  Opaque. */
typedef struct fa_mlp fa_mlp;

/* Number of CUDA devices (0 when none, or when built without CUDA). */
int fa_mlp_gpu_count(void);

/* Creates a network (parameters zero: set them with fa_mlp_set_params or
 * fa_mlp_init).  opts NULL means defaults.  Returns 0, FA_ERR_INVAL,
 * FA_ERR_NOMEM, FA_ERR_NODEVICE (GPU asked for, cudaGetDeviceCount found
 * none: the message says so; AUTO falls back to the CPU instead),
 * FA_ERR_UNSUPPORTED (GPU asked for in a build without CUDA), FA_ERR_CUDA. */
int fa_mlp_new(fa_mlp **out, const fa_mlp_config *c, const fa_mlp_opts *opts, fa_error *err);

/* NULL is a no-op. */
void fa_mlp_del(fa_mlp *m);

const fa_mlp_layout *fa_mlp_layout_of(const fa_mlp *m);
/* FA_MLP_CPU or FA_MLP_GPU: the backend actually in use. */
int fa_mlp_backend(const fa_mlp *m);
/* "cpu-openblas" or "gpu-cublas". */
const char *fa_mlp_backend_name(const fa_mlp *m);

/* Copies the parameter block from/to host memory (n_params floats).
 * Returns 0 or FA_ERR_CUDA. */
int fa_mlp_set_params(fa_mlp *m, const float *params, fa_error *err);
int fa_mlp_get_params(fa_mlp *m, float *params, fa_error *err);
/* He initialisation (fa_mlp_init_he) on the backend. */
int fa_mlp_init(fa_mlp *m, uint64_t seed, fa_error *err);

/* Per-batch statistics. */
typedef struct fa_mlp_stats {
    double loss_sum;  /* sum over the batch's examples of their cross-entropy */
    uint32_t correct; /* examples whose arg-max logit is the label */
    uint32_t n;       /* examples */
} fa_mlp_stats;

/* Forward and backward pass over n examples (x (n, dims[0]) and y (n),
 * host memory, 0 <= n <= max_batch; n = 0, a rank with no part of a short
 * last batch, leaves zero gradients), leaving in the gradient block
 *
 *   grads = (1 / scale_n) * sum over the n examples of d loss_i / d params
 *
 * scale_n is the GLOBAL batch size: with the batch split over R ranks, each
 * rank passes its own part and the full batch size, so that the SUM of the
 * ranks' gradient blocks is the gradient of the mean loss over the batch
 * (one rank alone: scale_n = n).  stats may be NULL.  Returns 0,
 * FA_ERR_INVAL (n out of range, label >= classes: message names the index),
 * FA_ERR_CUDA. */
int fa_mlp_forward_backward(fa_mlp *m, const float *x, const uint8_t *y, uint32_t n,
                            uint32_t scale_n, fa_mlp_stats *stats, fa_error *err);

/* DP-SGD's per-example clipping (model/backend.h states the math): a
 * forward and backward pass over n examples (as fa_mlp_forward_backward)
 * leaving in the gradient block
 *
 *   grads = scale * sum over the n examples of min(1, clip / ||g_i||) g_i
 *
 * where g_i is example i's gradient of its own loss (all tensors together)
 * and ||g_i|| its L2 norm, found by the ghost-norm identity without forming
 * g_i.  With accumulate the sum is added to the block instead (a batch
 * larger than max_batch, in pieces).  norms (host, n floats, may be NULL)
 * gets every ||g_i|| before clipping.  The norms are float sums of float
 * products: the clipped norm is clip to within float rounding (relative
 * 1e-6), not exactly.  Returns 0, FA_ERR_INVAL (n out of range, a label,
 * clip not finite and > 0, scale not finite), FA_ERR_NOMEM (the per-layer
 * buffers, allocated on the first call), FA_ERR_CUDA. */
int fa_mlp_forward_backward_clipped(fa_mlp *m, const float *x, const uint8_t *y, uint32_t n,
                                    float clip, float scale, int accumulate, float *norms,
                                    fa_mlp_stats *stats, fa_error *err);

/* grads += v (host memory, n_params floats): DP-SGD's noise.  Returns 0 or
 * FA_ERR_CUDA. */
int fa_mlp_grads_add_host(fa_mlp *m, const float *v, fa_error *err);

/* The largest batch forward_backward takes (fa_mlp_opts.max_batch). */
uint32_t fa_mlp_max_batch(const fa_mlp *m);

/* Forward pass only, returning statistics (and logits (n, classes) into
 * host memory when logits is not NULL).  n <= max_batch. */
int fa_mlp_forward(fa_mlp *m, const float *x, const uint8_t *y, uint32_t n, float *logits,
                   fa_mlp_stats *stats, fa_error *err);

/* The gradient block (n_params floats, the parameter layout).  *on_device
 * (when not NULL) is set to 1 when the pointer is CUDA device memory (GPU
 * backend: usable by NCCL on fa_mlp_cuda_stream), 0 for host memory. */
float *fa_mlp_grads(fa_mlp *m, int *on_device);
/* Copies the gradient block to/from host memory (a plain memcpy on CPU). */
int fa_mlp_grads_to_host(fa_mlp *m, float *dst, fa_error *err);
int fa_mlp_grads_from_host(fa_mlp *m, const float *src, fa_error *err);
/* The cudaStream_t the GPU backend works on (NULL on CPU).  Work queued on
 * it by a caller is ordered with the network's own. */
void *fa_mlp_cuda_stream(fa_mlp *m);

/* SGD with momentum and weight decay, PyTorch torch.optim.SGD semantics
 * (dampening 0, not Nesterov), applied to every tensor, biases included:
 *   g = grad + weight_decay * w;  v = momentum * v + g;  w -= lr * v
 * (v starts at g on the first step after a reset, as PyTorch's buffer). */
typedef struct fa_sgd {
    float lr;
    float momentum;
    float weight_decay;
} fa_sgd;

int fa_mlp_sgd_step(fa_mlp *m, const fa_sgd *opt, fa_error *err);
/* Forgets the momentum buffer (a new local round starts from zero). */
int fa_mlp_reset_momentum(fa_mlp *m, fa_error *err);

/* Copies the momentum buffer v (n_params floats, the parameter layout)
 * from/to host memory: with the parameters, the network's whole training
 * state, so that a saved and restored local round takes the same steps.
 * Returns 0 or FA_ERR_CUDA. */
int fa_mlp_get_momentum(fa_mlp *m, float *host, fa_error *err);
int fa_mlp_set_momentum(fa_mlp *m, const float *host, fa_error *err);

/* OpenBLAS picks its kernels once, when the library loads, from the CPU
 * model; a CPU newer than the library (OpenBLAS 0.3.21 and Intel model 207,
 * Emerald Rapids) gets the generic SSE3 "Prescott" kernels, about 5x slower
 * than the AVX-512 ones.  The environment variable OPENBLAS_CORETYPE, set
 * before the process starts, overrides the choice.
 *
 * fa_mlp_blas_core: the kernel set OpenBLAS chose ("SkylakeX", "Prescott"...).
 * fa_mlp_blas_advice: the OPENBLAS_CORETYPE value this CPU should use
 * ("SkylakeX" with AVX-512, "Haswell" with AVX2) when OpenBLAS chose a
 * generic kernel and the variable is not set, else NULL.  fa_mlp_new logs a
 * warning saying so (once per process) when it creates a CPU network. */
const char *fa_mlp_blas_core(void);
const char *fa_mlp_blas_advice(void);

/* For a program's main: when fa_mlp_blas_advice() has advice (and
 * FEDAGG_NO_REEXEC is not set), runs the program again (execv of
 * /proc/self/exe with argv) with OPENBLAS_CORETYPE set, since OpenBLAS reads
 * it only when it loads.  Returns when there is nothing to do or exec failed
 * (then the generic kernels run, and fa_mlp_new warns). */
void fa_mlp_blas_reexec(char **argv);

/* The same with this process's own command line (/proc/self/cmdline), for
 * code that no longer has main's argv (a subcommand of a dispatcher). */
void fa_mlp_blas_reexec_self(void);

/* Accuracy and mean loss over a whole data set (batches of max_batch). */
typedef struct fa_mlp_eval {
    double accuracy;  /* correct / n */
    double mean_loss; /* mean cross-entropy */
    uint32_t n;
} fa_mlp_eval;

int fa_mlp_evaluate(fa_mlp *m, const fa_dataset *d, fa_mlp_eval *out, fa_error *err);

#endif
