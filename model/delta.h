/* delta.h - a published model version as a quantised delta against the
 * previous one (docs/model.md, "Downloads as deltas").
 *
 * Version v of the published model is DEFINED, tensor by tensor, as the
 * reconstruction from version v-1 and the delta file of v:
 *
 *   published_v[i] = dtype_round( f32(published_{v-1}[i]) + (float)q[i] * scale[b] )
 *
 * with b = i / block, q[i] a step in [-qmax, qmax] and scale[b] a finite
 * float32 >= 0, where the width `bits` of the file (fedagg.delta.bits) is
 * 8 (qmax 127) or 4 (qmax 7): fa_delta_apply, the one function the
 * aggregator (when it writes model-<v>) and the region (when it rebuilds
 * model-<v> from the model it holds) both call, so both get the same bytes.
 * It takes the steps as int8 at either width; the 4-bit file's steps are
 * unpacked to int8 first (fa_delta_unpack), exactly.  This file is
 * compiled with -ffp-contract=off and the sum is two separate float32
 * operations: no fused multiply-add may change a result between builds.
 * The encoder (fa_delta_encode) chooses q and the scales from the float32
 * master weights: scale[b] = max_i |target[i] - f32(base[i])| / qmax over
 * the block, q = round-to-nearest-even((target - f32(base)) / scale).  What
 * the master and the published model differ by is not lost: the next
 * version's delta is taken from the published model, so it carries it
 * (error feedback on the downlink).
 *
 * The delta file is a safetensors file (common/fa_safetensors.h) holding
 *   "fedagg.header"   U8 [N]        the new model file's header, verbatim
 *                                   (8-byte length prefix, JSON, padding)
 *   "q.<name>"        the steps of tensor <name>, in one of two layouts:
 *                     bits 8: I8 [numel], step i in byte i (-128 is never
 *                             written and is refused);
 *                     bits 4: U8 [ceil(numel / 2)], two steps a byte, the
 *                             low nibble first: byte j holds step 2j in
 *                             bits 0-3 and step 2j+1 in bits 4-7, each in
 *                             two's complement (0..7 are 0..7, 9..15 are
 *                             -7..-1; nibble 8, -8, is never written and is
 *                             refused); for an odd numel the high nibble
 *                             of the last byte is padding and must be 0.
 *                             Blocks are powers of two >= 16, so every
 *                             block's steps start on a byte boundary.
 *   "s.<name>"        F32 [blocks]  its block scales, blocks = ceil(numel / block)
 *   "r.<name>"        <dtype> [...] the tensor's new bytes, raw (a federated
 *                                   integer tensor, which changes but is not
 *                                   floating)
 * and metadata fedagg.delta ("1"), fedagg.delta.from, fedagg.delta.to
 * (versions), fedagg.delta.base_sha256 (hex SHA-256 of the file it applies
 * to), fedagg.delta.bits ("4" or "8"), fedagg.delta.block,
 * fedagg.delta.size (the size of the file it rebuilds).  A tensor of the
 * new header with none of these is copied byte for byte from the base
 * (tensors that are not federated never change).
 */
#ifndef FA_MODEL_DELTA_H
#define FA_MODEL_DELTA_H

#include <stddef.h>
#include <stdint.h>

#include "common/fa_err.h"
#include "common/fa_safetensors.h"

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

/* Whether bits is a step width written and read (4 or 8). */
int fa_delta_bits_ok(uint64_t bits);

/* The largest |step| at a width accepted by fa_delta_bits_ok: 2^(bits-1) - 1. */
int fa_delta_qmax(unsigned bits);

/* Bytes of the steps of n elements at a width: n at 8 bits, ceil(n / 2) at 4. */
uint64_t fa_delta_q_bytes(uint64_t n, unsigned bits);

/* Writes n steps, each in [-qmax, qmax] of the width, in the file's layout
 * at that width (see above): fa_delta_q_bytes(n, bits) bytes to out. */
void fa_delta_pack(unsigned bits, const int8_t *q, size_t n, uint8_t *out);

/* Reads n steps of the file's layout at a width from
 * fa_delta_q_bytes(n, bits) bytes: q[i] = step i, the exact inverse of
 * fa_delta_pack.  Returns 0, or FA_ERR_PARSE with *bad the index of the
 * first step that is no step of the width (-128 at 8 bits, nibble 8 at 4),
 * or *bad = n when the padding nibble of an odd n is not 0; q is then
 * unspecified. */
int fa_delta_unpack(unsigned bits, const uint8_t *in, size_t n, int8_t *q, size_t *bad);

/* Number of scales of a tensor of numel elements. */
uint64_t fa_delta_blocks(uint64_t numel, uint32_t block);

/* Encodes n elements of one floating tensor starting at a block boundary
 * (element index a multiple of block) at a width accepted by
 * fa_delta_bits_ok: base holds their current published bytes in dtype
 * (little-endian, possibly unaligned), target the float32 values wanted.
 * Writes q[0..n) (int8, in [-qmax, qmax]; fa_delta_pack lays them out for
 * the file) and scale[0..ceil(n / block)).  A block
 * whose differences are all zero, or not finite, gets scale 0 and q 0
 * (non-finite differences are skipped when choosing the scale and give q 0). */
void fa_delta_encode(fa_st_dtype dtype, const void *base, const float *target, size_t n,
                     uint32_t block, unsigned bits, int8_t *q, float *scale);

/* The reconstruction (see above) of n elements starting at a block
 * boundary: out[i] = dtype_round(f32(base[i]) + (float)q[i] * scale[i / block]),
 * out in dtype bytes (may not alias base), q as int8 at any width (a 4-bit
 * file's steps through fa_delta_unpack).  dtype must be floating. */
void fa_delta_apply(fa_st_dtype dtype, const void *base, const int8_t *q, const float *scale,
                    size_t n, uint32_t block, void *out);

/* What a delta file says of itself (fa_delta_reconstruct fills it). */
typedef struct fa_delta_info {
    uint64_t from, to;       /* versions */
    uint8_t base_sha256[32]; /* the file it applies to */
    uint32_t bits;           /* of a step: 4 or 8 */
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
 * dtype and element count (q: the layout of the file's bits); that every
 * scale is finite and >= 0 and every step one of the width (no -128 at 8
 * bits, no nibble 8 and a zero padding nibble at 4); that a tensor copied
 * from the base has the same dtype and size there.  Returns 0,
 * FA_ERR_PARSE (a malformed delta or header: the message names the file
 * and the tensor), FA_ERR_VERIFY (base is not the model the delta applies
 * to: both digests named), FA_ERR_UNSUPPORTED (bits other than 4 and 8),
 * FA_ERR_NOTFOUND, FA_ERR_IO, FA_ERR_NOMEM. */
int fa_delta_reconstruct(const char *base_path, const char *delta_path, const char *out_path,
                         uint8_t sha256[32], fa_delta_info *info, fa_error *err);

/* SHA-256 of a whole file.  Returns 0, FA_ERR_NOTFOUND, FA_ERR_IO or FA_ERR_CRYPTO. */
int fa_delta_file_sha256(const char *path, uint8_t out[32], uint64_t *size, fa_error *err);

#endif
