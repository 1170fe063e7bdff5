#include "crypto/ring_internal.h"

#include <math.h>
#include <string.h>

#include "common/fa_endian.h"

/* The packers are instantiated once per k (1..32) so that every shift and
 * offset below is a compile-time constant; the bodies then compile to
 * straight-line loads, shifts and stores. */
#define FA_INLINE static inline __attribute__((always_inline))

/* Eight coordinates -> K bytes. */
FA_INLINE void pack_group(uint8_t *restrict o, const uint32_t *restrict x, const unsigned K)
{
    const uint64_t mask = K >= 32 ? 0xffffffffull : ((1ull << K) - 1);
    uint64_t w = 0;
    unsigned nb = 0;
#pragma GCC unroll 8
    for (unsigned j = 0; j < 8; j++) {
        uint64_t v = x[j] & mask;
        w |= v << nb;
        nb += K;
        if (nb >= 64) {
            fa_le_put_u64(o, w);
            o += 8;
            nb -= 64;
            w = nb ? v >> (K - nb) : 0;
        }
    }
    for (unsigned b = 0; b < nb; b += 8) {
        *o++ = (uint8_t)w;
        w >>= 8;
    }
}

FA_INLINE void pack_k(uint8_t *restrict out, const uint32_t *restrict in, size_t groups,
                      const unsigned K)
{
    for (size_t g = 0; g < groups; g++)
        pack_group(out + g * K, in + 8 * g, K);
}

/* Eight coordinates from K bytes; needs 8 readable bytes past the group. */
FA_INLINE void unpack_add_group(uint32_t *restrict acc, const uint8_t *restrict in,
                                const unsigned K, const int sub)
{
    const uint64_t mask = K >= 32 ? 0xffffffffull : ((1ull << K) - 1);
#pragma GCC unroll 8
    for (unsigned j = 0; j < 8; j++) {
        const unsigned bit = j * K;
        uint32_t v = (uint32_t)((fa_le_get_u64(in + bit / 8) >> (bit % 8)) & mask);
        if (sub)
            acc[j] -= v;
        else
            acc[j] += v;
    }
}

FA_INLINE void unpack_add_k(uint32_t *restrict acc, const uint8_t *restrict in, size_t groups,
                            const unsigned K, const int sub)
{
    for (size_t g = 0; g < groups; g++)
        unpack_add_group(acc + 8 * g, in + g * K, K, sub);
}

#define FA_K_CASES(X)                                                                              \
    X(1)                                                                                           \
    X(2)                                                                                           \
    X(3)                                                                                           \
    X(4)                                                                                           \
    X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15) X(16) X(17) X(18) X(19) X(20)     \
        X(21) X(22) X(23) X(24) X(25) X(26) X(27) X(28) X(29) X(30) X(31) X(32)

#define FA_PACK_FN(k)                                                                              \
    static void pack_##k(uint8_t *restrict o, const uint32_t *restrict i, size_t g)                \
    {                                                                                              \
        pack_k(o, i, g, k);                                                                        \
    }                                                                                              \
    static void unpack_add_##k(uint32_t *restrict a, const uint8_t *restrict i, size_t g)          \
    {                                                                                              \
        unpack_add_k(a, i, g, k, 0);                                                               \
    }                                                                                              \
    static void unpack_sub_##k(uint32_t *restrict a, const uint8_t *restrict i, size_t g)          \
    {                                                                                              \
        unpack_add_k(a, i, g, k, 1);                                                               \
    }
FA_K_CASES(FA_PACK_FN)

typedef void (*pack_fn)(uint8_t *restrict, const uint32_t *restrict, size_t);
typedef void (*unpack_fn)(uint32_t *restrict, const uint8_t *restrict, size_t);

#define FA_PACK_ENTRY(k) pack_##k,
#define FA_UNPACK_ADD_ENTRY(k) unpack_add_##k,
#define FA_UNPACK_SUB_ENTRY(k) unpack_sub_##k,
static const pack_fn pack_table[33] = {NULL, FA_K_CASES(FA_PACK_ENTRY)};
static const unpack_fn unpack_add_table[33] = {NULL, FA_K_CASES(FA_UNPACK_ADD_ENTRY)};
static const unpack_fn unpack_sub_table[33] = {NULL, FA_K_CASES(FA_UNPACK_SUB_ENTRY)};

void fa_ring_pack(uint8_t *restrict out, const uint32_t *restrict in, size_t n, unsigned k)
{
    size_t groups = n / 8, rest = n % 8;
    if (k < 1 || k > 32)
        return;
    pack_table[k](out, in, groups);
    if (rest) {
        /* A last partial group: pack a zero-padded group into a temporary and
         * keep its first ceil(rest * k / 8) bytes. */
        uint32_t tmp[8] = {0};
        uint8_t bytes[32];
        memcpy(tmp, in + 8 * groups, rest * sizeof(uint32_t));
        pack_table[k](bytes, tmp, 1);
        memcpy(out + groups * k, bytes, (rest * k + 7) / 8);
    }
}

void fa_ring_unpack_add(uint32_t *restrict acc, const uint8_t *restrict in, size_t n, unsigned k,
                        int sign)
{
    const unpack_fn fn = sign < 0 ? unpack_sub_table[k] : unpack_add_table[k];
    size_t groups = n / 8, rest = n % 8, bytes = (size_t)fa_ring_packed_bytes(n, k);
    size_t safe;

    if (k < 1 || k > 32)
        return;
    /* Groups whose 8-byte loads stay inside the buffer go straight; the last
     * few go through a zero-padded copy. */
    safe = bytes >= 8 ? (bytes - 8) / k : 0;
    if (safe > groups)
        safe = groups;
    fn(acc, in, safe);
    for (size_t g = safe; g < groups + (rest ? 1 : 0); g++) {
        uint8_t tmp[32 + 8] = {0};
        uint32_t vals[8] = {0};
        size_t off = g * k, len = bytes - off < k ? bytes - off : k;
        size_t m = g < groups ? 8 : rest;
        memcpy(tmp, in + off, len);
        unpack_add_table[k](vals, tmp, 1);
        for (size_t j = 0; j < m; j++) {
            if (sign < 0)
                acc[8 * g + j] -= vals[j];
            else
                acc[8 * g + j] += vals[j];
        }
    }
}

void fa_ring_unpack(uint32_t *restrict out, const uint8_t *restrict in, size_t n, unsigned k)
{
    memset(out, 0, n * sizeof(uint32_t));
    fa_ring_unpack_add(out, in, n, k, 1);
}
