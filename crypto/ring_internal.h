/* ring_internal.h - the ring Z_{2^k} on the wire, and the fixed-point codec
 * (internal to crypto/).
 *
 * In memory a ring element is a uint32_t whose arithmetic is mod 2^32; since
 * 2^k divides 2^32, reducing mod 2^k only when packing gives the same result
 * as reducing after every operation.  On the wire coordinate i occupies bits
 * [i*k, (i+1)*k) of the byte string, least significant bit first; eight
 * coordinates are exactly k bytes (a "group"), which is why streams are cut
 * at multiples of 8 coordinates.
 *
 * Codec: a value v in [-c, c] becomes q = floor(v * s + u) with s =
 * (2^(b-1) - 1) / c and u uniform in [0, 1) from a seeded generator, so
 * E[q] = v * s (unbiased) and |q| <= 2^(b-1) - 1.  Stored as the k-bit two's
 * complement of q, the sum of n such values needs b + ceil(log2 n) bits.
 */
#ifndef FA_CRYPTO_RING_INTERNAL_H
#define FA_CRYPTO_RING_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

/* Hot loops run in chunks of a fixed FA_CHUNK elements, which the compiler
 * vectorises even under -O2's cheap cost model, and are compiled once per
 * instruction set (AVX-512, AVX2, baseline x86-64) with the best one picked
 * when the program loads (GCC target_clones, an ifunc). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__gnu_linux__)
#define FA_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define FA_CLONES
#endif
#define FA_CHUNK 64

static inline uint32_t fa_ring_mask(unsigned k)
{
    return k >= 32 ? 0xffffffffu : ((1u << k) - 1);
}

/* ceil(n * k / 8) */
static inline uint64_t fa_ring_packed_bytes(uint64_t n, unsigned k)
{
    return (n / 8) * k + ((n % 8) * k + 7) / 8;
}

/* Packs n coordinates (the low k bits of each) into fa_ring_packed_bytes(n, k)
 * bytes; unused high bits of a last partial byte are zero. */
void fa_ring_pack(uint8_t *restrict out, const uint32_t *restrict in, size_t n, unsigned k);

/* acc[i] += (sign > 0) or -= (sign < 0) coordinate i of the packed bytes, for
 * n coordinates (reads exactly fa_ring_packed_bytes(n, k) bytes). */
void fa_ring_unpack_add(uint32_t *restrict acc, const uint8_t *restrict in, size_t n, unsigned k,
                        int sign);

/* out[i] = coordinate i. */
void fa_ring_unpack(uint32_t *restrict out, const uint8_t *restrict in, size_t n, unsigned k);

/* Interprets the low k bits as two's complement. */
static inline int64_t fa_ring_signed(uint32_t v, unsigned k)
{
    uint32_t m = fa_ring_mask(k);
    v &= m;
    if (k < 32 && (v >> (k - 1)))
        return (int64_t)v - ((int64_t)1 << k);
    return k == 32 ? (int64_t)(int32_t)v : (int64_t)v;
}

/* Quantiser of one input vector: t = clamp(x * pre, -limit, limit) * mul,
 * q = floor(t + u).  pre is the L2 clip factor (1 without L2 clipping), limit
 * the quantiser's range clip_value, mul = weight * qmax / limit. */
typedef struct fa_codec {
    double pre;
    double limit;
    double mul;
    int32_t qmax; /* 2^(b-1) - 1 */
} fa_codec;

/* out[i] = ring(q(x[i])), with rnd[i] the uniform 32-bit draws. */
void fa_codec_encode(const fa_codec *c, const float *restrict x, size_t n,
                     const uint32_t *restrict rnd, uint32_t *restrict out);

/* floor(scaled + u) clamped to [-qmax, qmax], for one value already in
 * quantiser units (the weight coordinate). */
int32_t fa_codec_round(double scaled, uint32_t rnd, int32_t qmax);

/* sqrt(sum x[i]^2) in double. */
double fa_codec_l2_norm(const float *x, size_t n);

/* The same in pieces, for a caller that makes another pass over each
 * piece while it is in cache: fa_codec_l2 a = {{0}, 0}, then
 * fa_codec_l2_add for consecutive pieces, every one but the last a
 * multiple of 16 long; fa_codec_l2_done(&a) is then fa_codec_l2_norm of
 * the whole, bit for bit (the same lanes, the same order of additions). */
typedef struct fa_codec_l2 {
    double lane[16];
    double tail;
} fa_codec_l2;
void fa_codec_l2_add(fa_codec_l2 *a, const float *x, size_t n);
double fa_codec_l2_done(const fa_codec_l2 *a);

#endif
