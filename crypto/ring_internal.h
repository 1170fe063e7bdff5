/* ring_internal.h - the ring Z_{2^k} on the wire (internal to crypto/).
 *
 * In memory a ring element is a uint32_t whose arithmetic is mod 2^32; since
 * 2^k divides 2^32, reducing mod 2^k only when packing gives the same result
 * as reducing after every operation.  On the wire coordinate i occupies bits
 * [i*k, (i+1)*k) of the byte string, least significant bit first; eight
 * coordinates are exactly k bytes (a "group"), which is why streams are cut
 * at multiples of 8 coordinates.

 *
 * The fixed-point codec that fills it is codec_internal.h.
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

#endif
