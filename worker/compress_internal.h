/* compress_internal.h - what compress.c shares with the compressors
 * (compress_powersgd.c, compress_topk.c, compress_qsgd8.c). */
#ifndef FA_WORKER_COMPRESS_INTERNAL_H
#define FA_WORKER_COMPRESS_INTERNAL_H

#include "model/rng.h"
#include "worker/compress.h"

typedef struct fa_compress_ops {
    /* Sets up c->impl once the common fields are filled. */
    int (*init)(fa_compress *c, fa_error *err);
    /* One step: grad in = local gradient, out = compressed sum.  Does its own
     * error feedback (c->err) and may use c->step (calls before this one). */
    int (*run)(fa_compress *c, fa_comm *comm, float *grad, fa_error *err);
    /* Forgets algorithm state other than c->err (warm-start Q). */
    void (*reset)(fa_compress *c);
    void (*free)(fa_compress *c);
    size_t (*payload)(const fa_compress *c);
    /* Its own state parts (fa_compress_state_parts) into parts[], at most
     * FA_COMPRESS_MAX_PARTS - 3; NULL when it keeps none beyond c's. */
    size_t (*state_parts)(fa_compress *c, fa_compress_part *parts);
} fa_compress_ops;

struct fa_compress {
    fa_compress_config cfg;
    const fa_compress_ops *ops;
    fa_compress_tensor *tensors; /* sorted by offset, validated */
    size_t n_tensors;
    size_t n;      /* floats in the block */
    float *err;    /* (n) error-feedback memory e_i */
    uint64_t step; /* completed calls */
    int rank;
    fa_rng rng;    /* this rank's own stream (QSGD8 rounding) */
    void *impl;
};

extern const fa_compress_ops fa_compress_powersgd_ops;
extern const fa_compress_ops fa_compress_topk_ops;
extern const fa_compress_ops fa_compress_qsgd8_ops;

/* m = grad + err when error feedback is on. */
void fa_compress_add_error(fa_compress *c, float *grad);

#endif
