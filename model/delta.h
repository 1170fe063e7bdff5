/* delta.h - a published model version as a quantised delta against the
 * previous one (issue 12, "Bytes").
 *
 * Version v of the published model is DEFINED, tensor by tensor, as the
 * reconstruction from version v-1 and the delta file of v:
 *
 *   published_v[i] = dtype_round( f32(published_{v-1}[i]) + (float)q[i] * scale[b] )
 *
 * with b = i / block, q[i] an int8 in [-127, 127] and scale[b] a finite
 * float32 >= 0: fa_delta_apply, the one function the aggregator (when it
 * writes model-<v>) and the region (when it rebuilds model-<v> from the
 * model it holds) both call, so both get the same bytes.  This file is
 * compiled with -ffp-contract=off and the sum is two separate float32
 * operations: no fused multiply-add may change a result between builds.
 * The encoder (fa_delta_encode) chooses q and the scales from the float32
 * master weights: scale[b] = max_i |target[i] - f32(base[i])| / 127 over
 * the block, q = round-to-nearest-even((target - f32(base)) / scale).  What
 * the master and the published model differ by is not lost: the next
 * version's delta is taken from the published model, so it carries it
 * (error feedback on the downlink).
 *
 * The delta file is a safetensors file (common/fa_safetensors.h) holding
 *   "fedagg.header"   U8 [N]        the new model file's header, verbatim
 *                                   (8-byte length prefix, JSON, padding)
 *   "q.<name>"        I8 [numel]    the quantised delta of tensor <name>
 *   "s.<name>"        F32 [blocks]  its block scales, blocks = ceil(numel / block)
 *   "r.<name>"        <dtype> [...] the tensor's new bytes, raw (a federated
 *                                   integer tensor, which changes but is not
 *                                   floating)
 * and metadata fedagg.delta ("1"), fedagg.delta.from, fedagg.delta.to
 * (versions), fedagg.delta.base_sha256 (hex SHA-256 of the file it applies
 * to), fedagg.delta.bits ("8"), fedagg.delta.block, fedagg.delta.size (the
 * size of the file it rebuilds).  A tensor of the new header with none of
 * these is copied byte for byte from the base (tensors that are not
 * federated never change).
 */
#ifndef FA_MODEL_DELTA_H
#define FA_MODEL_DELTA_H

#include <stddef.h>
#include <stdint.h>

#include "common/fa_err.h"
#include "common/fa_safetensors.h"

/* The one quantiser width written and read (int8 steps in [-127, 127]). */
#define FA_DELTA_BITS 8
#define FA_DELTA_QMAX 127
/* Block sizes accepted: a power of two in [FA_DELTA_MIN_BLOCK, FA_DELTA_MAX_BLOCK]. */
#define FA_DELTA_MIN_BLOCK 16u
#define FA_DELTA_MAX_BLOCK 65536u
/* The names and keys of the delta file. */
#define FA_DELTA_HEADER_TENSOR "fedagg.header"
#define FA_DELTA_META_FORMAT "fedagg.delta"
#define FA_DELTA_META_FROM "fedagg.delta.from"
#define FA_DELTA_META_TO "fedagg.delta.to"
#define FA_DELTA_META_BASE "fedagg.delta.base_sha256"
#define FA_DELTA_META_BITS "fedagg.delta.bits"
#define FA_DELTA_META_BLOCK "fedagg.delta.block"
#define FA_DELTA_META_SIZE "fedagg.delta.size"

/* Whether block is an accepted block size. */
int fa_delta_block_ok(uint64_t block);

/* Number of scales of a tensor of numel elements. */
uint64_t fa_delta_blocks(uint64_t numel, uint32_t block);

/* Encodes n elements of one floating tensor starting at a block boundary
 * (element index a multiple of block): base holds their current published
 * bytes in dtype (little-endian, possibly unaligned), target the float32
 * values wanted.  Writes q[0..n) and scale[0..ceil(n / block)).  A block
 * whose differences are all zero, or not finite, gets scale 0 and q 0
 * (non-finite differences are skipped when choosing the scale and give q 0). */
void fa_delta_encode(fa_st_dtype dtype, const void *base, const float *target, size_t n,
                     uint32_t block, int8_t *q, float *scale);

/* The reconstruction (see above) of n elements starting at a block
 * boundary: out[i] = dtype_round(f32(base[i]) + (float)q[i] * scale[i / block]),
 * out in dtype bytes (may not alias base).  dtype must be floating. */
void fa_delta_apply(fa_st_dtype dtype, const void *base, const int8_t *q, const float *scale,
                    size_t n, uint32_t block, void *out);

/* What a delta file says of itself (fa_delta_reconstruct fills it). */
typedef struct fa_delta_info {
    uint64_t from, to;       /* versions */
    uint8_t base_sha256[32]; /* the file it applies to */
    uint32_t block;
    uint64_t size;      /* bytes of the file it rebuilds */
    uint64_t quantised; /* elements rebuilt from q and scales */
} fa_delta_info;

/* Rebuilds the model file of the delta at delta_path from the model file
 * at base_path into out_path (atomically replaced; never left behind on
 * failure), and gives its SHA-256 and what the delta said.  Everything is
 * checked before out_path is touched by a commit: the delta's format,
 * bits, block and size; that base_path's SHA-256 is the one the delta is
 * against; that the header parses and tiles `size` bytes; that every
 * "q."/"s."/"r." tensor belongs to a tensor of the header, with the right
 * dtype and element count; that every scale is finite and >= 0; that a
 * tensor copied from the base has the same dtype and size there.  Returns
 * 0, FA_ERR_PARSE (a malformed delta or header: the message names the file
 * and the tensor), FA_ERR_VERIFY (base is not the model the delta applies
 * to: both digests named), FA_ERR_UNSUPPORTED (bits other than 8),
 * FA_ERR_NOTFOUND, FA_ERR_IO, FA_ERR_NOMEM. */
int fa_delta_reconstruct(const char *base_path, const char *delta_path, const char *out_path,
                         uint8_t sha256[32], fa_delta_info *info, fa_error *err);

/* SHA-256 of a whole file.  Returns 0, FA_ERR_NOTFOUND, FA_ERR_IO or FA_ERR_CRYPTO. */
int fa_delta_file_sha256(const char *path, uint8_t out[32], uint64_t *size, fa_error *err);

#endif
