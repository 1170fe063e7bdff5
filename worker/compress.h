/* compress.h - compression of the local gradient all-reduce (docs/architecture.md, Inside a region).
 *
 * A compressor replaces `fa_comm_allreduce_sum_f32(comm, grad, n)` on the
 * gradient block: every rank passes its local gradient g_i, and every rank
 * gets back the same approximation of the SUM over ranks.  The block is
 * described by a tensor table (offset, rows, cols of each tensor, e.g. from
 * an fa_mlp_layout), because PowerSGD works on per-layer matrices.
 *
 *   NONE      plain all-reduce of float32.                    4 n bytes/step
 *   POWERSGD  Vogels, Karimireddy and Jaggi, "PowerSGD: Practical Low-Rank
 *             Gradient Compression for Distributed Optimization", NeurIPS
 *             2019, Algorithm 1 with error feedback (Algorithm 2) and warm
 *             start, arranged as PyTorch's powerSGD_hook: each tensor viewed
 *             as a (shape[0], numel / shape[0]) matrix M; P = M Q, all-reduce
 *             P, orthogonalise P (Gram-Schmidt), Q = M^T P, all-reduce Q,
 *             result P Q^T.  Tensors below min_compress_numel, 1-D tensors
 *             (biases) and matrices that rank r would not shrink at least 2x
 *             are all-reduced uncompressed in the same message as P; before
 *             powersgd_start_step every tensor is (plain all-reduce, no
 *             error feedback).  Q is drawn from N(0,1) with the shared seed
 *             (identical on every rank) and, with warm start, reused.
 *                                         4 (sum (rows+cols) r + small) bytes/step
 *   TOPK      the k = ceil(fraction n) largest-magnitude coordinates of each
 *             rank (over the whole block), all-gathered as (uint32 index,
 *             float value) pairs and summed.            8 k bytes/step
 *   QSGD8     8-bit stochastic rounding with one shared scale: s = max over
 *             ranks of max |m_i| (an all-reduce of one float), q = floor(127
 *             m / s + u), u ~ U[0,1), all-gathered as int8 and summed as
 *             s / 127 sum q.  Unbiased.               n + 4 bytes/step
 *
 * Error feedback (all three lossy kinds, on by default): each rank adds to
 * its gradient what compression dropped from it last time, m_i = g_i + e_i,
 * and keeps e_i <- m_i - c_i where c_i is its own share of the result (so
 * sum_i c_i is exactly the returned sum): for PowerSGD c_i = P Q_i^T with its
 * local Q_i = M_i^T P before the all-reduce; for top-k the selected
 * coordinates; for QSGD8 s q_i / 127.  Nothing is lost, only delayed.
 *
 * A compressor keeps state across calls (errors, Q, step counter, random
 * stream) and is used by one rank with one communicator; all ranks must
 * create theirs with the same config and tensor table.
 */
#ifndef FA_WORKER_COMPRESS_H
#define FA_WORKER_COMPRESS_H

#include <stddef.h>
#include <stdint.h>

#include "common/fa_err.h"
#include "model/mlp.h"
#include "worker/comm.h"

/* Same values as config.proto's CompressionKind. */
enum fa_compress_kind {
    FA_COMPRESS_NONE = 0,
    FA_COMPRESS_POWERSGD = 1,
    FA_COMPRESS_TOPK = 2,
    FA_COMPRESS_QSGD8 = 3,
};

typedef struct fa_compress_config {
    int kind;                     /* enum fa_compress_kind */
    uint32_t powersgd_rank;       /* r >= 1; default 4 */
    uint32_t powersgd_start_step; /* plain all-reduce before this call number; default 10 */
    uint32_t min_compress_numel;  /* smaller tensors go uncompressed; default 1024 */
    double topk_fraction;         /* (0, 1]; default 0.01 */
    int error_feedback;           /* default 1 */
    int warm_start;               /* PowerSGD: reuse Q across steps; default 1 */
    uint64_t seed;                /* PowerSGD's Q (same on every rank), QSGD8's rounding
                                     (mixed with the rank); default 1 */
} fa_compress_config;

void fa_compress_config_default(fa_compress_config *c);

/* Fills c from the worker config's Compression message (NULL: defaults) and
 * seed.  Returns 0 or FA_ERR_INVAL naming the field (rank 0, fraction
 * outside (0, 1], unknown kind). */
struct Fedagg__Compression;
int fa_compress_config_from_proto(fa_compress_config *c, const struct Fedagg__Compression *pb,
                                  uint64_t seed, fa_error *err);

/* "none", "powersgd", "topk", "qsgd8"; NULL for an unknown kind. */
const char *fa_compress_kind_name(int kind);
/* Parses those names (case-insensitive); returns 0 or FA_ERR_INVAL. */
int fa_compress_kind_parse(const char *name, int *kind);

/* One tensor of the gradient block, viewed as a row-major (rows, cols)
 * matrix: rows = shape[0], cols = numel / shape[0]; a 1-D tensor of n
 * elements is (n, 1). */
typedef struct fa_compress_tensor {
    size_t offset; /* first float in the block */
    size_t rows;
    size_t cols;
} fa_compress_tensor;

/* The tensor table of an MLP layout (tensors[] has room for l->n_tensors). */
void fa_compress_tensors_from_layout(const fa_mlp_layout *l, fa_compress_tensor *tensors);

typedef struct fa_compress fa_compress;

/* Creates a compressor for a block of n floats made of the given tensors
 * (copied; they must lie inside the block and not overlap; gaps are
 * all-reduced uncompressed like small tensors), for rank `rank` (the
 * seed of QSGD8's rounding).  Returns 0, FA_ERR_INVAL (bad config or table:
 * the message names the field or tensor), FA_ERR_RANGE (TOPK with n >= 2^32)
 * or FA_ERR_NOMEM. */
int fa_compress_new(fa_compress **out, const fa_compress_config *cfg,
                    const fa_compress_tensor *tensors, size_t n_tensors, size_t n, int rank,
                    fa_error *err);

/* NULL is a no-op. */
void fa_compress_del(fa_compress *c);

/* grad[0..n): in, this rank's gradient (host memory); out, the compressed
 * sum over the ranks of comm, identical on every rank.  Collective.  Returns
 * 0, FA_ERR_INVAL (n differs from the block's) or the communicator's errors. */
int fa_compress_allreduce(fa_compress *c, fa_comm *comm, float *grad, size_t n, fa_error *err);

/* This rank's error-feedback memory e_i (n floats; all zero when error
 * feedback is off or with NONE), for tests and diagnostics. */
const float *fa_compress_error(const fa_compress *c);

/* Bytes this rank contributes per step once compression is on (the
 * steady-state payload, as fa_comm_stats counts it), for the benchmark and
 * the logs. */
size_t fa_compress_payload_bytes(const fa_compress *c);

/* Calls of fa_compress_allreduce so far (the step PowerSGD compares with
 * its start step). */
uint64_t fa_compress_steps(const fa_compress *c);

/* Forgets the error memory and the warm-start Q (keeps the step count). */
void fa_compress_reset(fa_compress *c);

/* One piece of a compressor's state: a name and a view of its memory. */
typedef struct fa_compress_part {
    const char *name; /* "step", "rng", "error", "powersgd.q", ... */
    void *data;       /* the compressor's own memory, host byte order */
    size_t len;       /* bytes */
} fa_compress_part;

#define FA_COMPRESS_MAX_PARTS 8

/* Everything of c that carries over from one fa_compress_allreduce call to
 * the next: the step count, this rank's random stream, its error memory
 * (with error feedback), and the algorithm's own (PowerSGD: whether it has a
 * warm-start Q, Q itself and the shared stream Q is drawn from; top-k has
 * none).  Scratch buffers are not part of it.  Copying the parts out saves
 * the state; copying bytes of the same lengths back into a compressor made
 * with the same config and table restores it, and its next calls return
 * the same bits as the saved one's would have (a preempted local round,
 * worker/local_checkpoint.h).  Fills parts[] (room for
 * FA_COMPRESS_MAX_PARTS) and returns their number; names are unique. */
size_t fa_compress_state_parts(fa_compress *c, fa_compress_part *parts);

#endif
