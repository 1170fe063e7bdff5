/* quantize.h - a region's federated delta made ready for the codec of
 * secure aggregation (crypto/secagg.h), with the public per-tensor ranges of
 * model/tensors.h.
 *
 * With per-tensor ranges (fedagg.proto QuantParams.per_tensor) the worker,
 * not the codec, bounds and scales the update:
 *
 *   1. L2 bound (l2_mode CLIP_L2 or CLIP_BOTH): when ||delta||_2 > l2_bound,
 *      the whole federated delta is scaled by l2_bound / ||delta||_2 (in
 *      the model's own units, so the bound means the same for every tensor);
 *   2. each federated tensor's slice is divided by its range r > 0, so that
 *      the codec (clip_mode COORDINATE, clip_value 1) quantises [-1, 1];
 *      coordinates beyond it saturate there.
 *
 * What saturation cuts is measured (and logged, and exported) because it is
 * what the adaptive ranges are tuned against:
 *
 *   clipped_coords    coordinates with |delta_i / r| > 1
 *   clipped_fraction  sum_i (|z_i| - r_t(i))^2 over the clipped ones, divided
 *                     by sum_i z_i^2, where z is the delta after the L2
 *                     bound (model units): the share of the update's squared
 *                     L2 norm ("mass") the codec will not carry
 *
 * Without per-tensor ranges the vector is left as it is (the codec clips
 * with its configured clip_l2_norm and clip_value) and the same statistics
 * are computed against that codec: L2 scaling when clip_mode is not
 * COORDINATE (as crypto/secagg_client.c does), range clip_value for every
 * coordinate.
 *
 * Pure: no I/O, no allocation.
 */
#ifndef FA_WORKER_QUANTIZE_H
#define FA_WORKER_QUANTIZE_H

#include <stddef.h>
#include <stdint.h>

#include "common/fa_err.h"
#include "model/tensors.h"

/* config.proto ClipMode values. */
enum {
    FA_QUANT_CLIP_L2 = 0,
    FA_QUANT_CLIP_COORDINATE = 1,
    FA_QUANT_CLIP_BOTH = 2,
    FA_QUANT_CLIP_NONE = 3
};

typedef struct fa_quantize_params {
    int per_tensor;      /* QuantParams.per_tensor */
    int l2_mode;         /* per_tensor: QuantParams.l2_clip_mode (ClipMode) */
    double l2_bound;     /* QuantParams.clip_l2_norm (> 0 when l2_mode is L2 or BOTH) */
    int codec_clip_mode; /* QuantParams.clip_mode: the codec's own (not per_tensor) */
    double clip_value;   /* QuantParams.clip_value (the codec's range when not per_tensor) */
} fa_quantize_params;

struct Fedagg__QuantParams;

/* Fills p from the federation's QuantParams.  Returns 0 or FA_ERR_PROTOCOL
 * (q NULL; an unknown clip mode; a bound or range that is not finite and
 * positive where it is used: the message names the field). */
int fa_quantize_params_from_proto(fa_quantize_params *p, const struct Fedagg__QuantParams *q,
                                  fa_error *err);

typedef struct fa_quantize_stats {
    uint64_t d;               /* coordinates */
    double l2_norm;           /* ||delta||_2 in model units, before any bound */
    double l2_scale;          /* factor of the L2 bound (1 when it did not bind) */
    uint64_t clipped_coords;  /* coordinates beyond the quantiser's range */
    double clipped_fraction;  /* share of the squared L2 norm saturation cuts, in [0, 1] */
    const char *worst_tensor; /* tensor with the most clipped coordinates (in t); NULL when none */
    uint64_t worst_clipped;   /* its clipped coordinates */
    uint64_t worst_numel;     /* its size */
} fa_quantize_stats;

/* Prepares the federated delta fed[0 .. d) of table t (d =
 * fa_tensors_fed_numel(t)) for fa_round_client_run, in place, and measures
 * it (st may be NULL).  With per_tensor the ranges of t's federated tensors
 * are used and must all be set.  Returns 0 or
 *   FA_ERR_INVAL     d is not t's federated size
 *   FA_ERR_PROTOCOL  per_tensor and a federated tensor has no range (the
 *                    model's fedagg.federated metadata): names the tensor
 *   FA_ERR_RANGE     the delta is not finite (nothing is changed)
 * On error fed is unchanged. */
int fa_quantize_prepare(float *fed, size_t d, const fa_tensors *t, const fa_quantize_params *p,
                        fa_quantize_stats *st, fa_error *err);

#endif
